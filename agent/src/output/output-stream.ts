// One step's output on its way to the coordinator: bytes in (stdout and stderr, in arrival
// order, already masked), `step.output` frames out. Owns the batching (a timer while output
// arrives, or at once past a size), the chunk limit, offsets and sequence numbers, and the
// unacknowledged bytes (unacked-output.ts: memory, then spool files) that are re-sent after a
// reconnect. Frames leave as lazy outbox entries: the bytes are read when the socket takes them.
import { MAX_CHUNK_BYTES, type StepOutput } from '@deckhand/protocol';
import type { OutboxEntry } from '../connection/outbox.ts';
import { type OutputChunk, SpooledOutput, type UnackedOutput } from './unacked-output.ts';

/** Hands an entry to the connection's outbox. */
export type OutputSend = (entry: OutboxEntry) => void;

export interface OutputStreamOptions {
  jobId: string;
  step: number;
  send: OutputSend;
  store?: UnackedOutput;
  /** Longest time output waits before it is sent. */
  flushIntervalMs?: number;
  /** Buffered bytes that are sent at once, without waiting for the timer. */
  flushBytes?: number;
  maxChunkBytes?: number;
}

export const FLUSH_INTERVAL_MS = 100;
/** A full frame: fast output travels in the largest chunks the protocol allows. */
export const FLUSH_BYTES = 256 * 1024;

export class OutputStream {
  readonly jobId: string;
  readonly step: number;
  readonly #send: OutputSend;
  readonly #store: UnackedOutput;
  readonly #flushIntervalMs: number;
  readonly #flushBytes: number;
  #lastFlushAt = Number.NEGATIVE_INFINITY;
  readonly #maxChunkBytes: number;
  #pending: Buffer[] = [];
  #pendingBytes = 0;
  #timer: NodeJS.Timeout | undefined;
  #seq = 0;
  /** Offset after the last byte put into a frame. */
  #framedEnd = 0;
  /** Offset after the last byte written to a socket (anything past it still waits in the outbox). */
  #writtenEnd = 0;
  #finished = false;

  constructor(opts: OutputStreamOptions) {
    this.jobId = opts.jobId;
    this.step = opts.step;
    this.#send = opts.send;
    this.#store = opts.store ?? new SpooledOutput();
    this.#flushIntervalMs = opts.flushIntervalMs ?? FLUSH_INTERVAL_MS;
    this.#flushBytes = opts.flushBytes ?? FLUSH_BYTES;
    this.#maxChunkBytes = opts.maxChunkBytes ?? MAX_CHUNK_BYTES;
  }

  /** Bytes the step has printed so far. */
  get bytes(): number {
    return this.#framedEnd + this.#pendingBytes;
  }

  get ackedOffset(): number {
    return this.#store.ackedOffset;
  }

  /** Finished, and the coordinator has stored every byte: nothing left to keep. */
  get settled(): boolean {
    return this.#finished && this.#store.ackedOffset >= this.#framedEnd;
  }

  write(bytes: Buffer): void {
    if (this.#finished || bytes.length === 0) return;
    this.#pending.push(bytes);
    this.#pendingBytes += bytes.length;
    // Output after a quiet spell goes at once (a viewer sees the first line without delay);
    // within a burst it is gathered for up to the interval, or until a frame's worth is there.
    const quiet = performance.now() - this.#lastFlushAt >= this.#flushIntervalMs;
    if (this.#pendingBytes >= this.#flushBytes || (quiet && this.#timer === undefined)) this.flush();
    else this.#timer ??= setTimeout(() => this.flush(), this.#flushIntervalMs);
  }

  /** Frames everything buffered and queues it now. */
  flush(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    if (this.#pendingBytes === 0) return;
    this.#lastFlushAt = performance.now();
    const all = Buffer.concat(this.#pending, this.#pendingBytes);
    this.#pending = [];
    this.#pendingBytes = 0;
    const start = this.#framedEnd;
    for (let at = 0; at < all.length; at += this.#maxChunkBytes) {
      const chunk: OutputChunk = {
        seq: this.#seq++,
        offset: this.#framedEnd,
        bytes: all.subarray(at, at + this.#maxChunkBytes),
      };
      this.#framedEnd += chunk.bytes.length;
      this.#store.append(chunk);
    }
    this.#send(this.#entry(start, this.#framedEnd));
  }

  /** Flushes and closes the stream; returns the step's total output bytes. */
  finish(): number {
    this.flush();
    this.#finished = true;
    return this.#framedEnd;
  }

  ack(offset: number): void {
    this.#store.ack(Math.min(offset, this.#framedEnd));
  }

  /**
   * After a reconnect: an entry for what was written to an old socket but not acknowledged, from
   * the acknowledged offset. What never reached a socket still waits in the outbox, behind it.
   */
  resendEntry(): OutboxEntry | undefined {
    const from = this.#store.ackedOffset;
    return from < this.#writtenEnd ? this.#entry(from, this.#writtenEnd) : undefined;
  }

  /** The frames `resendEntry()` would send, all at once (for tests). */
  unackedFrames(): StepOutput[] {
    const entry = this.resendEntry();
    const frames: StepOutput[] = [];
    for (let m = entry?.next(); m; m = entry?.next()) frames.push(m as StepOutput);
    return frames;
  }

  /** Forgets everything held (memory, spool files). */
  discard(): void {
    clearTimeout(this.#timer);
    this.#finished = true;
    this.#store.discard();
  }

  /** A lazy entry for [from, to): each frame is read from the store when the socket takes it. */
  #entry(from: number, to: number): OutboxEntry {
    let cursor = from;
    return {
      next: () => {
        const chunk = cursor < to ? this.#store.chunkAt(cursor, to) : undefined;
        if (!chunk) {
          cursor = to;
          return undefined;
        }
        cursor = chunk.offset + chunk.bytes.length;
        return this.#frame(chunk);
      },
      written: (message) => {
        const m = message as StepOutput;
        const end = m.offset + m.data.length;
        if (end > this.#writtenEnd) this.#writtenEnd = end;
      },
    };
  }

  #frame(chunk: OutputChunk): StepOutput {
    return {
      type: 'step.output',
      jobId: this.jobId,
      step: this.step,
      seq: chunk.seq,
      offset: chunk.offset,
      data: chunk.bytes,
    };
  }
}
