// A background loop of passes: one every `intervalMs`, and one soon after each `nudge()`. Passes
// never overlap; a nudge during a pass causes another right after it, so no wake-up is lost.
// `stop()` waits for the pass in progress. The scheduler and the notification worker run on it.
import type { Logger } from 'pino';

export interface PassLoopOptions {
  intervalMs: number;
  pass: () => Promise<void>;
  /** Called when a pass throws (after logging it). */
  onError?: (err: unknown) => void;
  log: Logger;
  /** Says which loop failed in the log. */
  name: string;
}

export class PassLoop {
  readonly #o: PassLoopOptions;
  #timer: NodeJS.Timeout | undefined;
  #running: Promise<void> | null = null;
  #again = false;
  #stopped = true;
  #stopRequested = false;

  constructor(options: PassLoopOptions) {
    this.#o = options;
  }

  /**
   * `stop()` was called (and not `start()` again since): a long pass checks it to end early. A
   * loop never started is not stopping, so a pass run by hand (tests, `runOnce`) goes to its end.
   */
  get stopRequested(): boolean {
    return this.#stopRequested;
  }

  start(): void {
    this.#stopped = false;
    this.#stopRequested = false;
    this.#timer = setInterval(() => this.nudge(), this.#o.intervalMs);
    this.#timer.unref();
    this.nudge();
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    this.#stopRequested = true;
    clearInterval(this.#timer);
    await this.#running;
  }

  /** Runs a pass soon; passes never overlap, and a nudge during one causes another after it. */
  nudge(): void {
    if (this.#stopped) return;
    if (this.#running) {
      this.#again = true;
      return;
    }
    this.#running = this.#o
      .pass()
      .catch((err) => {
        this.#o.log.error({ err }, `${this.#o.name} pass failed`);
        this.#o.onError?.(err);
      })
      .finally(() => {
        this.#running = null;
        if (this.#again && !this.#stopped) {
          this.#again = false;
          this.nudge();
        }
      });
  }
}
