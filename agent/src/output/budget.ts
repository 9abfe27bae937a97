// The agent-wide account of unacknowledged output: how much of it is held in memory (the rest is
// in spool files, spooled-output.ts) and how much there is in all. Past `memoryLimit` new output
// goes to disk; past `unackedLimit` the steps' pipes are paused (process.ts) until acks bring the
// total down again, so a command printing faster than the network takes it cannot grow the agent.

export const SPOOL_MEMORY_BYTES = 8 * 1024 * 1024;
export const MAX_UNACKED_BYTES = 64 * 1024 * 1024;

/** What a running process needs to know to pause its output (implemented by OutputBudget). */
export interface OutputFlow {
  /** Unacknowledged output is at or past its bound: stop reading. */
  readonly over: boolean;
  /** Runs `resume` once, when unacknowledged output is below its bound again. */
  onceBelow(resume: () => void): void;
}

export class OutputBudget implements OutputFlow {
  readonly memoryLimit: number;
  readonly unackedLimit: number;
  #memory = 0;
  #unacked = 0;
  #waiters: (() => void)[] = [];

  constructor(opts: { memoryLimit?: number; unackedLimit?: number } = {}) {
    this.memoryLimit = opts.memoryLimit ?? SPOOL_MEMORY_BYTES;
    this.unackedLimit = opts.unackedLimit ?? MAX_UNACKED_BYTES;
  }

  get memoryBytes(): number {
    return this.#memory;
  }

  get unackedBytes(): number {
    return this.#unacked;
  }

  get over(): boolean {
    return this.#unacked >= this.unackedLimit;
  }

  /** Whether `bytes` more fit in memory. */
  fitsInMemory(bytes: number): boolean {
    return this.#memory + bytes <= this.memoryLimit;
  }

  held(bytes: number, inMemory: boolean): void {
    this.#unacked += bytes;
    if (inMemory) this.#memory += bytes;
  }

  released(bytes: number, inMemory: boolean): void {
    this.#unacked -= bytes;
    if (inMemory) this.#memory -= bytes;
    if (!this.over && this.#waiters.length > 0) {
      const waiters = this.#waiters;
      this.#waiters = [];
      for (const w of waiters) w();
    }
  }

  onceBelow(resume: () => void): void {
    if (!this.over) resume();
    else this.#waiters.push(resume);
  }
}
