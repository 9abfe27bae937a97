// The jobs on this agent: takes the coordinator's job messages (assign, output.ack, job.ack,
// cancel) to the right job, reports the held ones for `hello`, hands back what a lost connection
// may have swallowed after a reconnect, stops everything when the agent is cut off for too long
// (abandon), and forgets a job once its end is acknowledged and all its output is stored.
import type { Hello } from '@deckhand/protocol';
import type { Logger } from 'pino';
import type { JobMessage } from '../connection/connection.ts';
import type { OutboxEntry } from '../connection/outbox.ts';
import type { OutputBudget } from '../output/budget.ts';
import { Job, type Send, type StopStatus } from './job.ts';
import { GroupRegistry } from '../executor/group-registry.ts';
import { ProjectLocks } from './project-locks.ts';

export interface JobRunnerOptions {
  workDir: string;
  send: Send;
  log: Logger;
  baseEnv?: NodeJS.ProcessEnv;
  /** SIGTERM → SIGKILL grace for stopped steps. */
  graceMs?: number;
  budget?: OutputBudget;
  spoolDir?: string;
}

export class JobRunner {
  readonly #opts: JobRunnerOptions;
  readonly #log: Logger;
  readonly #locks = new ProjectLocks();
  readonly #jobs = new Map<string, { job: Job; done: Promise<void> }>();
  /** Process groups of running steps, for a last-moment SIGKILL if the agent must exit at once. */
  readonly groups: GroupRegistry;

  constructor(opts: JobRunnerOptions) {
    this.#opts = opts;
    this.#log = opts.log;
    this.groups = new GroupRegistry(opts.workDir);
  }

  /** Every job finished, its end acknowledged and every byte stored. */
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
          {
            jobId: message.jobId,
            project: message.project.name,
            commit: message.repository.commit,
            kind: message.kind,
          },
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
          ...(this.#opts.budget !== undefined ? { budget: this.#opts.budget } : {}),
          ...(this.#opts.spoolDir !== undefined ? { spoolDir: this.#opts.spoolDir } : {}),
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
      case 'job.ack': {
        const entry = this.#jobs.get(message.jobId);
        if (!entry) {
          this.#log.debug({ jobId: message.jobId }, 'job.ack for a job no longer kept');
          return;
        }
        entry.job.ackJob();
        this.#forgetIfSettled(entry.job);
        return;
      }
      case 'job.cancel': {
        const entry = this.#jobs.get(message.jobId);
        if (!entry || entry.job.finished) {
          this.#log.warn({ jobId: message.jobId }, 'cancel for a job that is not running here');
          return;
        }
        entry.job.stop(message.as, message.reason);
        return;
      }
    }
  }

  /**
   * For `hello.runningJobs`: every job still held — running, or ended but not acknowledged (its
   * `job.finished` is re-sent after the welcome); the coordinator would otherwise take it for lost.
   */
  runningJobs(): Hello['runningJobs'] {
    return [...this.#jobs.values()].map((e) => e.job.progress).slice(0, 100);
  }

  /** After a reconnect: what every held job may have lost, oldest job first (Job.resendEntries). */
  resendEntries(): OutboxEntry[] {
    const entries = [...this.#jobs.values()].flatMap(({ job }) => job.resendEntries());
    if (entries.length > 0)
      this.#log.info({ entries: entries.length }, 're-sending what the coordinator may not have');
    return entries;
  }

  /** Stops every running job with `status` and resolves when all have finished. */
  async stopAll(status: StopStatus, reason: string): Promise<void> {
    const entries = [...this.#jobs.values()];
    for (const { job } of entries) job.stop(status, reason);
    await Promise.all(entries.map((e) => e.done));
  }

  /** Whether any job is still running (not just waiting for acknowledgements). */
  get running(): boolean {
    return [...this.#jobs.values()].some((e) => !e.job.finished);
  }

  /** Forgets every job (the agent is exiting): spool files are deleted. */
  discardAll(): void {
    for (const { job } of this.#jobs.values()) job.discard();
    this.#jobs.clear();
  }

  #forgetIfSettled(job: Job): void {
    if (job.settled) {
      job.discard();
      this.#jobs.delete(job.id);
    }
  }
}
