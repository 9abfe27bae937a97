// One URL per resource: a GET whose Accept header prefers text/html (a browser navigating) gets
// the page, any other GET gets JSON. Pages are rendered with Eta templates from views/.
import { fileURLToPath } from 'node:url';
import { Eta } from 'eta';
import type { FastifyReply, FastifyRequest } from 'fastify';

/** The q-value of a media type the Accept header names explicitly, or null when it does not. */
function explicitQuality(accept: string, type: string): number | null {
  for (const part of accept.split(',')) {
    const [range, ...params] = part.split(';').map((s) => s.trim().toLowerCase());
    if (range !== type) continue;
    const q = params.find((p) => p.startsWith('q='));
    const value = q ? Number(q.slice(2)) : 1;
    return Number.isFinite(value) ? value : 0;
  }
  return null;
}

export function wantsHtml(request: FastifyRequest): boolean {
  const accept = request.headers.accept;
  if (!accept) return false;
  const html = explicitQuality(accept, 'text/html');
  if (!html) return false;
  const json = explicitQuality(accept, 'application/json');
  return json === null || html >= json;
}

const eta = new Eta({
  views: fileURLToPath(new URL('../views', import.meta.url)),
  autoEscape: true,
  cache: process.env.NODE_ENV === 'production',
});

export function renderPage(
  reply: FastifyReply,
  template: string,
  data: Record<string, unknown>,
): FastifyReply {
  return reply
    .header('vary', 'Accept')
    .type('text/html; charset=utf-8')
    .send(eta.render(template, { title: 'Deckhand', ...data }));
}
