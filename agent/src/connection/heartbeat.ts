// The dead-connection watchdog: the coordinator pings every `heartbeatMs` and sends messages in
// between; when nothing at all has arrived for twice that, the connection is dead (a half-open
// TCP connection never says so by itself) and `onDead` runs once.

export interface HeartbeatOptions {
  heartbeatMs: number;
  onDead: (silentMs: number) => void;
  now?: () => number;
}

export class HeartbeatWatchdog {
  readonly #limitMs: number;
  readonly #onDead: (silentMs: number) => void;
  readonly #now: () => number;
  #lastSeen: number;
  #timer: NodeJS.Timeout | undefined;

  constructor(opts: HeartbeatOptions) {
    this.#limitMs = 2 * opts.heartbeatMs;
    this.#onDead = opts.onDead;
    this.#now = opts.now ?? Date.now;
    this.#lastSeen = this.#now();
    // Checking at a quarter of the limit detects silence at most 25% late.
    this.#timer = setInterval(() => this.#check(), Math.max(25, Math.floor(this.#limitMs / 4)));
  }

  /** Something (a message, a ping) arrived. */
  seen(): void {
    this.#lastSeen = this.#now();
  }

  stop(): void {
    clearInterval(this.#timer);
    this.#timer = undefined;
  }

  #check(): void {
    const silentMs = this.#now() - this.#lastSeen;
    if (silentMs > this.#limitMs) {
      this.stop();
      this.#onDead(silentMs);
    }
  }
}
