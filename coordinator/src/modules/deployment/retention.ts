// Retention: finished deployments older than the project's `retention_days` (or RETENTION_DAYS)
// are deleted with everything they hold — jobs, log entries, output chunks, notification records
// (foreign keys cascade). Never pruned: a deployment still queued or running, and each project's
// latest successful deployment (what is live, and what a rollback goes back to). The audit log
// keeps its records. One process prunes at a time (an advisory lock), in batches, so a large
// backlog never holds long locks.
import type { MikroORM } from '@mikro-orm/postgresql';
import type { Logger } from 'pino';

export interface RetentionOptions {
  orm: MikroORM;
  /** Default days to keep; 0 keeps everything unless a project says otherwise. */
  days: number;
  intervalMs: number;
  log: Logger;
}

const BATCH = 200;
/** pg_try_advisory_xact_lock key: "deckhand retention". */
const LOCK_KEY = 0x64_6b_72_74;

export class Retention {
  readonly #o: RetentionOptions;
  #timer: NodeJS.Timeout | undefined;
  #running: Promise<unknown> | null = null;

  constructor(options: RetentionOptions) {
    this.#o = options;
  }

  start(): void {
    const run = () => {
      if (this.#running) return;
      this.#running = this.pruneOnce()
        .catch((err) => this.#o.log.error({ err }, 'pruning old deployments failed'))
        .finally(() => (this.#running = null));
    };
    this.#timer = setInterval(run, this.#o.intervalMs);
    this.#timer.unref();
    // Soon after start-up, not during it.
    setTimeout(run, Math.min(this.#o.intervalMs, 30_000)).unref();
  }

  async stop(): Promise<void> {
    clearInterval(this.#timer);
    await this.#running;
  }

  /** Deletes what has expired; returns how many deployments went. */
  async pruneOnce(): Promise<number> {
    let total = 0;
    for (;;) {
      const deleted = await this.#o.orm.em.fork().transactional(async (em) => {
        const [lock] = await em.execute<Array<{ ok: boolean }>>('select pg_try_advisory_xact_lock(?) as ok', [
          LOCK_KEY,
        ]);
        if (!lock?.ok) return -1;
        const rows = await em.execute<Array<{ id: string }>>(
          `delete from deployments where id in (
             select d.id from deployments d join projects p on p.id = d.project_id
              where d.finished_at is not null
                and coalesce((p.policies->>'retention_days')::int, ?) > 0
                and d.finished_at < now() - coalesce((p.policies->>'retention_days')::int, ?) * interval '1 day'
                and d.id is distinct from (select l.id from deployments l
                                            where l.project_id = d.project_id and l.status = 'success'
                                            order by l.finished_at desc limit 1)
              limit ?)
           returning id`,
          [this.#o.days, this.#o.days, BATCH],
        );
        return rows.length;
      });
      if (deleted <= 0) break;
      total += deleted;
      if (deleted < BATCH) break;
    }
    if (total > 0) this.#o.log.info({ deployments: total }, 'pruned deployments past their retention');
    return total;
  }
}
