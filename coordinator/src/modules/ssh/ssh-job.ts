// One job on an SSH target, run by this coordinator the way an agent runs a job (compare
// agent/src/runner/job.ts): the same step plan from protocol/, reported through the same
// JobService calls an agent's messages end up in — accepted, each step started, its output,
// finished, the job finished — so deployments, log entries, live events and notifications cannot
// tell the two apart. The connection is opened when the first step starts, and its outcome is
// the first thing that step's log says. Stops (cancel, the deployment's deadline, the command
// timeout) end the step's stdin on the host, where the step wrapper stops its process group.
import {
  buildFolder,
  describeFailure,
  type JobAssign,
  type PlannedStep,
  planSteps,
  runPlan,
  type StepResult,
} from '@deckhand/protocol';
import type { Logger } from 'pino';
import type { JobStatus } from '../deployment/deployment.entity.ts';
import { type JobService, LateMessage, ProtocolViolation, type Reporter } from '../deployment/job.service.ts';
import { OutputPump } from './output-pump.ts';
import { activateScript, checkoutScript, switchBackScript } from './remote-scripts.ts';
import {
  describeEndpoint,
  type RemoteResult,
  type RemoteRun,
  SshConnectError,
  type SshEndpoint,
  SshSession,
  type SshTimings,
} from './ssh-session.ts';

/**
 * Who reports for SSH jobs. JobService accepts a report only from the job's own agent
 * (`deployment_jobs.agent_id`); an SSH job has none (null), and this coordinator reports for it.
 */
export const SSH_REPORTER: Reporter = null;

export type SshStopStatus = 'cancelled' | 'timed_out' | 'failed';

const MAX_REASON = 2000;
const STOP_PREFIX: Record<SshStopStatus, string> = {
  cancelled: 'cancelled',
  timed_out: 'timed out',
  failed: 'stopped',
};
/** How long a report that the database refused is retried before the job is left to its lease. */
const REPORT_RETRY_MS = 60_000;

function clip(text: string, max: number): string {
  return text.length <= max ? text : `${text.slice(0, max - 1)}…`;
}

/** "5 s", "1.5 s", or "500 ms" below a second (as agents say it). */
function formatDuration(ms: number): string {
  return ms < 1000 ? `${ms} ms` : `${Math.round(ms / 100) / 10} s`;
}

export interface SshJobOptions {
  assign: JobAssign;
  endpoint: SshEndpoint;
  privateKey: string;
  jobs: JobService;
  log: Logger;
  /** SIGTERM → SIGKILL grace for stopped steps, on the host. */
  graceMs: number;
  timings: SshTimings;
}

/** The job ended on the coordinator without us (given up, deleted): nothing more is reported. */
class JobGone extends Error {}

export class SshJob {
  readonly id: string;
  readonly deploymentId: string;
  readonly #o: SshJobOptions;
  readonly #log: Logger;
  #session: SshSession | undefined;
  #connectError: SshConnectError | undefined;
  #running: RemoteRun | undefined;
  #stop: { status: SshStopStatus; reason: string } | undefined;
  #timedOut: { step: PlannedStep; error: string } | undefined;
  #gone = false;
  #shuttingDown = false;

  constructor(opts: SshJobOptions) {
    this.#o = opts;
    this.id = opts.assign.jobId;
    this.deploymentId = opts.assign.deploymentId;
    this.#log = opts.log.child({
      jobId: this.id,
      project: opts.assign.project.name,
      ssh: describeEndpoint(opts.endpoint),
    });
  }

  /** Runs the job to its end and reports it; never rejects. */
  async run(): Promise<void> {
    const { assign } = this.#o;
    let status: JobStatus = 'failed';
    let reason: string | undefined;
    try {
      await this.#report(() => this.#o.jobs.accepted(SSH_REPORTER, this.id));
      const plan = planSteps({
        commit: assign.repository.commit,
        commands: assign.commands,
        kind: assign.kind,
        release: this.#release(),
        releases: assign.releases,
      });
      this.#log.info({ steps: plan.length, kind: assign.kind }, 'SSH job started');
      const outcome = await runPlan(plan, (step) => this.#execute(step));
      if (outcome.status === 'success') {
        status = 'success';
      } else if (this.#connectError && outcome.failedStep.index === 0) {
        reason = this.#connectError.message;
      } else if (this.#timedOut && this.#timedOut.step.index === outcome.failedStep.index) {
        status = 'timed_out';
        reason = describeFailure(this.#timedOut.step, {
          exitCode: null,
          signal: null,
          error: this.#timedOut.error,
        }).replace(/ failed: (timed out after .*)$/, ' $1');
      } else {
        reason = outcome.reason;
      }
    } catch (err) {
      if (err instanceof JobGone) {
        this.#log.info({ reason: err.message }, 'the SSH job ended on the coordinator: stopped reporting it');
        this.#session?.end();
        return;
      }
      this.#log.error({ err }, 'the SSH job failed inside the coordinator');
      reason = `coordinator error while running over SSH: ${(err as Error).message}`;
    }
    this.#session?.end();
    // A stop (cancel, the deployment's deadline, shutdown) wins over what the stopped step reported.
    if (this.#stop !== undefined) {
      status = this.#stop.status;
      reason = this.#stop.reason;
    }
    this.#log.info({ status, reason }, 'SSH job finished');
    try {
      await this.#report(() =>
        this.#o.jobs.jobFinished(
          SSH_REPORTER,
          this.id,
          status,
          reason === undefined ? undefined : clip(reason, MAX_REASON),
        ),
      );
    } catch (err) {
      if (!(err instanceof JobGone)) this.#log.error({ err }, 'could not record the end of an SSH job');
    }
  }

  /**
   * Stops the running step (its process group on the host: TERM, grace, KILL) and starts no
   * other; the job ends with `status` and `reason`. The first stop wins.
   */
  stop(status: SshStopStatus, reason: string): void {
    if (this.#stop !== undefined) return;
    this.#stop = { status, reason: reason || status };
    this.#log.info({ status, reason }, 'stopping the SSH job');
    this.#running?.stop(`${STOP_PREFIX[status]}: ${this.#stop.reason}`);
  }

  /** The job ended on the coordinator (lost, deleted): stop on the host, report nothing more. */
  forget(why: string): void {
    this.#gone = true;
    this.stop('failed', why);
  }

  /**
   * This coordinator is shutting down: the connection closes now (the host stops the running
   * step's processes as its stdin ends) and the job ends failed, saying why.
   */
  shutdown(): void {
    this.#shuttingDown = true;
    this.stop(
      'failed',
      'the coordinator running this job over SSH shut down; the host stopped the running step',
    );
    this.#session?.end();
  }

  /** What a step stopped by the job's stop reports as its error (undefined: not stopped). */
  #stopError(): string | undefined {
    return this.#stop === undefined ? undefined : `${STOP_PREFIX[this.#stop.status]}: ${this.#stop.reason}`;
  }

  #release(): string | null {
    const { assign } = this.#o;
    return assign.kind === 'rollback' ? assign.rollbackTo : assign.deploymentId;
  }

  /** A JobService call; the database may refuse for a while (retried), the job may be gone (JobGone). */
  async #report(call: () => Promise<unknown>): Promise<void> {
    const deadline = Date.now() + REPORT_RETRY_MS;
    for (;;) {
      if (this.#gone) throw new JobGone('the job ended on the coordinator');
      try {
        await call();
        return;
      } catch (err) {
        if (err instanceof LateMessage || err instanceof ProtocolViolation) {
          this.#gone = true;
          this.#running?.stop('stopped: the job ended on the coordinator');
          throw new JobGone(err.message);
        }
        if (Date.now() > deadline || this.#shuttingDown) throw err;
        this.#log.warn({ err }, 'could not record SSH job progress: retrying');
        await new Promise((r) => setTimeout(r, 500));
      }
    }
  }

  async #connect(pump: OutputPump): Promise<SshSession | undefined> {
    if (this.#session) return this.#session;
    if (this.#connectError) return undefined;
    const { endpoint } = this.#o;
    const where = describeEndpoint(endpoint);
    pump.write(Buffer.from(`connecting to ${where} over SSH\n`));
    try {
      this.#session = await SshSession.connect(endpoint, this.#o.privateKey, this.#o.timings);
    } catch (err) {
      this.#connectError =
        err instanceof SshConnectError ? err : new SshConnectError('network', (err as Error).message);
      this.#log.warn(
        { kind: this.#connectError.kind, error: this.#connectError.message },
        'SSH connection failed',
      );
      return undefined;
    }
    pump.write(Buffer.from(`connected; host key ${endpoint.hostKeyFingerprint} verified\n`));
    if (this.#stop !== undefined || this.#gone) this.#session.end();
    return this.#session;
  }

  async #execute(step: PlannedStep): Promise<StepResult> {
    const stopped = this.#stopError();
    if (stopped !== undefined) return { exitCode: null, signal: null, error: stopped };
    const { assign, jobs } = this.#o;
    await this.#report(() => jobs.stepStarted(SSH_REPORTER, this.id, step.index, step.cmd));
    const pump = new OutputPump({
      masks: assign.masks,
      store: async (chunks) => {
        await jobs.outputs(
          SSH_REPORTER,
          chunks.map((c) => ({ jobId: this.id, step: step.index, ...c })),
        );
      },
      onStoreError: (err) => {
        if (err instanceof LateMessage || err instanceof ProtocolViolation || this.#gone) {
          this.#gone = true;
          this.#running?.stop('stopped: the job ended on the coordinator');
          return 'drop';
        }
        this.#log.warn({ err }, 'could not store SSH output: retrying');
        return 'retry';
      },
    });
    let result: RemoteResult;
    const session = await this.#connect(pump);
    if (!session) {
      result = { exitCode: null, signal: null, error: this.#connectError!.message };
    } else if (this.#stopError() !== undefined) {
      result = { exitCode: null, signal: null, error: this.#stopError() };
    } else {
      result = await this.#runStep(session, step, pump);
    }
    const outputBytes = await pump.finish();
    const finished: { exitCode: number | null; signal: string | null; outputBytes: number; error?: string } =
      {
        exitCode: result.exitCode,
        signal: result.signal,
        outputBytes,
      };
    if (result.error) finished.error = clip(result.error, MAX_REASON);
    this.#log.info({ step: step.index, ...finished }, 'SSH step finished');
    await this.#report(() => jobs.stepFinished(SSH_REPORTER, this.id, step.index, finished));
    return result;
  }

  async #runStep(session: SshSession, step: PlannedStep, pump: OutputPump): Promise<RemoteResult> {
    const { assign, graceMs } = this.#o;
    const project = assign.project.name;
    const releases = assign.releases;
    const release = this.#release();
    const run = (dir: string, script: string, env: Record<string, string>, markers = false) =>
      session.run({ dir, script, env, graceMs, output: pump, markers });

    let remote: RemoteRun;
    switch (step.kind) {
      case 'checkout': {
        const env: Record<string, string> = { GIT_TERMINAL_PROMPT: '0' };
        if (assign.repository.sshKey !== null) env.DECKHAND_SSH_KEY = assign.repository.sshKey;
        if (assign.repository.sshKey !== null && assign.repository.knownHosts !== null)
          env.DECKHAND_KNOWN_HOSTS = assign.repository.knownHosts;
        const script = checkoutScript({
          projectName: assign.project.name,
          projectId: assign.project.id,
          url: assign.repository.url,
          commit: assign.repository.commit,
          release: releases ? assign.deploymentId : null,
          withKey: assign.repository.sshKey !== null,
          withKnownHosts: assign.repository.sshKey !== null && assign.repository.knownHosts !== null,
        });
        remote = run('.', script, env, true);
        break;
      }
      case 'command':
        remote = run(`${project}/${buildFolder({ release, releases })}`, step.cmd, this.#commandEnv());
        break;
      case 'activate':
        remote = run(project, activateScript(release!, releases!.keep), {}, true);
        break;
      case 'health-check':
        remote = run(`${project}/current`, step.cmd, this.#commandEnv());
        break;
    }
    this.#running = remote;
    const stopped = this.#stopError();
    if (stopped !== undefined) remote.stop(stopped);
    let timer: NodeJS.Timeout | undefined;
    const timeoutMs = assign.commandTimeoutMs;
    if (timeoutMs !== null && (step.kind === 'command' || step.kind === 'health-check')) {
      timer = setTimeout(() => {
        if (this.#stop !== undefined) return;
        const error = `timed out after ${formatDuration(timeoutMs)}`;
        this.#timedOut = { step, error };
        this.#log.info({ step: step.index, timeoutMs }, 'the command timed out: stopping it');
        remote.stop(error);
      }, timeoutMs);
    }
    let result = await remote.result;
    clearTimeout(timer);
    this.#running = undefined;
    if (step.kind === 'activate' && result.previous !== undefined) this.#previousCurrent = result.previous;
    const ok = result.exitCode === 0 && result.signal === null && !result.error;
    if (
      step.kind === 'health-check' &&
      !ok &&
      this.#previousCurrent !== undefined &&
      session.lost === undefined
    ) {
      const back = await run(project, switchBackScript(this.#previousCurrent || null), {}).result;
      if (back.error) pump.write(Buffer.from(`could not switch current back: ${back.error}\n`));
    }
    if (this.#timedOut?.step.index === step.index && this.#stop === undefined) {
      result = { ...result, error: this.#timedOut.error };
    }
    return result;
  }

  /** Where `current` pointed before this job's activate step switched it ('' for nowhere). */
  #previousCurrent: string | undefined;

  /** The deployment's environment (secrets included) and the DECKHAND_* variables, which it cannot override. */
  #commandEnv(): Record<string, string> {
    const { assign } = this.#o;
    return {
      ...assign.env,
      DECKHAND_DEPLOYMENT_ID: assign.deploymentId,
      DECKHAND_JOB_ID: assign.jobId,
      DECKHAND_COMMIT: assign.repository.commit,
      DECKHAND_BRANCH: assign.repository.branch,
      DECKHAND_PROJECT: assign.project.name,
      DECKHAND_PROJECT_ID: assign.project.id,
    };
  }
}
