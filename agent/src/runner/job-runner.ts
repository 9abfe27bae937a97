// The jobs on this agent: takes the coordinator's job messages (assign, ack, cancel) to the
// right job, reports the running ones for `hello`, hands back unacknowledged output after a
// reconnect, and forgets a job once it is finished and all its output is stored.
import type { AgentMessage, Hello } from '@deckhand/protocol';
import type { Logger } from 'pino';
import type { JobMessage } from '../connection/connection.ts';
import { Job, type Send } from './job.ts';
import { ProjectLocks } from './project-locks.ts';

export interface JobRunnerOptions {
  workDir: string;
  send: Send;
  log: Logger;
  baseEnv?: NodeJS.ProcessEnv;
  /** SIGTERM → SIGKILL grace for cancelled steps. */
  graceMs?: number;
}

export class JobRunner {
  readonly #opts: JobRunnerOptions;
  readonly #log: Logger;
  readonly #locks = new ProjectLocks();
  readonly #jobs = new Map<string, { job: Job; done: Promise<void> }>();
  /** Process groups of running steps, for a last-moment SIGKILL if the agent must exit at once. */
  readonly groups = new Set<number>();

  constructor(opts: JobRunnerOptions) {
    this.#opts = opts;
    this.#log = opts.log;
  }

  /** Every job finished and every byte acknowledged. */
  get settled(): boolean {
    return this.#jobs.size === 0;
  }

  handle(message: JobMessage): void {
    switch (message.type) {
      case 'job.assign': {
        if (this.#jobs.has(message.jobId)) {
          this.#log.warn({ jobId: message.jobId }, 'job assigned twice: ignoring the repeat');
          return;
        }
        this.#log.info(
          { jobId: message.jobId, project: message.project.name, commit: message.repository.commit },
          'job assigned',
        );
        const job = new Job({
          assign: message,
          workDir: this.#opts.workDir,
          send: this.#opts.send,
          log: this.#log,
          locks: this.#locks,
          baseEnv: this.#opts.baseEnv ?? process.env,
          groups: this.groups,
          ...(this.#opts.graceMs !== undefined ? { graceMs: this.#opts.graceMs } : {}),
        });
        const done = job.run().then(() => this.#forgetIfSettled(job));
        this.#jobs.set(job.id, { job, done });
        return;
      }
      case 'output.ack': {
        const entry = this.#jobs.get(message.jobId);
        if (!entry) {
          this.#log.debug({ jobId: message.jobId }, 'ack for a job no longer kept');
          return;
        }
        entry.job.ack(message.step, message.offset);
        this.#forgetIfSettled(entry.job);
        return;
      }
      case 'job.cancel': {
        const entry = this.#jobs.get(message.jobId);
        if (!entry || entry.job.finished) {
          this.#log.warn({ jobId: message.jobId }, 'cancel for a job that is not running here');
          return;
        }
        entry.job.cancel(message.reason);
        return;
      }
    }
  }

  /** For `hello`: the jobs still running, with their step and how far its output got. */
  /**
   * For `hello.runningJobs`: every job still held — also a finished one whose output is not all
   * acknowledged yet, since its `job.finished` may still be waiting in the outbox; the coordinator
   * would otherwise take it for lost.
   */
  runningJobs(): Hello['runningJobs'] {
    return [...this.#jobs.values()].map((e) => e.job.progress).slice(0, 100);
  }

  /** After a reconnect: every job's unacknowledged output, oldest job first, steps in order. */
  resend(write: (message: AgentMessage) => void): void {
    let frames = 0;
    for (const { job } of this.#jobs.values()) {
      for (const frame of job.unackedFrames()) {
        write(frame);
        frames++;
      }
    }
    if (frames > 0) this.#log.info({ frames }, 're-sent unacknowledged output');
  }

  /** Cancels every running job and resolves when all have finished. */
  async cancelAll(reason: string): Promise<void> {
    const entries = [...this.#jobs.values()];
    for (const { job } of entries) job.cancel(reason);
    await Promise.all(entries.map((e) => e.done));
  }

  #forgetIfSettled(job: Job): void {
    if (job.settled) this.#jobs.delete(job.id);
  }
}
