// The one place that decides whether a lost connection is worth retrying, with each case
// explained, and the reconnect backoff (exponential, capped, full jitter; soon and steady for a
// while after the coordinator said it is restarting).
import { CloseCode } from '@deckhand/protocol';

/** How a connection ended, as the connection saw it. */
export type Disconnect =
  /** The socket closed with a code (sent by the coordinator, by us, or 1006 for no close frame). */
  | { kind: 'closed'; code: number; reason: string; rejectReason?: string }
  /** The upgrade was answered with a plain HTTP response instead of 101. */
  | { kind: 'http'; status: number }
  /** We ended it: no welcome in time, heartbeat silence, or a bad frame from the coordinator. */
  | { kind: 'local'; reason: string };

export type Verdict =
  | {
      retry: true;
      reason: string;
      /** wait at least this long */
      minDelayMs?: number;
      /** The coordinator said it is going away (a restart): it is expected back within seconds. */
      goingAway?: boolean;
    }
  | { retry: false; message: string };

export const BACKOFF_BASE_MS = 500;
export const BACKOFF_CAP_MS = 30_000;
/**
 * After GOING_AWAY, retries come every RESTART_RETRY_MIN_MS–RESTART_RETRY_MAX_MS (uniformly
 * random, so a thousand agents do not knock at once) for RESTART_WINDOW_MS: a restarting
 * coordinator is usually back in a few seconds, and the exponential steps would otherwise have
 * grown to several seconds by then. Past the window the usual backoff takes over.
 */
export const RESTART_RETRY_MIN_MS = 500;
export const RESTART_RETRY_MAX_MS = 1_500;
export const RESTART_WINDOW_MS = 20_000;

export function classifyDisconnect(d: Disconnect): Verdict {
  switch (d.kind) {
    case 'http':
      // 401/403: the coordinator does not know this token (never registered, revoked, or a typo).
      // Retrying cannot help and would hammer the coordinator with a dead credential.
      if (d.status === 401 || d.status === 403) {
        return {
          retry: false,
          message: `The coordinator refused the agent token (HTTP ${d.status}). Register the agent again (POST /agents) and restart it with the new token (--token or DECKHAND_TOKEN, or a file: --token-file or DECKHAND_TOKEN_FILE).`,
        };
      }
      // 404 (a coordinator without the agent endpoint yet, or a path prefix still being
      // deployed), 5xx and proxy errors (502/503 while the coordinator restarts): all pass.
      return { retry: true, reason: `the coordinator answered the upgrade with HTTP ${d.status}` };
    case 'local':
      // Welcome timeout, heartbeat silence, a bad frame: a fresh connection is the cure.
      return { retry: true, reason: d.reason };
    case 'closed':
      switch (d.code) {
        case CloseCode.UNAUTHORIZED:
          // The token was revoked while connected: same as a 401, do not retry with it.
          return {
            retry: false,
            message:
              'The coordinator revoked this agent token. Register the agent again (POST /agents) and restart it with the new token.',
          };
        case CloseCode.VERSION_MISMATCH:
          // Nothing changes by reconnecting with the same version; the reject reason says which
          // side to upgrade.
          return {
            retry: false,
            message: `Protocol version mismatch: ${d.rejectReason || d.reason || 'the coordinator speaks another protocol version'}. Upgrade the agent (or the coordinator) so both speak the same version.`,
          };
        case CloseCode.REPLACED:
          // Another connection with our token took over: usually a second agent process with the
          // same token. Retrying at full speed would make the two replace each other forever;
          // retry slowly so a genuine reconnect race still recovers.
          return {
            retry: true,
            reason: 'replaced by another connection with this token (is a second agent using it?)',
            minDelayMs: BACKOFF_CAP_MS,
          };
        case CloseCode.BAD_FRAME:
        case CloseCode.TOO_LARGE:
          // The coordinator disliked a frame of ours. A bug, but the connection state is reset by
          // reconnecting, and jobs keep running meanwhile; the backoff keeps a loop cheap.
          return { retry: true, reason: `the coordinator closed the connection: ${d.code} ${d.reason}` };
        case CloseCode.GOING_AWAY:
          // The coordinator is shutting down (a restart, a deploy of it) or dropped us on an
          // internal error: it, or another replica behind the same address, is back soon.
          return {
            retry: true,
            reason: `the coordinator is going away (${d.code}${d.reason ? ` ${d.reason}` : ''})`,
            goingAway: true,
          };
        default:
          // NORMAL, 1006 (network dropped, no close frame),
          // and anything unknown: the coordinator or the network will be back.
          return {
            retry: true,
            reason: `connection closed (${d.code}${d.reason ? ` ${d.reason}` : ''})`,
          };
      }
  }
}

/**
 * Exponential backoff with full jitter: a random delay in [0, min(cap, base × 2^attempt)). After
 * `goingAway()`, a steady random delay in [RESTART_RETRY_MIN_MS, RESTART_RETRY_MAX_MS) until
 * RESTART_WINDOW_MS have passed, then exponential again from the base.
 */
export class Backoff {
  readonly #baseMs: number;
  readonly #capMs: number;
  readonly #random: () => number;
  readonly #now: () => number;
  #attempt = 0;
  /** Until when (#now() time) retries follow the restart schedule; 0 when they do not. */
  #restartUntil = 0;

  constructor(opts: { baseMs?: number; capMs?: number; random?: () => number; now?: () => number } = {}) {
    this.#baseMs = opts.baseMs ?? BACKOFF_BASE_MS;
    this.#capMs = opts.capMs ?? BACKOFF_CAP_MS;
    this.#random = opts.random ?? Math.random;
    this.#now = opts.now ?? (() => performance.now());
  }

  /** The coordinator closed with GOING_AWAY: retry soon, with jitter, for the restart window. */
  goingAway(): void {
    this.#attempt = 0;
    this.#restartUntil = this.#now() + RESTART_WINDOW_MS;
  }

  next(): number {
    if (this.#restartUntil !== 0) {
      if (this.#now() < this.#restartUntil) {
        return (
          RESTART_RETRY_MIN_MS + Math.floor(this.#random() * (RESTART_RETRY_MAX_MS - RESTART_RETRY_MIN_MS))
        );
      }
      this.#restartUntil = 0;
    }
    const ceiling = Math.min(this.#capMs, this.#baseMs * 2 ** this.#attempt);
    if (ceiling < this.#capMs) this.#attempt++;
    return Math.floor(this.#random() * ceiling);
  }

  /** After a welcome: the next failure starts from the base again. */
  reset(): void {
    this.#attempt = 0;
    this.#restartUntil = 0;
  }
}
