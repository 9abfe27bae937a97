// One job's loop: accept, wait for the project folder, run the step plan (checkout, commands,
// and with releases activate + health check; a rollback is only the last two) reporting each
// step, and finish with the outcome. Every byte of output goes through the job's masker before
// it is framed. Keeps each step's output until the coordinator has acknowledged all of it, and
// the job itself until `job.ack`; until then its ends are re-sent after every reconnect.
import path from 'node:path';
import {
  buildFolder,
  createMasker,
  describeFailure,
  type JobAssign,
  type JobFinished,
  type PlannedStep,
  planSteps,
  runPlan,
  type StepFinished,
  type StepResult,
} from '@deckhand/protocol';
import type { Logger } from 'pino';
import { messageEntry, type OutboxEntry } from '../connection/outbox.ts';
import { projectDir, runCheckoutStep } from '../executor/checkout-step.ts';
import { runCommandStep } from '../executor/command-step.ts';
import type { RunningProcess } from '../executor/process.ts';
import { releasePaths, runActivateStep, switchBack } from '../executor/releases.ts';
import { commandEnv } from '../executor/step-env.ts';
import type { OutputBudget } from '../output/budget.ts';
import { OutputStream } from '../output/output-stream.ts';
import { SpooledOutput } from '../output/unacked-output.ts';
import type { ProjectLocks } from './project-locks.ts';

/** Queues an entry on the connection's outbox. */
export type Send = (entry: OutboxEntry) => void;

export type StopStatus = 'cancelled' | 'timed_out' | 'abandoned';

export interface JobOptions {
  assign: JobAssign;
  workDir: string;
  send: Send;
  log: Logger;
  locks: ProjectLocks;
  baseEnv: NodeJS.ProcessEnv;
  graceMs?: number;
  /** Live process groups (the agent kills them if it must exit at once). */
  groups?: Set<number>;
  /** The agent-wide bound on unacknowledged output (memory, spool, backpressure). */
  budget?: OutputBudget;
  /** Where output past the memory bound is spooled. */
  spoolDir?: string;
}

const MAX_REASON = 2000;

function clip(text: string, max: number): string {
  return text.length <= max ? text : `${text.slice(0, max - 1)}…`;
}

/** "5 s", "1.5 s", or "500 ms" below a second. */
export function formatDuration(ms: number): string {
  return ms < 1000 ? `${ms} ms` : `${Math.round(ms / 100) / 10} s`;
}

const STOP_PREFIX: Record<StopStatus, string> = {
  cancelled: 'cancelled',
  timed_out: 'timed out',
  abandoned: 'abandoned',
};

interface StepRecord {
  stream: OutputStream;
  /** Its `step.finished`, once sent; `written` once it reached a socket. */
  finished?: StepFinished;
  written: boolean;
}

export class Job {
  readonly id: string;
  readonly #opts: JobOptions;
  readonly #log: Logger;
  readonly #steps = new Map<number, StepRecord>();
  #step = 0;
  #process: RunningProcess | undefined;
  #stop: { status: StopStatus; reason: string } | undefined;
  /** The step a command timeout stopped, with the limit. */
  #timedOut: { step: PlannedStep; error: string } | undefined;
  #wakeFromWait: (() => void) | undefined;
  #finished: JobFinished | undefined;
  #finishedWritten = false;
  #acked = false;
  /** Where `current` pointed before this job's activate step switched it. */
  #previousCurrent: string | null | undefined;

  constructor(opts: JobOptions) {
    this.id = opts.assign.jobId;
    this.#opts = opts;
    this.#log = opts.log.child({ jobId: this.id, project: opts.assign.project.name });
  }

  get finished(): boolean {
    return this.#finished !== undefined;
  }

  /** Finished, its end acknowledged (`job.ack`), and every byte of output stored: nothing left to keep. */
  get settled(): boolean {
    return this.#acked && this.finished && [...this.#steps.values()].every((s) => s.stream.settled);
  }

  /** For `hello.runningJobs`: the step it is on (or ended on) and how many bytes that step printed. */
  get progress(): { jobId: string; step: number; offset: number } {
    return { jobId: this.id, step: this.#step, offset: this.#steps.get(this.#step)?.stream.bytes ?? 0 };
  }

  /** Runs the job to its end; never rejects. */
  async run(): Promise<void> {
    const { assign, send } = this.#opts;
    send(messageEntry({ type: 'job.accepted', jobId: this.id }));
    let finished: JobFinished | undefined;
    const slot = this.#opts.locks.acquire(`${this.#opts.workDir}\0${assign.project.name}`);
    try {
      await Promise.race([slot.acquired, new Promise<void>((r) => (this.#wakeFromWait = r))]);
      this.#wakeFromWait = undefined;
      if (this.#stop === undefined) {
        const plan = planSteps({
          commit: assign.repository.commit,
          commands: assign.commands,
          kind: assign.kind,
          release: assign.kind === 'rollback' ? assign.rollbackTo : assign.deploymentId,
          releases: assign.releases,
        });
        this.#log.info({ steps: plan.length, kind: assign.kind }, 'job started');
        const outcome = await runPlan(plan, (step) => this.#execute(step));
        if (outcome.status === 'success') {
          finished = { type: 'job.finished', jobId: this.id, status: 'success' };
        } else if (this.#timedOut && this.#timedOut.step.index === outcome.failedStep.index) {
          const reason = describeFailure(this.#timedOut.step, {
            exitCode: null,
            signal: null,
            error: this.#timedOut.error,
          }).replace(/ failed: (timed out after .*)$/, ' $1');
          finished = {
            type: 'job.finished',
            jobId: this.id,
            status: 'timed_out',
            reason: clip(reason, MAX_REASON),
          };
        } else {
          finished = {
            type: 'job.finished',
            jobId: this.id,
            status: 'failed',
            reason: clip(outcome.reason, MAX_REASON),
          };
        }
      }
    } catch (err) {
      this.#log.error({ err }, 'the job failed inside the agent');
      finished = {
        type: 'job.finished',
        jobId: this.id,
        status: 'failed',
        reason: clip(`agent error: ${(err as Error).message}`, MAX_REASON),
      };
    } finally {
      slot.release();
    }
    // A stop (cancel, the deployment's deadline, abandon) wins over whatever the stopped step reported.
    if (this.#stop !== undefined || finished === undefined) {
      finished = {
        type: 'job.finished',
        jobId: this.id,
        status: this.#stop?.status ?? 'cancelled',
        reason: clip(this.#stop?.reason ?? 'cancelled', MAX_REASON),
      };
    }
    this.#finished = finished;
    this.#log.info({ status: finished.status, reason: finished.reason }, 'job finished');
    send(messageEntry(finished, () => (this.#finishedWritten = true)));
  }

  /**
   * Stops the running step (SIGTERM → grace → SIGKILL to its group); no later step starts, and
   * the job ends with `status` and `reason`. The first stop wins.
   */
  stop(status: StopStatus, reason: string): void {
    if (this.finished || this.#stop !== undefined) return;
    this.#stop = { status, reason: reason || status };
    this.#log.info({ status, reason }, 'stopping the job');
    this.#wakeFromWait?.();
    this.#process?.cancel(`${STOP_PREFIX[status]}: ${this.#stop.reason}`);
  }

  ack(step: number, offset: number): void {
    this.#steps.get(step)?.stream.ack(offset);
  }

  /** The coordinator stored the job's end. */
  ackJob(): void {
    if (!this.finished) {
      this.#log.warn('job.ack for a job still running: ignored');
      return;
    }
    this.#acked = true;
  }

  /**
   * After a reconnect, what the old connection may have lost, steps in order: each step's output
   * written but not acknowledged, then its `step.finished` if it was written; then the
   * `job.finished` if it was written. Nothing once the coordinator acknowledged the job's end
   * (then only output may be left). Unwritten frames still wait in the outbox, behind these.
   */
  resendEntries(): OutboxEntry[] {
    const entries: OutboxEntry[] = [];
    for (const index of [...this.#steps.keys()].sort((a, b) => a - b)) {
      const record = this.#steps.get(index)!;
      const output = record.stream.resendEntry();
      if (output) entries.push(output);
      if (record.finished && record.written && !this.#acked) entries.push(messageEntry(record.finished));
    }
    if (this.#finished && this.#finishedWritten && !this.#acked) entries.push(messageEntry(this.#finished));
    return entries;
  }

  /** Forgets everything held (spool files included). */
  discard(): void {
    for (const { stream } of this.#steps.values()) stream.discard();
  }

  async #execute(step: PlannedStep): Promise<StepResult> {
    if (this.#stop !== undefined) {
      return {
        exitCode: null,
        signal: null,
        error: `${STOP_PREFIX[this.#stop.status]}: ${this.#stop.reason}`,
      };
    }
    const { assign, send } = this.#opts;
    this.#step = step.index;
    send(messageEntry({ type: 'step.started', jobId: this.id, step: step.index, cmd: step.cmd }));
    const store = new SpooledOutput({
      ...(this.#opts.budget !== undefined ? { budget: this.#opts.budget } : {}),
      ...(this.#opts.spoolDir !== undefined ? { spoolDir: this.#opts.spoolDir } : {}),
      name: `${this.id}-${step.index}`,
    });
    const stream = new OutputStream({ jobId: this.id, step: step.index, send, store });
    const record: StepRecord = { stream, written: false };
    this.#steps.set(step.index, record);
    // Secrets never leave the host: masked before framing, so offsets count masked bytes.
    const masker = createMasker(assign.masks);
    const print = (b: Buffer) => stream.write(masker.push(b));
    const common = {
      onOutput: print,
      ...(this.#opts.graceMs !== undefined ? { graceMs: this.#opts.graceMs } : {}),
      ...(this.#opts.groups !== undefined ? { groups: this.#opts.groups } : {}),
      ...(this.#opts.budget !== undefined ? { flow: this.#opts.budget } : {}),
    };
    const project = projectDir(this.#opts.workDir, assign.project.name);
    const releases = assign.releases;
    const release = assign.kind === 'rollback' ? assign.rollbackTo : assign.deploymentId;
    let result: StepResult;
    if (project === undefined) {
      result = {
        exitCode: null,
        signal: null,
        error: `unusable project name for a folder: ${assign.project.name}`,
      };
    } else {
      this.#process = this.#start(step, project, common, print);
      const timeoutMs = assign.commandTimeoutMs;
      let timer: NodeJS.Timeout | undefined;
      if (timeoutMs !== null && (step.kind === 'command' || step.kind === 'health-check')) {
        const proc = this.#process;
        timer = setTimeout(() => {
          if (this.#stop !== undefined) return;
          const error = `timed out after ${formatDuration(timeoutMs)}`;
          this.#timedOut = { step, error };
          this.#log.info({ step: step.index, timeoutMs }, 'the command timed out: stopping it');
          proc.cancel(error);
        }, timeoutMs);
      }
      result = await this.#process.result;
      clearTimeout(timer);
      this.#process = undefined;
      if (this.#timedOut?.step.index === step.index && this.#stop === undefined) {
        result = { ...result, error: this.#timedOut.error };
      }
      const ok = result.exitCode === 0 && result.signal === null && !result.error;
      if (step.kind === 'health-check' && !ok && releases && release && this.#previousCurrent !== undefined) {
        await switchBack(project, this.#previousCurrent, print);
      }
    }
    stream.write(masker.flush());
    const outputBytes = stream.finish();
    const done: StepFinished = {
      type: 'step.finished',
      jobId: this.id,
      step: step.index,
      exitCode: result.exitCode,
      signal: result.signal,
      outputBytes,
    };
    if (result.error) done.error = clip(result.error, MAX_REASON);
    this.#log.info(
      {
        step: step.index,
        exitCode: result.exitCode,
        signal: result.signal,
        outputBytes,
        error: result.error,
      },
      'step finished',
    );
    record.finished = done;
    send(messageEntry(done, () => (record.written = true)));
    return result;
  }

  #start(
    step: PlannedStep,
    project: string,
    common: Omit<Parameters<typeof runCommandStep>[1], 'cwd' | 'env'>,
    print: (b: Buffer) => void,
  ): RunningProcess {
    const { assign } = this.#opts;
    const releases = assign.releases;
    const release = assign.kind === 'rollback' ? assign.rollbackTo : assign.deploymentId;
    switch (step.kind) {
      case 'checkout':
        return runCheckoutStep({
          workDir: this.#opts.workDir,
          job: assign,
          baseEnv: this.#opts.baseEnv,
          ...common,
          ...(releases ? { release: assign.deploymentId } : {}),
        });
      case 'command':
        return runCommandStep(step.cmd, {
          cwd: path.join(project, buildFolder({ release, releases })),
          env: commandEnv(this.#opts.baseEnv, assign),
          ...common,
        });
      case 'activate':
        return runActivateStep({
          project,
          release: release!,
          keep: releases!.keep,
          print,
          env: this.#opts.baseEnv,
          onSwitched: (previous) => (this.#previousCurrent = previous),
        });
      case 'health-check':
        return runCommandStep(step.cmd, {
          cwd: releasePaths(project).current,
          env: commandEnv(this.#opts.baseEnv, assign),
          ...common,
        });
    }
  }
}
