// One step's output on its way to the coordinator: bytes in (stdout and stderr, in arrival
// order), `step.output` frames out. Owns the batching (a timer while output arrives, or at once
// past a size), the chunk limit, offsets and sequence numbers, and the unacknowledged bytes that
// are re-sent after a reconnect.
import { MAX_CHUNK_BYTES, type StepOutput } from '@deckhand/protocol';
import { MemoryUnackedOutput, type OutputChunk, type UnackedOutput } from './unacked-output.ts';

/** Hands a frame to the connection; `onWritten` runs once it is written to a live socket. */
export type OutputSend = (frame: StepOutput, onWritten: () => void) => void;

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
export const FLUSH_BYTES = 64 * 1024;

export class OutputStream {
  readonly jobId: string;
  readonly step: number;
  readonly #send: OutputSend;
  readonly #store: UnackedOutput;
  readonly #flushIntervalMs: number;
  readonly #flushBytes: number;
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
    this.#store = opts.store ?? new MemoryUnackedOutput();
    this.#flushIntervalMs = opts.flushIntervalMs ?? FLUSH_INTERVAL_MS;
    this.#flushBytes = opts.flushBytes ?? FLUSH_BYTES;
    this.#maxChunkBytes = opts.maxChunkBytes ?? MAX_CHUNK_BYTES;
  }

  /** Bytes the step has printed so far. */
  get bytes(): number {
    return this.#framedEnd + this.#pendingBytes;
  }

  /** Finished, and the coordinator has stored every byte: nothing left to keep. */
  get settled(): boolean {
    return this.#finished && this.#store.ackedOffset >= this.#framedEnd;
  }

  write(bytes: Buffer): void {
    if (this.#finished || bytes.length === 0) return;
    this.#pending.push(bytes);
    this.#pendingBytes += bytes.length;
    if (this.#pendingBytes >= this.#flushBytes) this.flush();
    else this.#timer ??= setTimeout(() => this.flush(), this.#flushIntervalMs);
  }

  /** Sends everything buffered now. */
  flush(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    if (this.#pendingBytes === 0) return;
    const all = Buffer.concat(this.#pending, this.#pendingBytes);
    this.#pending = [];
    this.#pendingBytes = 0;
    for (let at = 0; at < all.length; at += this.#maxChunkBytes) {
      const chunk: OutputChunk = {
        seq: this.#seq++,
        offset: this.#framedEnd,
        bytes: all.subarray(at, at + this.#maxChunkBytes),
      };
      this.#framedEnd += chunk.bytes.length;
      this.#store.append(chunk);
      const end = this.#framedEnd;
      this.#send(this.#frame(chunk), () => {
        if (end > this.#writtenEnd) this.#writtenEnd = end;
      });
    }
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
   * After a reconnect: the frames written to the old socket but not acknowledged, from the
   * acknowledged offset. What never reached a socket still waits in the outbox, in order, behind them.
   */
  unackedFrames(): StepOutput[] {
    return this.#store.chunks(this.#store.ackedOffset, this.#writtenEnd).map((c) => this.#frame(c));
  }

  #frame(chunk: OutputChunk): StepOutput {
    return {
      type: 'step.output',
      jobId: this.jobId,
      step: this.step,
      seq: chunk.seq,
      offset: chunk.offset,
      data: chunk.bytes.toString('base64'),
    };
  }
}
