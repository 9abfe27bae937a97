// The scheduler: starts queued deployments. Per project, only the oldest queued deployment is a
// candidate, and only while nothing of that project runs (a partial unique index in PostgreSQL
// makes "one running per project" hold across coordinator replicas). A candidate starts when every
// host of its target is online: its commit is fixed (resolved from the branch head if the trigger
// named none), it turns `running`, and one pending job per host is created, which the agent hubs
// send (an SSH target's one job, with no agent, is the SSH runner's: ssh/ssh-runner.ts). Until
// then its `reason` names what it waits for. Claims use FOR UPDATE SKIP LOCKED, so several replicas
// can run this loop against one database.
import type { MikroORM } from '@mikro-orm/postgresql';
import { UniqueConstraintViolationException } from '@mikro-orm/postgresql';
import type { Logger } from 'pino';
import { PassLoop } from '../common/pass-loop.ts';
import type { AgentService } from '../agent/agent.service.ts';
import type { ProjectService } from '../project/project.service.ts';
import { sshHostName } from '../ssh/ssh-session.ts';
import { resolveBranchHead } from './commit-resolver.ts';
import type { DeploymentSnapshot } from './deployment.entity.ts';
import type { DeploymentEvents } from './deployment-events.ts';
import { isSshRemote } from './job-dispatch.ts';
import type { JobService } from './job.service.ts';

interface Candidate {
  id: string;
  project_id: string;
  commit: string | null;
  branch: string;
  reason: string | null;
  snapshot: DeploymentSnapshot;
}

export interface SchedulerOptions {
  orm: MikroORM;
  agents: AgentService;
  projects: ProjectService;
  events: DeploymentEvents;
  jobs: JobService;
  leaseMs: number;
  /** Sends pending jobs to the agents connected to this process. */
  dispatch: () => Promise<void>;
  log: Logger;
  intervalMs: number;
}

export class Scheduler {
  readonly #o: SchedulerOptions;
  readonly #loop: PassLoop;
  /** A pass failed (the database is usually why): leases could not be renewed meanwhile. */
  #failedSince: number | null = null;

  constructor(options: SchedulerOptions) {
    this.#o = options;
    this.#loop = new PassLoop({
      intervalMs: options.intervalMs,
      pass: () => this.#pass(),
      onError: () => {
        this.#failedSince ??= Date.now();
      },
      log: options.log,
      name: 'scheduler',
    });
  }

  start(): void {
    this.#loop.start();
  }

  async stop(): Promise<void> {
    await this.#loop.stop();
  }

  /** Runs a pass soon; passes never overlap, and a nudge during one causes another after it. */
  nudge(): void {
    this.#loop.nudge();
  }

  /** One pass, awaited (tests and the first pass at start-up). */
  async runOnce(): Promise<void> {
    await this.#pass();
  }

  async #pass(): Promise<void> {
    await this.#housekeeping();
    const em = this.#o.orm.em.fork();
    const candidates = await em.execute<Candidate[]>(
      `select d.id, d.project_id, d.commit, d.branch, d.reason, d.snapshot
         from deployments d
        where d.status = 'queued'
          and not exists (select 1 from deployments r where r.project_id = d.project_id and r.status = 'running')
          and not exists (select 1 from deployments e
                           where e.project_id = d.project_id and e.status = 'queued'
                             and (e.started_at, e.id) < (d.started_at, d.id))
        order by d.started_at
        limit 50`,
    );
    let started = false;
    for (const candidate of candidates) {
      if (this.#loop.stopRequested) break;
      started = (await this.#tryStart(candidate)) || started;
    }
    if (started) await this.#o.dispatch();
  }

  /**
   * Nothing is left running or waiting forever: jobs whose agents fell silent past their lease
   * are lost, running deployments past their deadline are stopped as timed out, and queued ones
   * past the queue timeout fail with what they waited for.
   */
  async #housekeeping(): Promise<void> {
    if (this.#failedSince !== null) {
      // Back after failing: agents could not be heard (nor kept) meanwhile, so their silence is
      // ours. They get the start-up grace before anything counts as lost.
      const inFlight = await this.#o.jobs.reconcileInFlight();
      this.#o.log.info(
        { jobs: inFlight, failedForMs: Date.now() - this.#failedSince },
        'scheduler passes work again: leases of jobs in flight extended',
      );
      this.#failedSince = null;
    }
    const lost = await this.#o.jobs.expireLeases();
    if (lost) this.#o.log.warn({ jobs: lost }, 'jobs lost with their agents (lease expired)');
    const em = this.#o.orm.em.fork();
    const late = await em.execute<Array<{ id: string; seconds: number | null }>>(
      `select id, (snapshot->'policies'->'timeouts'->>'deployment_seconds')::int as seconds
         from deployments
        where status = 'running' and deadline_at < now() and cancel_requested_at is null`,
    );
    for (const d of late) {
      await this.#o.jobs.requestCancel(
        d.id,
        'timed_out',
        `The deployment ran longer than its limit of ${d.seconds} s`,
      );
    }
    const expired = await em.execute<Array<{ id: string }>>(
      `update deployments
          set status = 'failed', finished_at = now(),
              reason = 'Waited longer than ' || coalesce((snapshot->'policies'->'timeouts'->>'queue_seconds')::int, 3600)
                       || ' s in the queue: ' || coalesce(reason, 'not started')
        where status = 'queued'
          and started_at + coalesce((snapshot->'policies'->'timeouts'->>'queue_seconds')::int, 3600) * interval '1 second' < now()
        returning id`,
    );
    for (const d of expired) this.#o.events.changed(d.id);
  }

  async #tryStart(c: Candidate): Promise<boolean> {
    const target = c.snapshot.target;
    if ('ssh' in target) {
      // Nothing to wait for: the SSH runner connects when it runs the job, and a host it cannot
      // reach (or whose key does not match) fails the deployment with the reason.
      let commit = c.commit;
      if (!commit) {
        try {
          commit = await this.#resolve(c);
        } catch (err) {
          await this.#fail(c, (err as Error).message);
          return false;
        }
      }
      return this.#claim(c, commit, [{ agentId: null, name: sshHostName(target.ssh) }]);
    }
    const agents = await this.#o.agents.matching(target.agents);
    if (agents.length === 0) {
      const what =
        'labels' in target.agents
          ? `with the labels ${target.agents.labels.join(', ')}`
          : `named ${target.agents.names.join(', ')}`;
      return this.#wait(c, `Waiting for an agent ${what}: none is registered`);
    }
    const offline = agents.filter((a) => !this.#o.agents.isOnline(a)).map((a) => a.name);
    if (offline.length > 0) {
      return this.#wait(
        c,
        `Waiting for ${offline.length === 1 ? 'agent' : 'agents'} ${offline.join(', ')} (offline)`,
      );
    }
    let commit = c.commit;
    if (!commit) {
      try {
        commit = await this.#resolve(c);
      } catch (err) {
        await this.#fail(c, (err as Error).message);
        return false;
      }
    }
    return this.#claim(
      c,
      commit,
      agents.map((a) => ({ agentId: a.id, name: a.name })),
    );
  }

  async #resolve(c: Candidate): Promise<string> {
    const project = await this.#o.projects.find(c.project_id);
    const useKey =
      project !== null && project.checkoutCredentials !== 'host' && isSshRemote(c.snapshot.forgeUrl);
    return resolveBranchHead({
      url: c.snapshot.forgeUrl,
      branch: c.branch,
      sshKey: useKey ? await this.#o.projects.deployKey(project) : null,
      knownHosts: project?.forgeKnownHosts ?? null,
    });
  }

  /** Starts the deployment with one job per host: an agent's, or (agentId null) the SSH runner's. */
  async #claim(
    c: Candidate,
    commit: string,
    targets: Array<{ agentId: string | null; name: string }>,
  ): Promise<boolean> {
    const hosts = targets.map((t) => t.name);
    try {
      const claimed = await this.#o.orm.em.fork().transactional(async (em) => {
        const locked = await em.execute<Array<{ id: string }>>(
          `select id from deployments where id = ? and status = 'queued' for update skip locked`,
          [c.id],
        );
        if (locked.length === 0) return false;
        const seconds = c.snapshot.policies?.timeouts.deployment_seconds ?? null;
        await em.execute(
          `update deployments set status = 'running', commit = ?, hosts = ?, reason = ?,
                  deadline_at = now() + ?::int * interval '1 second'
            where id = ?`,
          [commit, JSON.stringify(hosts), `Running on ${hosts.join(', ')}`, seconds, c.id],
        );
        for (const t of targets) {
          await em.execute(
            // The lease starts now: an agent that goes away before it gets the job loses it too.
            `insert into deployment_jobs (id, created_at, deployment_id, agent_id, host, status, lease_expires_at)
             values (gen_random_uuid(), now(), ?, ?, ?, 'pending', now() + ? * interval '1 millisecond')`,
            [c.id, t.agentId, t.name, this.#o.leaseMs],
          );
        }
        return true;
      });
      if (claimed) {
        this.#o.log.info({ deployment: c.id, commit, hosts }, 'deployment started');
        this.#o.events.changed(c.id);
      }
      return claimed;
    } catch (err) {
      // Another replica started a deployment of this project meanwhile: this one stays queued.
      if (err instanceof UniqueConstraintViolationException) return false;
      throw err;
    }
  }

  async #wait(c: Candidate, reason: string): Promise<false> {
    if (c.reason !== reason) {
      await this.#o.orm.em
        .fork()
        .execute(`update deployments set reason = ? where id = ? and status = 'queued'`, [reason, c.id]);
      this.#o.events.changed(c.id);
    }
    return false;
  }

  async #fail(c: Candidate, reason: string): Promise<void> {
    await this.#o.orm.em
      .fork()
      .execute(
        `update deployments set status = 'failed', reason = ?, finished_at = now() where id = ? and status = 'queued'`,
        [reason, c.id],
      );
    this.#o.log.warn({ deployment: c.id, reason }, 'deployment failed before it started');
    this.#o.events.changed(c.id);
    this.nudge();
  }
}
