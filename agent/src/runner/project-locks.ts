// At most one job per project folder at a time: a second job for the same project waits for the
// first (jobs of different projects run side by side).

export interface ProjectSlot {
  /** Resolves when the folder is this job's. */
  acquired: Promise<void>;
  /** Gives the folder to the next job; safe to call before `acquired` resolves (a cancelled wait). */
  release: () => void;
}

export class ProjectLocks {
  readonly #tails = new Map<string, Promise<void>>();

  acquire(key: string): ProjectSlot {
    const previous = this.#tails.get(key) ?? Promise.resolve();
    let release!: () => void;
    const mine = new Promise<void>((resolve) => (release = resolve));
    const tail = previous.then(() => mine);
    this.#tails.set(key, tail);
    void tail.then(() => {
      if (this.#tails.get(key) === tail) this.#tails.delete(key);
    });
    return { acquired: previous, release };
  }
}
