// Following a deployment's live events (GET /deploy/:id/events, server-sent events) until its `end`
// event. A dropped, refused or silent connection is resumed with Last-Event-ID — the id of the last
// event received, a cursor the coordinator continues from without gaps or repeats — after a
// capped, jittered backoff; after a minute without getting any event through, it gives up with a
// message saying the deployment itself is not affected.
import { type Api, httpError, networkMessage, sleep } from './api.ts';
import { CliError, EXIT } from './exit-codes.ts';

export interface SseEvent {
  event: string;
  id: string | null;
  data: string;
}

/**
 * The event-stream format (WHATWG HTML, "Parsing an event stream"): lines end with CRLF, LF or
 * CR; `event`, `data` (joined with LF), `id` and `retry` fields; `:` comments; an event is
 * dispatched at a blank line when it has data. Fed decoded text in arbitrary pieces.
 */
export class SseParser {
  #buffer = '';
  #pendingCr = false;
  #event = '';
  #data: string[] = [];
  #hasData = false;
  /** The last event id seen, which persists across events as the format says. */
  lastEventId: string | null = null;
  retryMs: number | null = null;

  push(text: string): SseEvent[] {
    const out: SseEvent[] = [];
    let s = text;
    // A CR at the end of the previous piece and an LF at the start of this one are one line end.
    if (this.#pendingCr && s.startsWith('\n')) s = s.slice(1);
    this.#pendingCr = false;
    this.#buffer += s;
    for (;;) {
      const m = /\r\n|\r|\n/.exec(this.#buffer);
      if (!m) break;
      // A trailing CR may be the first half of a CRLF split across pieces.
      if (m[0] === '\r' && m.index === this.#buffer.length - 1) {
        this.#pendingCr = true;
      }
      const line = this.#buffer.slice(0, m.index);
      this.#buffer = this.#buffer.slice(m.index + m[0].length);
      const event = this.#line(line);
      if (event) out.push(event);
    }
    return out;
  }

  #line(line: string): SseEvent | null {
    if (line === '') {
      const event = this.#event || 'message';
      const data = this.#data.join('\n');
      const had = this.#hasData;
      this.#event = '';
      this.#data = [];
      this.#hasData = false;
      return had ? { event, id: this.lastEventId, data } : null;
    }
    if (line.startsWith(':')) return null;
    const colon = line.indexOf(':');
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    switch (field) {
      case 'event':
        this.#event = value;
        break;
      case 'data':
        this.#data.push(value);
        this.#hasData = true;
        break;
      case 'id':
        if (!value.includes('\u0000')) this.lastEventId = value;
        break;
      case 'retry':
        if (/^\d+$/.test(value)) this.retryMs = Number(value);
        break;
    }
    return null;
  }
}

export interface StreamEvent {
  event: string;
  id: string | null;
  data: unknown;
}

export interface FollowOptions {
  api: Api;
  deployId: string;
  /** Every event, the final `end` included, in order. */
  onEvent(e: StreamEvent): void;
  /** Reconnection notices (for stderr). */
  onNotice(message: string): void;
  /** Stops following (the promise then rejects with the signal's reason). */
  signal: AbortSignal;
  /** Give up after this long without an event getting through (default 60 s). */
  giveUpMs?: number;
  /** A connection silent this long is dropped and resumed (the server comments every 15 s). */
  idleMs?: number;
  /** The first reconnection delay and its cap (doubling, jittered). */
  backoffMs?: { first: number; max: number };
}

const RETRYABLE_STATUSES = new Set([408, 429, 500, 502, 503, 504]);

/** Follows the stream until `end`; resolves with the end event's data (the final deployment). */
export async function followEvents(opts: FollowOptions): Promise<unknown> {
  const giveUpMs = opts.giveUpMs ?? 60_000;
  const idleMs = opts.idleMs ?? 45_000;
  const backoff = opts.backoffMs ?? { first: 500, max: 5_000 };
  const path = `/deploy/${opts.deployId}/events`;
  let lastEventId: string | null = null;
  let failingSince: number | null = null;
  let attempt = 0;

  for (;;) {
    opts.signal.throwIfAborted();
    const conn = new AbortController();
    const abortConn = () => conn.abort(opts.signal.reason);
    opts.signal.addEventListener('abort', abortConn, { once: true });
    let idle: NodeJS.Timeout | undefined;
    const touch = () => {
      clearTimeout(idle);
      idle = setTimeout(() => conn.abort(new Error(`no data for ${Math.round(idleMs / 1000)}s`)), idleMs);
    };
    let problem: string;
    try {
      touch();
      const headers: Record<string, string> = { accept: 'text/event-stream', 'cache-control': 'no-cache' };
      if (lastEventId !== null) headers['last-event-id'] = lastEventId;
      const res = await opts.api.fetchRaw(path, { method: 'GET', headers, signal: conn.signal });
      if (!res.ok || !res.body) {
        const text = await res.text();
        const err = httpError(res.status, text, res.headers.get('content-type'), path);
        if (!RETRYABLE_STATUSES.has(res.status)) throw err;
        problem = err.message;
      } else {
        const parser = new SseParser();
        const decoder = new TextDecoder();
        for await (const chunk of res.body) {
          touch();
          for (const e of parser.push(decoder.decode(chunk, { stream: true }))) {
            if (e.id !== null) lastEventId = e.id;
            failingSince = null;
            attempt = 0;
            let data: unknown;
            try {
              data = JSON.parse(e.data);
            } catch {
              data = e.data;
            }
            opts.onEvent({ event: e.event, id: e.id, data });
            if (e.event === 'end') return data;
          }
        }
        problem = 'the event stream closed before the deployment ended';
      }
    } catch (err) {
      if (opts.signal.aborted) throw opts.signal.reason;
      if (err instanceof CliError) throw err;
      problem = conn.signal.aborted ? String((conn.signal.reason as Error)?.message) : networkMessage(err);
    } finally {
      clearTimeout(idle);
      opts.signal.removeEventListener('abort', abortConn);
      conn.abort();
    }

    const now = Date.now();
    failingSince ??= now;
    if (now - failingSince >= giveUpMs) {
      throw new CliError(
        `Lost the live events of deployment ${opts.deployId} for ${Math.round(giveUpMs / 1000)}s (${problem}). ` +
          `The deployment itself is not affected: 'deckhand status ${opts.deployId}' or ` +
          `'deckhand logs ${opts.deployId} --follow' pick it up again.`,
        EXIT.unavailable,
      );
    }
    const delay = Math.min(backoff.max, backoff.first * 2 ** attempt) * (0.75 + Math.random() * 0.5);
    attempt += 1;
    opts.onNotice(`Connection lost (${problem}); resuming in ${(delay / 1000).toFixed(1)}s…`);
    await sleep(delay, opts.signal);
  }
}
