// Signals between coordinator processes that share one database, over PostgreSQL's own
// LISTEN/NOTIFY — no second message system. A signal carries ids, never data (payloads are capped
// at 8,000 bytes, and the database stays the one truth): "deployment d changed", "jobs are
// pending", "cancels are pending", "agent a was revoked", "the queue moved". Each process listens
// on one dedicated connection; publishing goes through a pool. Signals only make things happen
// sooner: every consumer also polls (scheduler interval, hub heartbeat), so a signal lost while
// the listening connection was down delays work, it never loses it — and after reconnecting,
// `onResync` handlers re-read what they watch.
import pg from 'pg';
import type { Logger } from 'pino';

export const SIGNAL_CHANNEL = 'deckhand_signals';

export type SignalKind = 'deployment' | 'jobs' | 'cancels' | 'revoked' | 'queue';
const KINDS: ReadonlySet<string> = new Set<SignalKind>(['deployment', 'jobs', 'cancels', 'revoked', 'queue']);

/** Ids per NOTIFY: 200 uuids with separators stay well under the 8,000-byte payload limit. */
const IDS_PER_NOTIFY = 200;
const RECONNECT_MIN_MS = 250;
/**
 * "Deployment changed" is sent at most this often: output arrives many times a second per
 * deployment, and viewers re-read everything new at each signal anyway. Other kinds go at once.
 */
const DEPLOYMENT_SIGNAL_EVERY_MS = 25;
const RECONNECT_MAX_MS = 10_000;

export interface ClusterSignalsOptions {
  connectionString: string;
  /** This process: its own signals come back through LISTEN and are skipped. */
  processId: string;
  log: Logger;
}

type Handler = (ids: string[]) => void;

export class ClusterSignals {
  readonly #o: ClusterSignalsOptions;
  readonly #handlers = new Map<SignalKind, Handler[]>();
  readonly #resync: Array<() => void> = [];
  readonly #pool: pg.Pool;
  #listener: pg.Client | null = null;
  #stopped = true;
  #reconnectMs = RECONNECT_MIN_MS;
  #reconnectTimer: NodeJS.Timeout | undefined;
  /** Signals waiting to be sent together (ids per kind; an empty set for id-less kinds). */
  #pending = new Map<SignalKind, Set<string>>();
  #flushTimer: NodeJS.Timeout | undefined;
  #flushAt = Number.POSITIVE_INFINITY;
  #flushing: Promise<void> = Promise.resolve();

  constructor(options: ClusterSignalsOptions) {
    this.#o = options;
    this.#pool = new pg.Pool({ connectionString: options.connectionString, max: 1 });
    this.#pool.on('error', (err) => options.log.warn({ err }, 'signal publishing connection error'));
  }

  on(kind: SignalKind, handler: Handler): void {
    this.#handlers.set(kind, [...(this.#handlers.get(kind) ?? []), handler]);
  }

  /** Called after the listening connection came back: signals may have been missed meanwhile. */
  onResync(handler: () => void): void {
    this.#resync.push(handler);
  }

  async start(): Promise<void> {
    this.#stopped = false;
    await this.#listen();
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    clearTimeout(this.#reconnectTimer);
    this.#flush();
    await this.#flushing;
    const listener = this.#listener;
    this.#listener = null;
    await listener?.end().catch(() => undefined);
    await this.#pool.end().catch(() => undefined);
  }

  /**
   * Tells the other processes (and, through handlers, not this one: it acts on its own changes
   * directly). Sent on the next tick (deployment changes within DEPLOYMENT_SIGNAL_EVERY_MS), many
   * ids of a kind in one NOTIFY.
   */
  publish(kind: SignalKind, id?: string): void {
    if (this.#stopped) return;
    const ids = this.#pending.get(kind) ?? new Set<string>();
    if (id) ids.add(id);
    this.#pending.set(kind, ids);
    const delay = kind === 'deployment' ? DEPLOYMENT_SIGNAL_EVERY_MS : 0;
    const at = Date.now() + delay;
    if (at < this.#flushAt) {
      clearTimeout(this.#flushTimer);
      this.#flushAt = at;
      this.#flushTimer = setTimeout(() => this.#flush(), delay);
    }
  }

  #flush(): void {
    clearTimeout(this.#flushTimer);
    this.#flushAt = Number.POSITIVE_INFINITY;
    if (this.#pending.size === 0) return;
    const payloads: string[] = [];
    for (const [kind, ids] of this.#pending) {
      const all = [...ids];
      if (all.length === 0) payloads.push(`${this.#o.processId} ${kind}`);
      for (let i = 0; i < all.length; i += IDS_PER_NOTIFY) {
        payloads.push(`${this.#o.processId} ${kind} ${all.slice(i, i + IDS_PER_NOTIFY).join(',')}`);
      }
    }
    this.#pending = new Map();
    this.#flushing = this.#flushing.then(async () => {
      for (const payload of payloads) {
        try {
          await this.#pool.query('select pg_notify($1, $2)', [SIGNAL_CHANNEL, payload]);
        } catch (err) {
          // The others still poll: a lost signal delays, it does not lose.
          this.#o.log.warn({ err }, 'could not signal the other coordinator processes');
        }
      }
    });
  }

  async #listen(): Promise<void> {
    const client = new pg.Client({ connectionString: this.#o.connectionString });
    client.on('error', (err) => this.#o.log.warn({ err }, 'signal listening connection error'));
    client.on('end', () => {
      if (this.#listener !== client || this.#stopped) return;
      this.#listener = null;
      this.#o.log.warn('signal listening connection lost: reconnecting');
      this.#scheduleReconnect();
    });
    client.on('notification', (n) => {
      if (n.channel === SIGNAL_CHANNEL && n.payload) this.#receive(n.payload);
    });
    try {
      await client.connect();
      await client.query(`LISTEN ${SIGNAL_CHANNEL}`);
    } catch (err) {
      await client.end().catch(() => undefined);
      if (this.#stopped) return;
      this.#o.log.warn({ err, retryInMs: this.#reconnectMs }, 'could not listen for signals: retrying');
      this.#scheduleReconnect();
      return;
    }
    if (this.#stopped) {
      await client.end().catch(() => undefined);
      return;
    }
    const reconnected = this.#reconnectMs !== RECONNECT_MIN_MS;
    this.#listener = client;
    this.#reconnectMs = RECONNECT_MIN_MS;
    if (reconnected) for (const h of this.#resync) h();
  }

  #scheduleReconnect(): void {
    const wait = this.#reconnectMs;
    this.#reconnectMs = Math.min(RECONNECT_MAX_MS, this.#reconnectMs * 2);
    this.#reconnectTimer = setTimeout(() => void this.#listen(), wait);
    this.#reconnectTimer.unref();
  }

  #receive(payload: string): void {
    const [origin, kind, list] = payload.split(' ');
    if (!origin || origin === this.#o.processId || !kind || !KINDS.has(kind)) return;
    const ids = list ? list.split(',').filter(Boolean) : [];
    for (const handler of this.#handlers.get(kind as SignalKind) ?? []) {
      try {
        handler(ids);
      } catch (err) {
        this.#o.log.error({ err, kind }, 'a signal handler failed');
      }
    }
  }
}
