// Deployments: the one function every trigger calls (manual, API, webhook, redeploy), which
// stores a queued deployment with a snapshot of what will run in a single transaction and
// returns at once; and the reads (detail with logs, listing). Running them is the scheduler's
// job (the agents issue): until then a deployment waits `queued` with a reason naming the
// hosts it waits for.
import type { EntityManager, MikroORM } from '@mikro-orm/postgresql';
import type { AgentService } from '../agent/agent.service.ts';
import { recordAudit } from '../audit/audit.service.ts';
import type { Actor } from '../common/actor.ts';
import { BadRequestError, NotFoundError } from '../common/errors.ts';
import { iso, isoOrNull } from '../common/schemas.ts';
import type { IProject } from '../project/project.entity.ts';
import { isUuid } from '../project/project.service.ts';
import type { DeploymentEvents } from './deployment-events.ts';
import { Deployment, type DeploymentStatus, type IDeployment, type Trigger } from './deployment.entity.ts';

export interface TriggerInput {
  project: IProject;
  trigger: Trigger;
  actor: Actor;
  commit?: string | null;
  branch?: string | null;
  /** Set by the webhook path: the id the deployment must have (recorded on the delivery first). */
  id?: string;
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

export class DeploymentService {
  readonly #orm: MikroORM;
  readonly #agents: AgentService;
  readonly #events: DeploymentEvents;
  readonly #queued: () => void;

  /** `queued` is called after a deployment is stored (it wakes the scheduler). */
  constructor(orm: MikroORM, agents: AgentService, events: DeploymentEvents, queued: () => void) {
    this.#orm = orm;
    this.#agents = agents;
    this.#events = events;
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
    const deployment = await this.#orm.em.fork().transactional((em) => this.triggerIn(em, input));
    this.queued(deployment.id);
    return deployment;
  }

  /** After the transaction that stored a deployment committed: viewers and the scheduler learn of it. */
  queued(deploymentId: string): void {
    this.#events.changed(deploymentId);
    this.#queued();
  }

  /** The same, inside a transaction the caller owns (the webhook records its delivery with it). */
  async triggerIn(em: EntityManager, input: TriggerInput): Promise<DeploymentJson> {
    const { project } = input;
    const commit = input.commit ?? null;
    if (commit !== null && !COMMIT.test(commit))
      throw new BadRequestError('commit must be a hexadecimal git sha');
    const { hosts, reason } = await this.#waitingFor(project);
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
        commands: project.commands,
        env: project.env,
        target: project.target,
        secretsEncrypted: project.secretsEncrypted ?? null,
      },
      hosts,
    });
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
    return this.toJson(deployment);
  }

  async get(id: string): Promise<DeploymentDetail> {
    const em = this.#orm.em.fork();
    const deployment = isUuid(id) ? await em.findOne(Deployment, { id }, { populate: ['project'] }) : null;
    if (!deployment) throw new NotFoundError('Deployment not found');
    const rows = await em.execute<
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
      [deployment.id],
    );
    const project = deployment.project;
    return {
      deployment: this.toJson(deployment),
      logs: rows.map((r) => ({
        id: r.id,
        deploy_id: deployment.id,
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
      })),
      project: {
        id: project.id,
        name: project.name,
        forge_url: project.forgeUrl,
        branch_name: project.branchName,
      },
    };
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

  /** The hosts a deployment of this project will run on, and why it waits for them now. */
  async #waitingFor(project: IProject): Promise<{ hosts: string[]; reason: string }> {
    const target = project.target;
    if ('ssh' in target) {
      const host = `${target.ssh.username}@${target.ssh.host}:${target.ssh.port}`;
      return { hosts: [host], reason: `Waiting for ${host}: SSH targets are not run yet` };
    }
    const agents = await this.#agents.matching(target.agents);
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
