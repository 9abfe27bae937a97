// A step's output on its way from an SSH channel into the database, as an agent's output would
// arrive: masked first (secrets never reach storage or viewers), then stored at byte offsets
// through JobService.outputs at least every 100 ms, in chunks of at most MAX_CHUNK_BYTES.
// Storing happens one batch at a time; while too much waits, the channel stops being read (the
// host's command then blocks on its output), so a command printing faster than the database
// stores makes it wait instead of growing the coordinator. A failed store is retried: the bytes
// stay here until they are stored, as they would stay in an agent's spool.
import { createMasker, type Masker, MAX_CHUNK_BYTES } from '@deckhand/protocol';
import type { OutputFlow } from './ssh-session.ts';

const FLUSH_MS = 100;
/** Past this much waiting to be stored, reading the channel pauses. */
const HIGH_WATER = 4 * 1024 * 1024;
const RETRY_MS = 500;

export type StoreChunks = (chunks: Array<{ offset: number; data: Buffer }>) => Promise<void>;

export class OutputPump implements OutputFlow {
  readonly #masker: Masker;
  readonly #store: StoreChunks;
  readonly #onStoreError: (err: unknown) => 'retry' | 'drop';
  #pending: Buffer[] = [];
  #pendingBytes = 0;
  /** Bytes handed to storage (or waiting to be): the next chunk's offset. */
  #offset = 0;
  #timer: NodeJS.Timeout | undefined;
  #flushing: Promise<void> | null = null;
  #below: Array<() => void> = [];
  #dropped = false;

  constructor(opts: {
    masks: readonly string[];
    store: StoreChunks;
    /** Decides what a failed store means: try again, or the job is gone and output is dropped. */
    onStoreError: (err: unknown) => 'retry' | 'drop';
  }) {
    this.#masker = createMasker(opts.masks);
    this.#store = opts.store;
    this.#onStoreError = opts.onStoreError;
  }

  /** Every byte written so far (masked), stored or on its way. */
  get bytes(): number {
    return this.#offset + this.#pendingBytes;
  }

  get over(): boolean {
    return this.#pendingBytes > HIGH_WATER;
  }

  onceBelow(fn: () => void): void {
    if (!this.over) fn();
    else this.#below.push(fn);
  }

  write(bytes: Buffer): void {
    this.#push(this.#masker.push(bytes));
  }

  /** The step ended: the masker's held-back tail too, then everything stored. Returns the byte count. */
  async finish(): Promise<number> {
    this.#push(this.#masker.flush());
    clearTimeout(this.#timer);
    this.#timer = undefined;
    while (this.#pendingBytes > 0 || this.#flushing) {
      await (this.#flushing ?? this.#flush());
    }
    return this.#offset;
  }

  #push(bytes: Buffer): void {
    if (bytes.length === 0 || this.#dropped) return;
    this.#pending.push(bytes);
    this.#pendingBytes += bytes.length;
    if (this.#pendingBytes >= MAX_CHUNK_BYTES) void this.#flush();
    else this.#arm();
  }

  /** A flush within FLUSH_MS (live output reaches viewers at least that often). */
  #arm(): void {
    this.#timer ??= setTimeout(() => {
      this.#timer = undefined;
      void this.#flush();
    }, FLUSH_MS);
  }

  #flush(): Promise<void> {
    if (this.#flushing) return this.#flushing;
    clearTimeout(this.#timer);
    this.#timer = undefined;
    if (this.#pendingBytes === 0) return Promise.resolve();
    this.#flushing = (async () => {
      // A batch of at most 4 chunks from the front; what is written meanwhile queues behind it.
      const all = Buffer.concat(this.#pending);
      this.#pending = [all];
      const take = Math.min(all.length, 4 * MAX_CHUNK_BYTES);
      const batch: Array<{ offset: number; data: Buffer }> = [];
      for (let at = 0; at < take; at += MAX_CHUNK_BYTES) {
        batch.push({
          offset: this.#offset + at,
          data: all.subarray(at, Math.min(take, at + MAX_CHUNK_BYTES)),
        });
      }
      for (;;) {
        try {
          await this.#store(batch);
          break;
        } catch (err) {
          if (this.#onStoreError(err) === 'drop') {
            this.#dropped = true;
            break;
          }
          await new Promise((r) => setTimeout(r, RETRY_MS));
        }
      }
      if (this.#dropped) {
        // The job is gone: nothing more is stored.
        this.#offset += this.#pendingBytes;
        this.#pending = [];
        this.#pendingBytes = 0;
      } else {
        this.#offset += take;
        this.#pendingBytes -= take;
        const rest = all.subarray(take);
        this.#pending = rest.length > 0 ? [rest, ...this.#pending.slice(1)] : this.#pending.slice(1);
      }
    })().finally(() => {
      this.#flushing = null;
      if (!this.over) for (const fn of this.#below.splice(0)) fn();
      if (this.#pendingBytes > 0) {
        if (this.#pendingBytes >= MAX_CHUNK_BYTES) void this.#flush();
        else this.#arm();
      }
    });
    return this.#flushing;
  }
}
