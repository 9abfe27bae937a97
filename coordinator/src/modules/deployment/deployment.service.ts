// Deployments: the one function every trigger calls (manual, API, webhook, redeploy), which
// stores a queued deployment with a snapshot of what will run in a single transaction and
// returns at once; and the reads (detail with logs, listing). Running them is the scheduler's
// job (the agents issue): until then a deployment waits `queued` with a reason naming the
// hosts it waits for.
import type { EntityManager, MikroORM } from '@mikro-orm/postgresql';
import type { AgentService } from '../agent/agent.service.ts';
import { recordAudit } from '../audit/audit.service.ts';
import type { Actor } from '../common/actor.ts';
import { BadRequestError, ConflictError, NotFoundError } from '../common/errors.ts';
import { iso, isoOrNull, isUuid } from '../common/schemas.ts';
import type { IProject, ProjectPolicies } from '../project/project.entity.ts';
import { policiesOf } from '../project/project.service.ts';
import { sshHostName } from '../ssh/ssh-session.ts';
import type { DeploymentEvents } from './deployment-events.ts';
import type { FinishedLogs } from './finished-logs.ts';
import type { JobService } from './job.service.ts';
import { Deployment, type DeploymentStatus, type IDeployment, type Trigger } from './deployment.entity.ts';

export interface TriggerInput {
  project: IProject;
  trigger: Trigger;
  actor: Actor;
  commit?: string | null;
  branch?: string | null;
  /** Set by the webhook path: the id the deployment must have (recorded on the delivery first). */
  id?: string;
  /** Redeploys run the commands of the deployment they repeat. */
  commands?: string[];
  /** A rollback switches back to the release of this deployment instead of building. */
  rollbackTo?: { id: string; releases: ProjectPolicies['releases'] };
}

export interface Triggered {
  deployment: DeploymentJson;
  /** Deployments of the project this one superseded (cancelled, or asked to cancel). */
  superseded: string[];
}

export interface DeploymentJson {
  id: string;
  proj_id: string;
  started_at: string;
  finished_at: string | null;
  status: DeploymentStatus;
  commit: string | null;
  branch: string;
  trigger: Trigger;
  triggered_by: string;
  reason: string | null;
  hosts: string[];
}

export interface LogEntryJson {
  id: string;
  deploy_id: string;
  host: string;
  cmd: string;
  log: string;
  success: boolean;
  status: string;
  exit_code: number | null;
  started_at: string;
  finished_at: string | null;
}

export interface DeploymentDetail {
  deployment: DeploymentJson;
  logs: LogEntryJson[];
  project: { id: string; name: string; forge_url: string; branch_name: string };
}

export interface ListFilter {
  projectId?: string;
  status?: DeploymentStatus;
  limit: number;
  before?: string;
}

const COMMIT = /^[0-9a-f]{7,64}$/i;
const FINAL_STATUSES: ReadonlySet<DeploymentStatus> = new Set([
  'success',
  'failed',
  'cancelled',
  'timed_out',
]);

export class DeploymentService {
  readonly #orm: MikroORM;
  readonly #agents: AgentService;
  readonly #events: DeploymentEvents;
  readonly #queued: () => void;
  readonly #jobs: JobService;
  readonly #finishedLogs: FinishedLogs;

  /** `queued` is called after a deployment is stored (it wakes the scheduler). */
  constructor(
    orm: MikroORM,
    agents: AgentService,
    events: DeploymentEvents,
    jobs: JobService,
    queued: () => void,
    finishedLogs: FinishedLogs,
  ) {
    this.#orm = orm;
    this.#finishedLogs = finishedLogs;
    this.#agents = agents;
    this.#events = events;
    this.#jobs = jobs;
    this.#queued = queued;
  }

  toJson(d: IDeployment): DeploymentJson {
    return {
      id: d.id,
      proj_id: typeof d.project === 'string' ? d.project : d.project.id,
      started_at: iso(d.startedAt),
      finished_at: isoOrNull(d.finishedAt),
      status: d.status,
      commit: d.commit ?? null,
      branch: d.branch,
      trigger: d.trigger,
      triggered_by: d.triggeredBy,
      reason: d.reason ?? null,
      hosts: d.hosts,
    };
  }

  /** Stores a queued deployment; nothing runs inside the caller's request. */
  async trigger(input: TriggerInput): Promise<DeploymentJson> {
    const triggered = await this.#orm.em.fork().transactional((em) => this.triggerIn(em, input));
    this.queued(triggered);
    return triggered.deployment;
  }

  /**
   * After the transaction that stored a deployment committed: viewers, the scheduler and (for
   * what it superseded) the agents learn of it.
   */
  queued(triggered: Triggered): void {
    for (const id of [triggered.deployment.id, ...triggered.superseded]) this.#events.changed(id);
    if (triggered.superseded.length) this.#jobs.onCancelRequested();
    this.#queued();
  }

  /** The same, inside a transaction the caller owns (the webhook records its delivery with it). */
  async triggerIn(em: EntityManager, input: TriggerInput): Promise<Triggered> {
    const { project } = input;
    const commit = input.commit ?? null;
    if (commit !== null && !COMMIT.test(commit))
      throw new BadRequestError('commit must be a hexadecimal git sha');
    // On the caller's transaction: a second connection per trigger would deadlock the pool when
    // as many triggers as it has connections arrive at once.
    const { hosts, reason } = await this.#waitingFor(project, em);
    const policies = policiesOf(project);
    if (input.rollbackTo) policies.releases = input.rollbackTo.releases;
    const deployment = em.create(Deployment, {
      ...(input.id ? { id: input.id } : {}),
      project: project.id,
      status: 'queued',
      reason,
      commit: commit?.toLowerCase() ?? null,
      branch: input.branch ?? project.branchName,
      trigger: input.trigger,
      triggeredBy: input.actor.name,
      triggeredByUserId: input.actor.userId,
      snapshot: {
        projectName: project.name,
        forgeUrl: project.forgeUrl,
        commands: input.commands ?? project.commands,
        env: project.env,
        target: project.target,
        secretsEncrypted: project.secretsEncrypted ?? null,
        policies,
      },
      hosts,
      kind: input.rollbackTo ? 'rollback' : 'deploy',
      rollbackTo: input.rollbackTo?.id ?? null,
    });
    const superseded =
      policies.concurrency === 'supersede'
        ? await this.#supersede(em, project.id, deployment.id, policies)
        : [];
    recordAudit(
      em,
      input.actor,
      'deployment.trigger',
      { type: 'deployment', id: deployment.id },
      {
        project: project.id,
        trigger: input.trigger,
        commit: deployment.commit,
        branch: deployment.branch,
      },
    );
    await em.flush();
    return { deployment: this.toJson(deployment), superseded };
  }

  /** Newer wins: older queued deployments of the project are cancelled, and the running one if the project says so. */
  async #supersede(
    em: EntityManager,
    projectId: string,
    newId: string,
    policies: ProjectPolicies,
  ): Promise<string[]> {
    const reason = `Superseded by a newer deployment (${newId})`;
    const cancelled = await em.execute<Array<{ id: string }>>(
      `update deployments set status = 'cancelled', reason = ?, finished_at = now()
        where project_id = ? and status = 'queued' and id <> ? returning id`,
      [reason, projectId, newId],
    );
    const touched = cancelled.map((r) => r.id);
    if (policies.supersede_running) {
      const running = await em.execute<Array<{ id: string }>>(
        `select id from deployments where project_id = ? and status = 'running' and cancel_requested_at is null`,
        [projectId],
      );
      for (const { id } of running) {
        await this.#jobs.requestCancelIn(em, id, 'cancelled', reason);
        touched.push(id);
      }
    }
    return touched;
  }

  /** Cancels a deployment: a queued one at once; a running one once its agents confirm. */
  async cancel(id: string, actor: Actor): Promise<DeploymentJson> {
    const em = this.#orm.em.fork();
    const d = isUuid(id) ? await em.findOne(Deployment, { id }) : null;
    if (!d) throw new NotFoundError('Deployment not found');
    if (FINAL_STATUSES.has(d.status)) throw new ConflictError(`The deployment already ended (${d.status})`);
    const reason = `Cancelled by ${actor.name}`;
    await em.transactional(async (tx) => {
      await this.#jobs.requestCancelIn(tx, d.id, 'cancelled', reason);
      recordAudit(tx, actor, 'deployment.cancel', { type: 'deployment', id: d.id }, null, d.project.id);
    });
    await this.#jobs.afterCancelRequested(d.id);
    return this.toJson(await this.#orm.em.fork().findOneOrFail(Deployment, { id: d.id }));
  }

  /** Runs the same commit and commands again, as a new deployment. */
  async redeploy(id: string, actor: Actor): Promise<DeploymentJson> {
    const { old, project } = await this.#previous(id);
    return this.trigger({
      project,
      trigger: 'redeploy',
      actor,
      commit: old.commit ?? null,
      branch: old.branch,
      commands: old.snapshot.commands,
    });
  }

  /** Switches `current` back to the release this (successful) deployment built, as a new deployment. */
  async rollback(id: string, actor: Actor): Promise<DeploymentJson> {
    const { old, project } = await this.#previous(id);
    const releases = old.snapshot.policies?.releases ?? null;
    if (!releases)
      throw new ConflictError('Rollback needs releases: that deployment was not built as a release');
    if (old.status !== 'success' || old.kind !== 'deploy') {
      throw new ConflictError('Only a successful deployment that built a release can be rolled back to');
    }
    return this.trigger({
      project,
      trigger: 'rollback',
      actor,
      commit: old.commit ?? null,
      branch: old.branch,
      rollbackTo: { id: old.id, releases },
    });
  }

  async #previous(id: string): Promise<{ old: IDeployment; project: IProject }> {
    const em = this.#orm.em.fork();
    const old = isUuid(id) ? await em.findOne(Deployment, { id }, { populate: ['project'] }) : null;
    if (!old) throw new NotFoundError('Deployment not found');
    return { old, project: old.project as unknown as IProject };
  }

  async get(id: string): Promise<DeploymentDetail> {
    const { deployment, project } = await this.#detailRow(id);
    return { deployment, logs: await this.#logs(deployment.id), project };
  }

  /**
   * The same answer as `get`, as the JSON text of `{success, deployment, logs, project}`. A
   * finished deployment's logs are read once and then kept (`FinishedLogs`); its own row and its
   * project's are read every time, so a deployment that is gone, or a project renamed, shows.
   */
  async getJson(id: string): Promise<string> {
    const { deployment, project } = await this.#detailRow(id);
    const finished = deployment.finished_at !== null;
    let logs = finished ? this.#finishedLogs.get(deployment.id) : undefined;
    if (logs === undefined) {
      const entries = await this.#logs(deployment.id);
      logs = JSON.stringify(entries);
      if (finished && entries.every((e) => e.finished_at !== null))
        this.#finishedLogs.set(deployment.id, logs);
    }
    return `{"success":true,"deployment":${JSON.stringify(deployment)},"logs":${logs},"project":${JSON.stringify(project)}}`;
  }

  async #detailRow(id: string): Promise<Omit<DeploymentDetail, 'logs'>> {
    // Plain rows, not entities: this is the most read answer (pages, CLI, pipelines polling), and
    // hydrating a deployment and its project (snapshot, encrypted secrets) cost more than the SQL.
    const [d] = isUuid(id)
      ? await this.#orm.em.fork().execute<
          Array<{
            id: string;
            project_id: string;
            started_at: Date | string;
            finished_at: Date | string | null;
            status: DeploymentStatus;
            commit: string | null;
            branch: string;
            trigger: Trigger;
            triggered_by: string;
            reason: string | null;
            hosts: string[];
            project_name: string;
            forge_url: string;
            branch_name: string;
          }>
        >(
          `select d.id, d.project_id, d.started_at, d.finished_at, d.status, d.commit, d.branch, d.trigger,
                  d.triggered_by, d.reason, d.hosts,
                  p.name as project_name, p.forge_url, p.branch_name
             from deployments d join projects p on p.id = d.project_id
            where d.id = ?`,
          [id],
        )
      : [];
    if (!d) throw new NotFoundError('Deployment not found');
    return {
      deployment: {
        id: d.id,
        proj_id: d.project_id,
        started_at: iso(new Date(d.started_at)),
        finished_at: isoOrNull(d.finished_at === null ? null : new Date(d.finished_at)),
        status: d.status,
        commit: d.commit,
        branch: d.branch,
        trigger: d.trigger,
        triggered_by: d.triggered_by,
        reason: d.reason,
        hosts: d.hosts,
      },
      project: {
        id: d.project_id,
        name: d.project_name,
        forge_url: d.forge_url,
        branch_name: d.branch_name,
      },
    };
  }

  async #logs(deploymentId: string): Promise<LogEntryJson[]> {
    const rows = await this.#orm.em.fork().execute<
      Array<{
        id: string;
        host: string;
        cmd: string;
        status: string;
        success: boolean;
        exit_code: number | null;
        started_at: Date | string;
        finished_at: Date | string | null;
        output: Buffer | null;
      }>
    >(
      `select e.id, e.host, e.cmd, e.status, e.success, e.exit_code, e.started_at, e.finished_at,
              coalesce(e.output, (select string_agg(c.data, ''::bytea order by c."offset")
                                    from log_chunks c where c.log_entry_id = e.id)) as output
         from log_entries e
        where e.deployment_id = ?
        order by e.started_at, e.seq, e.host`,
      [deploymentId],
    );
    return rows.map((r) => ({
      id: r.id,
      deploy_id: deploymentId,
      host: r.host,
      cmd: r.cmd,
      // Output is stored as bytes; invalid UTF-8 sequences become U+FFFD here.
      log: r.output ? r.output.toString('utf8') : '',
      success: r.success,
      status: r.status,
      exit_code: r.exit_code,
      // Raw queries return timestamptz as text.
      started_at: iso(new Date(r.started_at)),
      finished_at: isoOrNull(r.finished_at === null ? null : new Date(r.finished_at)),
    }));
  }

  async list(filter: ListFilter): Promise<DeploymentJson[]> {
    const em = this.#orm.em.fork();
    const where: Record<string, unknown> = {};
    if (filter.projectId) where.project = filter.projectId;
    if (filter.status) where.status = filter.status;
    if (filter.before) {
      const cursor = isUuid(filter.before) ? await em.findOne(Deployment, { id: filter.before }) : null;
      const at = cursor ? cursor.startedAt : new Date(filter.before);
      if (Number.isNaN(at.getTime()))
        throw new BadRequestError('before must be a deployment id or an ISO timestamp');
      where.$or = cursor
        ? [{ startedAt: { $lt: at } }, { startedAt: at, id: { $lt: cursor.id } }]
        : [{ startedAt: { $lt: at } }];
    }
    const rows = await em.find(Deployment, where, {
      orderBy: { startedAt: 'desc', id: 'desc' },
      limit: filter.limit,
    });
    return rows.map((d) => this.toJson(d));
  }

  /**
   * Whether a deployment's page offers Roll back to it, by the project page's rule: a successful
   * build among the releases its hosts still keep (`keptReleases`), and not the live one already.
   */
  async rollbackOffered(deployment: DeploymentJson): Promise<boolean> {
    if (deployment.status !== 'success') return false;
    const [project] = await this.#orm.em
      .fork()
      .execute<Array<{ policies: ProjectPolicies | null }>>('select policies from projects where id = ?', [
        deployment.proj_id,
      ]);
    const releases = project ? policiesOf(project).releases : null;
    if (!releases) return false;
    const { live, kept } = await this.keptReleases(deployment.proj_id, releases.keep);
    return deployment.id !== live && kept.some((k) => k.id === deployment.id);
  }

  /**
   * The releases a project's hosts most likely still keep, to roll back to: the coordinator does
   * not see the hosts' release folders, so this follows their pruning rule (the newest `keep`
   * builds, failed ones included) over the deployments that built a release, counting every one
   * that may have started building (so it errs towards leaving a kept release out, never listing
   * a pruned one). `live` is the deployment whose release `current` points at after the newest
   * successful deployment (a rollback's target, or that deployment itself).
   */
  async keptReleases(
    projectId: string,
    keep: number,
  ): Promise<{ live: string | null; kept: DeploymentJson[] }> {
    const em = this.#orm.em.fork();
    // Only what the rule needs (snapshots are large); the kept ones are then read whole.
    const rows = await em.execute<
      Array<{ id: string; status: string; kind: string; rollback_to: string | null; releases: boolean }>
    >(
      `select id, status, kind, rollback_to,
              coalesce(jsonb_typeof(snapshot->'policies'->'releases') = 'object', false) as releases
         from deployments where project_id = ? and status <> 'queued'
        order by started_at desc, id desc limit 500`,
      [projectId],
    );
    const built = rows.filter((d) => d.kind === 'deploy' && d.releases);
    const lastGood = rows.find((d) => d.status === 'success' && d.releases);
    const live = lastGood ? (lastGood.kind === 'rollback' ? lastGood.rollback_to : lastGood.id) : null;
    const ids = built
      .slice(0, keep)
      .filter((d) => d.status === 'success')
      .map((d) => d.id);
    const kept = ids.length
      ? await em.find(Deployment, { id: { $in: ids } }, { orderBy: { startedAt: 'desc', id: 'desc' } })
      : [];
    return { live, kept: kept.map((d) => this.toJson(d)) };
  }

  /** The hosts a deployment of this project will run on, and why it waits for them now. */
  async #waitingFor(project: IProject, em: EntityManager): Promise<{ hosts: string[]; reason: string }> {
    const target = project.target;
    if ('ssh' in target) {
      const host = sshHostName(target.ssh);
      return { hosts: [host], reason: `Waiting to be scheduled on ${host} (over SSH)` };
    }
    const agents = await this.#agents.matching(target.agents, em);
    if (agents.length === 0) {
      const what =
        'labels' in target.agents
          ? `with the labels ${target.agents.labels.join(', ')}`
          : `named ${target.agents.names.join(', ')}`;
      return { hosts: [], reason: `Waiting for an agent ${what}: none is registered` };
    }
    const offline = agents.filter((a) => !this.#agents.isOnline(a)).map((a) => a.name);
    const names = agents.map((a) => a.name);
    return {
      hosts: names,
      reason: offline.length
        ? `Waiting for ${offline.length === 1 ? 'agent' : 'agents'} ${offline.join(', ')} (offline)`
        : `Waiting to be scheduled on ${names.join(', ')}`,
    };
  }
}
