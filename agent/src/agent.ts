// The agent: the connection to the coordinator and the jobs it runs, wired together. Owns the
// order of a graceful stop (cancel jobs, let their last output reach the coordinator, close).
import { mkdirSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { CloseCode, type Hello, PROTOCOL_VERSION } from '@deckhand/protocol';
import type { Logger } from 'pino';
import type { AgentConfig } from './config.ts';
import { AgentConnection } from './connection/connection.ts';
import { killGroupNow } from './executor/process-group.ts';
import { JobRunner } from './runner/job-runner.ts';

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
  #stopping: Promise<void> | undefined;

  constructor(opts: AgentOptions) {
    this.#opts = opts;
    const workDir = path.resolve(opts.config.workDir);
    this.#runner = new JobRunner({
      workDir,
      send: (message, onWritten) => this.#connection.send(message, onWritten),
      log: opts.log,
      ...(opts.graceMs !== undefined ? { graceMs: opts.graceMs } : {}),
    });
    this.#connection = new AgentConnection({
      url: opts.config.url,
      token: opts.config.token,
      log: opts.log,
      hello: () => this.#hello(),
      onReady: (_welcome, write) => this.#runner.resend(write),
      onMessage: (message) => this.#runner.handle(message),
      onFatal: (message) => void this.#fatal(message),
    });
    mkdirSync(workDir, { recursive: true });
  }

  start(): void {
    this.#connection.start();
  }

  /** Stops reconnecting, cancels the running jobs, and closes the connection normally. */
  stop(reason = 'the agent is stopping'): Promise<void> {
    this.#stopping ??= (async () => {
      await this.#runner.cancelAll(reason);
      const deadline = Date.now() + FINAL_ACK_WAIT_MS;
      while (!this.#runner.settled && this.#connection.ready && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 50));
      }
      await this.#connection.stop(CloseCode.NORMAL, 'agent stopping');
    })();
    return this.#stopping;
  }

  /** For a process that exits right now: SIGKILL to every step still running. */
  killAllNow(): void {
    for (const pgid of this.#runner.groups) killGroupNow(pgid);
  }

  async #fatal(message: string): Promise<void> {
    await this.#runner.cancelAll(`the agent stopped: ${message}`);
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
