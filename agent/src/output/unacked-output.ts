// Where a step's sent-but-unacknowledged output waits for the coordinator's `output.ack`.
// Kept in memory for now; a disk spool (surviving an agent restart, bounding memory) replaces
// `MemoryUnackedOutput` behind the same interface without touching the stream or the runner.

/** One chunk as it went out: its step-level sequence number, first byte's offset and bytes. */
export interface OutputChunk {
  seq: number;
  offset: number;
  bytes: Buffer;
}

export interface UnackedOutput {
  /** Keeps a chunk; chunks arrive in offset order and are contiguous. */
  append(chunk: OutputChunk): void;
  /** Forgets every byte before `offset` (the coordinator has stored them). */
  ack(offset: number): void;
  /** The acknowledged offset: every byte before it is stored on the coordinator. */
  readonly ackedOffset: number;
  /** The kept chunks with bytes in [from, to), the first one trimmed to start at `from`. */
  chunks(from: number, to: number): OutputChunk[];
}

export class MemoryUnackedOutput implements UnackedOutput {
  #chunks: OutputChunk[] = [];
  #acked = 0;

  get ackedOffset(): number {
    return this.#acked;
  }

  append(chunk: OutputChunk): void {
    this.#chunks.push(chunk);
  }

  ack(offset: number): void {
    if (offset <= this.#acked) return;
    this.#acked = offset;
    while (this.#chunks.length > 0) {
      const first = this.#chunks[0]!;
      const end = first.offset + first.bytes.length;
      if (end <= offset) {
        this.#chunks.shift();
      } else {
        if (first.offset < offset) {
          // The coordinator acknowledged part of a chunk: keep only the rest.
          this.#chunks[0] = { seq: first.seq, offset, bytes: first.bytes.subarray(offset - first.offset) };
        }
        break;
      }
    }
  }

  chunks(from: number, to: number): OutputChunk[] {
    const out: OutputChunk[] = [];
    for (const chunk of this.#chunks) {
      const end = chunk.offset + chunk.bytes.length;
      if (end <= from || chunk.offset >= to) continue;
      const start = Math.max(from, chunk.offset);
      const stop = Math.min(to, end);
      out.push({
        seq: chunk.seq,
        offset: start,
        bytes: chunk.bytes.subarray(start - chunk.offset, stop - chunk.offset),
      });
    }
    return out;
  }
}
