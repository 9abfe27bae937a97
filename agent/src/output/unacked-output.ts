// Where a step's unacknowledged output waits for the coordinator's `output.ack`: in memory while
// the agent-wide budget allows (budget.ts), past it in append-only spool files under
// `<work-dir>/.deckhand/spool/` (one file per step at a time, rotated past SPOOL_FILE_BYTES),
// read back when the bytes are (re-)sent. A file is deleted as soon as every byte in it is
// acknowledged. Spool files do not survive the agent: a restarted agent has lost its jobs anyway,
// so it empties the folder when it starts.
import { closeSync, mkdirSync, openSync, readSync, unlinkSync, writeSync } from 'node:fs';
import path from 'node:path';
import { OutputBudget } from './budget.ts';

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
  /** The kept chunk holding `offset`, trimmed to [offset, to); undefined when none is kept there. */
  chunkAt(offset: number, to: number): OutputChunk | undefined;
  /** Forgets everything (the job is forgotten): releases memory and deletes spool files. */
  discard(): void;
}

/** A spool file rotates past this size, so acknowledged parts of a long step's output leave the disk. */
export const SPOOL_FILE_BYTES = 16 * 1024 * 1024;

interface SpoolFile {
  path: string;
  fd: number;
  size: number;
  /** Pieces still held in it; at 0 the file is deleted. */
  live: number;
}

interface Piece {
  seq: number;
  offset: number;
  length: number;
  /** In memory … */
  bytes?: Buffer;
  /** … or at `pos` in a spool file. */
  file?: SpoolFile;
  pos?: number;
}

export interface SpooledOutputOptions {
  budget?: OutputBudget;
  /** The spool folder; without it everything stays in memory. */
  spoolDir?: string;
  /** File name prefix, unique per step (e.g. `<jobId>-<step>`). */
  name?: string;
}

export class SpooledOutput implements UnackedOutput {
  readonly #budget: OutputBudget;
  readonly #spoolDir: string | undefined;
  readonly #name: string;
  #pieces: Piece[] = [];
  #acked = 0;
  #file: SpoolFile | undefined;
  #files = 0;

  constructor(opts: SpooledOutputOptions = {}) {
    this.#budget = opts.budget ?? new OutputBudget({ memoryLimit: Infinity, unackedLimit: Infinity });
    this.#spoolDir = opts.spoolDir;
    this.#name = opts.name ?? 'output';
  }

  get ackedOffset(): number {
    return this.#acked;
  }

  /** The spool files currently held (for tests and logs). */
  get spoolFiles(): number {
    return new Set(this.#pieces.filter((p) => p.file).map((p) => p.file)).size;
  }

  append(chunk: OutputChunk): void {
    const length = chunk.bytes.length;
    if (length === 0) return;
    if (this.#spoolDir === undefined || this.#budget.fitsInMemory(length)) {
      // A copy: the chunk may be a view into a larger buffer that would otherwise stay alive.
      this.#pieces.push({ seq: chunk.seq, offset: chunk.offset, length, bytes: Buffer.from(chunk.bytes) });
      this.#budget.held(length, true);
      return;
    }
    const file = this.#spoolFile();
    const pos = file.size;
    let written = 0;
    while (written < length)
      written += writeSync(file.fd, chunk.bytes, written, length - written, pos + written);
    file.size += length;
    file.live++;
    this.#pieces.push({ seq: chunk.seq, offset: chunk.offset, length, file, pos });
    this.#budget.held(length, false);
  }

  ack(offset: number): void {
    if (offset <= this.#acked) return;
    this.#acked = offset;
    while (this.#pieces.length > 0) {
      const first = this.#pieces[0]!;
      const end = first.offset + first.length;
      if (end <= offset) {
        this.#pieces.shift();
        this.#drop(first, first.length);
        continue;
      }
      if (first.offset < offset) {
        // The coordinator acknowledged part of a chunk: keep only the rest.
        const cut = offset - first.offset;
        this.#budget.released(cut, first.bytes !== undefined);
        first.offset = offset;
        first.length -= cut;
        if (first.bytes) first.bytes = Buffer.from(first.bytes.subarray(cut));
        else first.pos! += cut;
      }
      break;
    }
  }

  chunkAt(offset: number, to: number): OutputChunk | undefined {
    const from = Math.max(offset, this.#acked);
    if (from >= to) return undefined;
    // Pieces are few and sorted; the wanted one is usually the first.
    for (const piece of this.#pieces) {
      const end = piece.offset + piece.length;
      if (end <= from) continue;
      if (piece.offset >= to) return undefined;
      const start = Math.max(from, piece.offset);
      const stop = Math.min(to, end);
      return { seq: piece.seq, offset: start, bytes: this.#read(piece, start - piece.offset, stop - start) };
    }
    return undefined;
  }

  /** The kept chunks with bytes in [from, to), the first one trimmed to start at `from`. */
  chunks(from: number, to: number): OutputChunk[] {
    const out: OutputChunk[] = [];
    let at = from;
    for (let c = this.chunkAt(at, to); c; c = this.chunkAt(at, to)) {
      out.push(c);
      at = c.offset + c.bytes.length;
    }
    return out;
  }

  discard(): void {
    for (const piece of this.#pieces.splice(0)) this.#drop(piece, piece.length);
    this.#closeFile(this.#file);
  }

  #read(piece: Piece, skip: number, length: number): Buffer {
    if (piece.bytes) return piece.bytes.subarray(skip, skip + length);
    const out = Buffer.allocUnsafe(length);
    let got = 0;
    while (got < length) {
      const n = readSync(piece.file!.fd, out, got, length - got, piece.pos! + skip + got);
      if (n === 0) throw new Error(`spool file ${piece.file!.path} is shorter than expected`);
      got += n;
    }
    return out;
  }

  #drop(piece: Piece, length: number): void {
    this.#budget.released(length, piece.bytes !== undefined);
    if (piece.file && --piece.file.live === 0) this.#closeFile(piece.file);
  }

  #spoolFile(): SpoolFile {
    if (this.#file && this.#file.size < SPOOL_FILE_BYTES) return this.#file;
    // The full file stays until its last piece is acknowledged; new output starts a new one.
    if (this.#file && this.#file.live === 0) this.#closeFile(this.#file);
    mkdirSync(this.#spoolDir!, { recursive: true, mode: 0o700 });
    const file = path.join(this.#spoolDir!, `${this.#name}-${this.#files++}.spool`);
    this.#file = { path: file, fd: openSync(file, 'w+', 0o600), size: 0, live: 0 };
    return this.#file;
  }

  #closeFile(file: SpoolFile | undefined): void {
    if (!file || file.fd < 0) return;
    closeSync(file.fd);
    file.fd = -1;
    try {
      unlinkSync(file.path);
    } catch {
      // already gone
    }
    if (this.#file === file) this.#file = undefined;
  }
}
