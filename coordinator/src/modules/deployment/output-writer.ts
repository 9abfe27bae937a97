// Writes output chunks into `log_chunks` for every connection at once: group commit.
//
// Each agent connection stores its frames a batch at a time and waits for the batch to be stored
// before acknowledging it. With many agents streaming, one statement per connection meant as many
// commits (each a WAL flush) as batches, queued on a small pool. Here every batch waiting when a
// pool connection frees goes into the next statement, so the number of commits follows what
// PostgreSQL can take, not the number of agents. A batch's promise settles when the statement
// that holds it has committed.
//
// A statement that fails is tried again batch by batch, so a batch PostgreSQL refuses (its entry
// deleted meanwhile) fails alone and the others are stored.
import type pg from 'pg';

export interface ChunkRow {
  entryId: string;
  offset: number;
  data: Buffer;
}

interface Waiting {
  rows: ChunkRow[];
  bytes: number;
  resolve: () => void;
  reject: (err: unknown) => void;
}

/** Bounds of one statement: PostgreSQL takes at most 65,535 parameters (3 a row). */
const MAX_ROWS = 2000;
const MAX_BYTES = 8 * 1024 * 1024;

export class OutputWriter {
  readonly #pool: pg.Pool;
  readonly #slots: number;
  #busy = 0;
  #waiting: Waiting[] = [];

  /** `slots`: statements in flight at once (at most the pool's size). */
  constructor(pool: pg.Pool, slots: number) {
    this.#pool = pool;
    this.#slots = slots;
  }

  /** Stores the rows (conflicting offsets are skipped); settles once they are committed. */
  write(rows: ChunkRow[]): Promise<void> {
    if (rows.length === 0) return Promise.resolve();
    return new Promise((resolve, reject) => {
      this.#waiting.push({ rows, bytes: rows.reduce((n, r) => n + r.data.length, 0), resolve, reject });
      this.#next();
    });
  }

  #next(): void {
    while (this.#busy < this.#slots && this.#waiting.length > 0) {
      const group = this.#take();
      this.#busy++;
      void this.#store(group).finally(() => {
        this.#busy--;
        this.#next();
      });
    }
  }

  /** The batches for one statement, oldest first, within its bounds (always at least one). */
  #take(): Waiting[] {
    let rows = 0;
    let bytes = 0;
    let n = 0;
    for (const w of this.#waiting) {
      if (n > 0 && (rows + w.rows.length > MAX_ROWS || bytes + w.bytes > MAX_BYTES)) break;
      rows += w.rows.length;
      bytes += w.bytes;
      n++;
    }
    return this.#waiting.splice(0, n);
  }

  async #store(group: Waiting[]): Promise<void> {
    try {
      await this.#insert(group.flatMap((w) => w.rows));
      for (const w of group) w.resolve();
    } catch (err) {
      if (group.length === 1) {
        group[0]!.reject(err);
        return;
      }
      for (const w of group) {
        await this.#insert(w.rows).then(w.resolve, w.reject);
      }
    }
  }

  async #insert(rows: ChunkRow[]): Promise<void> {
    if (rows.length > MAX_ROWS) {
      // One batch larger than a statement may hold: in parts, each its own commit, in order.
      for (let i = 0; i < rows.length; i += MAX_ROWS) await this.#insert(rows.slice(i, i + MAX_ROWS));
      return;
    }
    const values = rows.map(
      (_, i) => `($${i * 3 + 1}::uuid, $${i * 3 + 2}::bigint, $${i * 3 + 3}::bytea, now())`,
    );
    await this.#pool.query(
      `insert into log_chunks (log_entry_id, "offset", data, created_at) values ${values.join(', ')}
       on conflict (log_entry_id, "offset") do nothing`,
      rows.flatMap((r) => [r.entryId, r.offset, r.data]),
    );
  }
}
