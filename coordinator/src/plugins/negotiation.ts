// One URL per resource: a GET whose Accept header prefers text/html (a browser navigating) gets
// the page, any other GET gets JSON. Pages are rendered with Eta templates from views/, always
// with what the layout needs: who is signed in, the session's CSRF token for its forms, and the
// one-time message a form post left (forms.ts). Pages load no inline script or style, so a strict
// Content-Security-Policy keeps anything that slipped into the output (log lines, commit
// messages) inert.
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { Eta } from 'eta';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { fmt, htmlHelpers } from '../views/format.ts';

/** A message a form post leaves for the page it redirects to, shown once. */
export interface Flash {
  /** 'error' beside the form named `form` (or at the top of the page), 'notice' at the top. */
  kind: 'error' | 'notice';
  message: string;
  /** The `_form` field of the form that failed, so the page shows the error beside it. */
  form?: string;
  /** What was typed, to fill the form in again (never passwords, tokens or secret values). */
  values?: Record<string, string | string[]>;
}

declare module '@fastify/secure-session' {
  interface SessionData {
    csrf: string;
    flash: Flash;
  }
}

/** Where to go after signing in: a path on this site, never another origin (resolved, not pattern-matched). */
export function sameSitePath(next: unknown): string {
  if (typeof next !== 'string' || !next.startsWith('/')) return '/';
  const base = 'http://deckhand.invalid';
  try {
    const url = new URL(next, base);
    return url.origin === base ? url.pathname + url.search + url.hash : '/';
  } catch {
    return '/';
  }
}

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

/** The session's CSRF token (made on first use); every page form posts it back as `_csrf`. */
export function csrfToken(request: FastifyRequest): string {
  let token = request.session.get('csrf');
  if (!token) {
    token = randomBytes(24).toString('base64url');
    request.session.set('csrf', token);
  }
  return token;
}

/** Leaves a message for the next page this session renders. */
export function setFlash(request: FastifyRequest, flash: Flash): void {
  request.session.set('flash', flash);
}

function takeFlash(request: FastifyRequest): Flash | null {
  const flash = request.session.get('flash');
  if (!flash) return null;
  request.session.set('flash', undefined);
  return flash;
}

const eta = new Eta({
  views: fileURLToPath(new URL('../views', import.meta.url)),
  autoEscape: true,
  cache: process.env.NODE_ENV === 'production',
});

const CSP = [
  "default-src 'self'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "connect-src 'self'",
  "form-action 'self'",
  "frame-ancestors 'none'",
  "base-uri 'none'",
  "object-src 'none'",
].join('; ');

export function renderPage(
  reply: FastifyReply,
  template: string,
  data: Record<string, unknown>,
): FastifyReply {
  const request = reply.request;
  const actor = request.actor;
  const page = {
    user: actor && actor.type === 'user' ? { email: actor.name, role: actor.role } : null,
    csrf: csrfToken(request),
    flash: takeFlash(request),
    path: request.url.split('?')[0],
  };
  return reply
    .header('vary', 'Accept')
    .header('cache-control', 'no-store')
    .header('content-security-policy', CSP)
    .header('referrer-policy', 'same-origin')
    .header('x-frame-options', 'DENY')
    .type('text/html; charset=utf-8')
    .send(eta.render(template, { title: 'Deckhand', page, fmt, h: htmlHelpers(page), ...data }));
}

/** A JSON answer that is already text (kept serialised): sent as it is, past the route's serialiser. */
export function sendJsonText(reply: FastifyReply, json: string): FastifyReply {
  return reply.type('application/json; charset=utf-8').send(json);
}
