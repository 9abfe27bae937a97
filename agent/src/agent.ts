// The agent: the connection to the coordinator and the jobs it runs, wired together. Owns the
// order of a graceful stop (cancel jobs, let their last output reach the coordinator, close), the
// output budget (memory, spool, backpressure) and the abandon clock: cut off from the coordinator
// (no welcomed connection) for longer than the last welcome's `abandonAfterMs`, it stops every
// running job and reports them `abandoned` once it is back.
import { mkdirSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { CloseCode, type Hello, PROTOCOL_VERSION } from '@deckhand/protocol';
import type { Logger } from 'pino';
import type { AgentConfig } from './config.ts';
import { AgentConnection } from './connection/connection.ts';
import { killGroupNow } from './executor/process-group.ts';
import { OutputBudget } from './output/budget.ts';
import { formatDuration } from './runner/job.ts';
import { JobRunner } from './runner/job-runner.ts';
import { SelfUpdater } from './self-update.ts';

export interface AgentOptions {
  config: AgentConfig;
  log: Logger;
  agentVersion: string;
  /** A close that must not be retried; the agent has stopped its jobs when this runs. */
  onFatal: (message: string) => void;
  hostname?: string;
  /** SIGTERM → SIGKILL grace for cancelled steps. */
  graceMs?: number;
}

/** How long a stopping agent waits for the coordinator to acknowledge the last output. */
const FINAL_ACK_WAIT_MS = 2_000;

export class Agent {
  readonly #opts: AgentOptions;
  readonly #connection: AgentConnection;
  readonly #runner: JobRunner;
  readonly #log: Logger;
  readonly #updater: SelfUpdater;
  #stopping: Promise<void> | undefined;
  #abandonAfterMs: number | undefined;
  #abandonTimer: NodeJS.Timeout | undefined;

  constructor(opts: AgentOptions) {
    this.#opts = opts;
    this.#log = opts.log;
    const workDir = path.resolve(opts.config.workDir);
    // Spool files of an earlier agent process belong to jobs it has lost: start empty.
    const spoolDir = path.join(workDir, '.deckhand', 'spool');
    rmSync(spoolDir, { recursive: true, force: true });
    mkdirSync(spoolDir, { recursive: true, mode: 0o700 });
    this.#runner = new JobRunner({
      workDir,
      send: (entry) => this.#connection.enqueue(entry),
      log: opts.log,
      budget: new OutputBudget({
        memoryLimit: opts.config.spoolMemoryBytes,
        unackedLimit: opts.config.maxUnackedBytes,
      }),
      spoolDir,
      ...(opts.graceMs !== undefined ? { graceMs: opts.graceMs } : {}),
    });
    // Steps of an earlier agent process that was killed outright may still be running: they
    // belong to jobs it lost, so they go before this one takes any job.
    const leftovers = this.#runner.groups.killLeftovers();
    if (leftovers.length) {
      opts.log.warn({ groups: leftovers }, 'killed process groups left running by an earlier agent process');
    }
    this.#updater = new SelfUpdater({
      currentVersion: opts.agentVersion,
      coordinatorUrl: opts.config.url,
      log: opts.log,
      idle: () => this.#runner.settled,
      stop: () => this.stop('the agent is restarting with a new version'),
    });
    this.#connection = new AgentConnection({
      url: opts.config.url,
      token: opts.config.token,
      log: opts.log,
      hello: () => this.#hello(),
      onReady: (welcome) => {
        clearTimeout(this.#abandonTimer);
        this.#abandonTimer = undefined;
        this.#abandonAfterMs = welcome.abandonAfterMs;
        this.#updater.offered(welcome.update);
        return this.#runner.resendEntries();
      },
      onDown: () => this.#startAbandonClock(),
      onMessage: (message) => this.#runner.handle(message),
      onFatal: (message) => void this.#fatal(message),
    });
  }

  start(): void {
    this.#connection.start();
  }

  /** Stops reconnecting, cancels the running jobs, and closes the connection normally. */
  stop(reason = 'the agent is stopping'): Promise<void> {
    this.#stopping ??= (async () => {
      clearTimeout(this.#abandonTimer);
      await this.#runner.stopAll('cancelled', reason);
      const deadline = Date.now() + FINAL_ACK_WAIT_MS;
      while (!this.#runner.settled && this.#connection.ready && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 50));
      }
      await this.#connection.stop(CloseCode.NORMAL, 'agent stopping');
      this.#runner.discardAll();
    })();
    return this.#stopping;
  }

  /** For a process that exits right now: SIGKILL to every step still running. */
  killAllNow(): void {
    for (const pgid of this.#runner.groups) killGroupNow(pgid);
  }

  #startAbandonClock(): void {
    const limit = this.#abandonAfterMs;
    if (limit === undefined || this.#abandonTimer !== undefined) return;
    this.#abandonTimer = setTimeout(() => {
      this.#abandonTimer = undefined;
      if (!this.#runner.running) return;
      const reason = `cut off from the coordinator for more than ${formatDuration(limit)}`;
      this.#log.warn({ abandonAfterMs: limit }, `${reason}: stopping every running job`);
      void this.#runner.stopAll('abandoned', reason);
    }, limit);
  }

  async #fatal(message: string): Promise<void> {
    clearTimeout(this.#abandonTimer);
    await this.#runner.stopAll('cancelled', `the agent stopped: ${message}`);
    this.#runner.discardAll();
    this.#opts.onFatal(message);
  }

  #hello(): Hello {
    return {
      type: 'hello',
      protocolVersion: PROTOCOL_VERSION,
      agentVersion: this.#opts.agentVersion,
      hostname: (this.#opts.hostname ?? os.hostname()).slice(0, 255),
      labels: this.#opts.config.labels,
      runningJobs: this.#runner.runningJobs(),
    };
  }
}
