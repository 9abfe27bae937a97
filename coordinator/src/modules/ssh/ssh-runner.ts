// The SSH runner: this coordinator process as the "agent" of SSH targets. It claims pending jobs
// of deployments to SSH targets (any replica may; claims are rows, FOR UPDATE SKIP LOCKED), runs
// each as an SshJob, and while it holds them renews their leases every tick — an SSH job has no
// agent to be heard from, so without the renewal JobService.expireLeases would give it up as
// lost — and picks up cancels and deadlines asked for on any replica. If this process dies, the
// renewals stop with it: its jobs end `failed` (coordinator lost) once their lease and the start-up
// grace run out, and on the hosts the steps stop as their SSH connections close.
import type { MikroORM } from '@mikro-orm/postgresql';
import type { Logger } from 'pino';
import type { JobDispatch } from '../deployment/job-dispatch.ts';
import { uuidArray } from '../deployment/job-plan.ts';
import type { JobService } from '../deployment/job.service.ts';
import type { ProjectService } from '../project/project.service.ts';
import { SSH_REPORTER, SshJob } from './ssh-job.ts';
import type { SshTimings } from './ssh-session.ts';

export interface SshRunnerOptions {
  orm: MikroORM;
  jobs: JobService;
  dispatch: JobDispatch;
  projects: ProjectService;
  log: Logger;
  leaseMs: number;
  /** How often leases are renewed and cancels looked for (well under the lease). */
  tickMs: number;
  /** SIGTERM → SIGKILL grace for stopped steps on the host. */
  graceMs: number;
  timings: SshTimings;
}

export const SSH_DEFAULTS = {
  tickMs: 1_000,
  graceMs: 10_000,
  timings: { connectTimeoutMs: 20_000, keepaliveMs: 5_000 },
} as const;

/** How long shutting down waits for the jobs held here to record their end. */
const STOP_WAIT_MS = 5_000;

export class SshRunner {
  readonly #o: SshRunnerOptions;
  readonly #held = new Map<string, { job: SshJob; done: Promise<void> }>();
  #timer: NodeJS.Timeout | undefined;
  #ticking: Promise<void> | null = null;
  #claiming: Promise<void> | null = null;
  #stopped = true;

  constructor(options: SshRunnerOptions) {
    this.#o = options;
  }

  /** Jobs running here now (ids). */
  get heldJobIds(): string[] {
    return [...this.#held.keys()];
  }

  start(): void {
    this.#stopped = false;
    this.#timer = setInterval(() => void this.#tick(), Math.min(this.#o.tickMs, this.#o.leaseMs / 3));
    this.#timer.unref();
  }

  /** Ends every job held here (their hosts stop the running steps) and waits briefly for their ends to be stored. */
  async stop(): Promise<void> {
    this.#stopped = true;
    clearInterval(this.#timer);
    await this.#claiming?.catch(() => undefined);
    await this.#ticking?.catch(() => undefined);
    const held = [...this.#held.values()];
    for (const { job } of held) job.shutdown();
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      Promise.allSettled(held.map((h) => h.done)),
      new Promise((r) => (timer = setTimeout(r, STOP_WAIT_MS))),
    ]);
    clearTimeout(timer);
  }

  /** Claims and starts the pending SSH jobs (after the scheduler started a deployment, and every tick). */
  async dispatch(): Promise<void> {
    if (this.#stopped) return;
    if (this.#claiming) return this.#claiming;
    this.#claiming = this.#claim().finally(() => (this.#claiming = null));
    return this.#claiming;
  }

  /** Looks for cancels now (a cancel was asked for in this process). */
  async checkCancels(): Promise<void> {
    await this.#renewAndCancel();
  }

  async #claim(): Promise<void> {
    const claimed = await this.#o.dispatch.claimPendingSsh();
    for (const { assign, ssh } of claimed) {
      const log = this.#o.log.child({ deployment: assign.deploymentId });
      const privateKey = await this.#o.projects.sshPrivateKey(assign.project.id);
      if (privateKey === null) {
        await this.#o.jobs
          .jobFinished(
            SSH_REPORTER,
            assign.jobId,
            'failed',
            'the project has no SSH private key: set target.ssh.private_key',
          )
          .catch((err) => log.error({ err }, 'could not fail an SSH job without a key'));
        continue;
      }
      const job = new SshJob({
        assign,
        endpoint: {
          host: ssh.host,
          port: ssh.port,
          username: ssh.username,
          hostKeyFingerprint: ssh.host_key_fingerprint,
        },
        privateKey,
        jobs: this.#o.jobs,
        log,
        graceMs: this.#o.graceMs,
        timings: this.#o.timings,
      });
      const done = job.run().finally(() => this.#held.delete(job.id));
      this.#held.set(job.id, { job, done });
      log.info({ job: job.id, host: ssh.host }, 'SSH job started');
    }
  }

  async #tick(): Promise<void> {
    if (this.#ticking || this.#stopped) return;
    this.#ticking = (async () => {
      try {
        await this.#renewAndCancel();
        await this.dispatch();
      } catch (err) {
        this.#o.log.error({ err }, 'SSH runner bookkeeping failed');
      }
    })().finally(() => (this.#ticking = null));
    await this.#ticking;
  }

  /**
   * One statement: the held jobs' leases renewed, and for each whether its deployment was asked
   * to stop. A held job the database no longer has in flight ended without us: it is forgotten.
   */
  async #renewAndCancel(): Promise<void> {
    const ids = this.heldJobIds;
    if (ids.length === 0) return;
    const rows = await this.#o.orm.em
      .fork()
      .execute<
        Array<{ id: string; cancel_as: 'cancelled' | 'timed_out' | null; cancel_reason: string | null }>
      >(
        `update deployment_jobs j set lease_expires_at = now() + ? * interval '1 millisecond'
         from deployments d
        where j.deployment_id = d.id and j.id = any(?::uuid[]) and j.status in ('sent', 'running')
        returning j.id, d.cancel_as, d.cancel_reason`,
        [this.#o.leaseMs, uuidArray(ids)],
      );
    const live = new Map(rows.map((r) => [r.id, r]));
    for (const id of ids) {
      const held = this.#held.get(id);
      if (!held) continue;
      const row = live.get(id);
      if (!row) held.job.forget('the job ended on the coordinator');
      else if (row.cancel_as) held.job.stop(row.cancel_as, row.cancel_reason ?? row.cancel_as);
    }
  }
}
