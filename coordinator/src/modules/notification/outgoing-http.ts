// Outgoing HTTP for notifications: signing in the style of the Standard Webhooks specification
// (https://www.standardwebhooks.com/), and the one POST both webhooks and commit statuses make —
// bounded in time, never following redirects, and answering with what happened rather than
// throwing, so every attempt can be recorded.
import { createHmac, randomBytes } from 'node:crypto';

/** A new signing secret: `whsec_` and 24 random bytes in base64, as the specification suggests. */
export function newWebhookSecret(): string {
  return `whsec_${randomBytes(24).toString('base64')}`;
}

/**
 * `v1,<base64 HMAC-SHA256 of "<id>.<timestamp>.<body>">`, keyed with the base64-decoded part of
 * the secret after `whsec_`.
 */
export function signWebhook(secret: string, id: string, timestampSeconds: number, body: string): string {
  const key = Buffer.from(secret.replace(/^whsec_/, ''), 'base64');
  const mac = createHmac('sha256', key).update(`${id}.${timestampSeconds}.${body}`).digest('base64');
  return `v1,${mac}`;
}

export interface PostResult {
  ok: boolean;
  statusCode: number | null;
  /** Why it failed: the network error, or the status with the start of the answer. */
  error: string | null;
  durationMs: number;
}

const MAX_ERROR_BODY = 300;

export async function postJson(
  url: string,
  headers: Record<string, string>,
  body: string,
  timeoutMs: number,
): Promise<PostResult> {
  const started = performance.now();
  const elapsed = () => Math.round(performance.now() - started);
  try {
    const res = await fetch(url, {
      method: 'POST',
      headers,
      body,
      redirect: 'manual',
      signal: AbortSignal.timeout(timeoutMs),
    });
    const text = await readSome(res);
    if (res.status >= 200 && res.status < 300) {
      return { ok: true, statusCode: res.status, error: null, durationMs: elapsed() };
    }
    const said = text.replace(/\s+/g, ' ').trim();
    return {
      ok: false,
      statusCode: res.status,
      error: `HTTP ${res.status}${said ? `: ${said}` : ''}`,
      durationMs: elapsed(),
    };
  } catch (err) {
    return {
      ok: false,
      statusCode: null,
      error: describeNetworkError(err, timeoutMs),
      durationMs: elapsed(),
    };
  }
}

/** The start of an answer, for the record; the rest is not waited for. */
async function readSome(res: Response): Promise<string> {
  if (!res.body) return '';
  const reader = res.body.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  try {
    while (size < MAX_ERROR_BODY) {
      const { done, value } = await reader.read();
      if (done) break;
      chunks.push(value);
      size += value.length;
    }
  } catch {
    // a body cut short says nothing more about the outcome than the status already did
  } finally {
    await reader.cancel().catch(() => undefined);
  }
  return Buffer.concat(chunks).toString('utf8').slice(0, MAX_ERROR_BODY);
}

function describeNetworkError(err: unknown, timeoutMs: number): string {
  const e = err as { name?: string; message?: string; cause?: { code?: string; message?: string } };
  if (e?.name === 'TimeoutError' || e?.name === 'AbortError') return `No answer within ${timeoutMs} ms`;
  const cause = e?.cause;
  if (cause?.code) return `Could not connect (${cause.code})`;
  return cause?.message ?? e?.message ?? 'Request failed';
}
