// A store for @fastify/rate-limit in PostgreSQL, so a limit holds across every coordinator
// process behind one address (an in-memory store would give each process its own allowance).
// One row per key; a hit is one upsert that starts a new window when the old one has passed.
// Rows of long-past windows are swept now and then.
import type { MikroORM } from '@mikro-orm/postgresql';

interface StoreResult {
  current: number;
  ttl: number;
}
type Callback = (err: Error | null, result?: StoreResult) => void;

/** What the plugin passes to child(): the route's merged limit settings, with the route. */
interface ChildOptions {
  routeInfo?: { method?: string; url?: string };
}

/** Sweep expired rows about once per this many hits. */
const SWEEP_EVERY = 500;
const SWEEP_OLDER_THAN_MS = 24 * 60 * 60 * 1000;

/** The store class @fastify/rate-limit instantiates (`store` option), bound to the database. */
export function pgRateLimitStore(orm: MikroORM) {
  let hits = 0;

  return class PgRateLimitStore {
    readonly #prefix: string;

    constructor(_globalOptions?: unknown, prefix = '') {
      this.#prefix = prefix;
    }

    incr(key: string, cb: Callback, timeWindow: number): void {
      const storeKey = `${this.#prefix}${key}`.slice(0, 255);
      orm.em
        .fork()
        .execute<Array<{ count: number; ttl: string | number }>>(
          `insert into rate_limit_hits (key, count, window_started_at) values (?, 1, now())
           on conflict (key) do update set
             count = case when rate_limit_hits.window_started_at + ? * interval '1 millisecond' <= now()
                          then 1 else rate_limit_hits.count + 1 end,
             window_started_at = case when rate_limit_hits.window_started_at + ? * interval '1 millisecond' <= now()
                                      then now() else rate_limit_hits.window_started_at end
           returning count,
                     greatest(0, extract(epoch from (window_started_at + ? * interval '1 millisecond' - now())) * 1000) as ttl`,
          [storeKey, timeWindow, timeWindow, timeWindow],
        )
        .then(([row]) => {
          cb(null, { current: Number(row?.count ?? 1), ttl: Math.ceil(Number(row?.ttl ?? timeWindow)) });
          if (++hits % SWEEP_EVERY === 0) void this.#sweep();
        })
        .catch((err: Error) => cb(err));
    }

    read(key: string, cb: Callback, timeWindow: number): void {
      orm.em
        .fork()
        .execute<Array<{ count: number; ttl: string | number }>>(
          `select count, extract(epoch from (window_started_at + ? * interval '1 millisecond' - now())) * 1000 as ttl
             from rate_limit_hits where key = ?`,
          [timeWindow, `${this.#prefix}${key}`.slice(0, 255)],
        )
        .then(([row]) => {
          const ttl = Number(row?.ttl ?? 0);
          cb(
            null,
            row && ttl > 0 ? { current: Number(row.count), ttl: Math.ceil(ttl) } : { current: 0, ttl: 0 },
          );
        })
        .catch((err: Error) => cb(err));
    }

    /** Each route with its own limit counts on its own. */
    child(routeOptions: unknown): PgRateLimitStore {
      const route = (routeOptions as ChildOptions).routeInfo;
      return new PgRateLimitStore(undefined, `${route?.method ?? ''} ${route?.url ?? ''} `);
    }

    async #sweep(): Promise<void> {
      await orm.em
        .fork()
        .execute(
          `delete from rate_limit_hits where window_started_at < now() - ? * interval '1 millisecond'`,
          [SWEEP_OLDER_THAN_MS],
        )
        .catch(() => undefined);
    }
  };
}
