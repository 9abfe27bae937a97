// One job's loop: accept, wait for the project folder, run the step plan (checkout, then the
// commands) reporting each step, and finish with the outcome. Keeps each step's output stream
// until the coordinator has acknowledged all of it.
import {
  type AgentMessage,
  type JobAssign,
  type JobFinished,
  type PlannedStep,
  planSteps,
  runPlan,
  type StepFinished,
  type StepOutput,
  type StepResult,
} from '@deckhand/protocol';
import type { Logger } from 'pino';
import { projectDir, runCheckoutStep } from '../executor/checkout-step.ts';
import { runCommandStep } from '../executor/command-step.ts';
import type { RunningProcess } from '../executor/process.ts';
import { commandEnv } from '../executor/step-env.ts';
import { OutputStream } from '../output/output-stream.ts';
import type { ProjectLocks } from './project-locks.ts';

export type Send = (message: AgentMessage, onWritten?: () => void) => void;

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
}

const MAX_REASON = 2000;

function clip(text: string, max: number): string {
  return text.length <= max ? text : `${text.slice(0, max - 1)}…`;
}

export class Job {
  readonly id: string;
  readonly #opts: JobOptions;
  readonly #log: Logger;
  readonly #streams = new Map<number, OutputStream>();
  #step = 0;
  #process: RunningProcess | undefined;
  #cancelReason: string | undefined;
  #wakeFromWait: (() => void) | undefined;
  #finished = false;

  constructor(opts: JobOptions) {
    this.id = opts.assign.jobId;
    this.#opts = opts;
    this.#log = opts.log.child({ jobId: this.id, project: opts.assign.project.name });
  }

  get finished(): boolean {
    return this.#finished;
  }

  /** Finished, and every byte of output stored by the coordinator: nothing left to keep. */
  get settled(): boolean {
    return this.#finished && [...this.#streams.values()].every((s) => s.settled);
  }

  /** For `hello.runningJobs`: the step it is on and how many bytes that step has printed. */
  get progress(): { jobId: string; step: number; offset: number } {
    return { jobId: this.id, step: this.#step, offset: this.#streams.get(this.#step)?.bytes ?? 0 };
  }

  /** Runs the job to its end; never rejects. */
  async run(): Promise<void> {
    const { assign, send } = this.#opts;
    send({ type: 'job.accepted', jobId: this.id });
    let finished: JobFinished | undefined;
    const slot = this.#opts.locks.acquire(`${this.#opts.workDir}\0${assign.project.name}`);
    try {
      await Promise.race([slot.acquired, new Promise<void>((r) => (this.#wakeFromWait = r))]);
      this.#wakeFromWait = undefined;
      if (this.#cancelReason === undefined) {
        this.#log.info({ steps: assign.commands.length + 1 }, 'job started');
        const plan = planSteps({ commit: assign.repository.commit, commands: assign.commands });
        const outcome = await runPlan(plan, (step) => this.#execute(step));
        finished =
          outcome.status === 'success'
            ? { type: 'job.finished', jobId: this.id, status: 'success' }
            : {
                type: 'job.finished',
                jobId: this.id,
                status: 'failed',
                reason: clip(outcome.reason, MAX_REASON),
              };
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
    // A cancel wins over whatever the stopped step reported.
    if (this.#cancelReason !== undefined || finished === undefined) {
      finished = {
        type: 'job.finished',
        jobId: this.id,
        status: 'cancelled',
        reason: clip(this.#cancelReason ?? 'cancelled', MAX_REASON),
      };
    }
    this.#finished = true;
    this.#log.info({ status: finished.status, reason: finished.reason }, 'job finished');
    send(finished);
  }

  /** Stops the running step (SIGTERM → grace → SIGKILL to its group); no later step starts. */
  cancel(reason: string): void {
    if (this.#finished || this.#cancelReason !== undefined) return;
    this.#cancelReason = reason || 'cancelled';
    this.#log.info({ reason }, 'cancelling the job');
    this.#wakeFromWait?.();
    this.#process?.cancel(this.#cancelReason);
  }

  ack(step: number, offset: number): void {
    this.#streams.get(step)?.ack(offset);
  }

  /** Output written to a socket but not acknowledged, steps in order, for re-sending after a reconnect. */
  unackedFrames(): StepOutput[] {
    return [...this.#streams.values()].flatMap((s) => s.unackedFrames());
  }

  async #execute(step: PlannedStep): Promise<StepResult> {
    if (this.#cancelReason !== undefined) {
      return { exitCode: null, signal: null, error: `cancelled: ${this.#cancelReason}` };
    }
    const { assign, send } = this.#opts;
    this.#step = step.index;
    send({ type: 'step.started', jobId: this.id, step: step.index, cmd: step.cmd });
    const stream = new OutputStream({ jobId: this.id, step: step.index, send });
    this.#streams.set(step.index, stream);
    const common = {
      onOutput: (b: Buffer) => stream.write(b),
      ...(this.#opts.graceMs !== undefined ? { graceMs: this.#opts.graceMs } : {}),
      ...(this.#opts.groups !== undefined ? { groups: this.#opts.groups } : {}),
    };
    this.#process =
      step.kind === 'checkout'
        ? runCheckoutStep({
            workDir: this.#opts.workDir,
            job: assign,
            baseEnv: this.#opts.baseEnv,
            ...common,
          })
        : runCommandStep(step.cmd, {
            cwd: projectDir(this.#opts.workDir, assign.project.name) ?? this.#opts.workDir,
            env: commandEnv(this.#opts.baseEnv, assign),
            ...common,
          });
    const result = await this.#process.result;
    this.#process = undefined;
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
    send(done);
    return result;
  }
}
