// Sending jobs: claims the pending jobs of the agents a hub holds (marking them sent, their lease
// started) and builds each `job.assign` from the deployment's snapshot — environment and secrets,
// the deploy key for ssh remotes, timeouts, releases, and the values to mask. Jobs on SSH targets
// (no agent) are claimed the same way by the SSH runner of any coordinator process.
import { type JobAssign, maskedValues } from '@deckhand/protocol';
import type { EntityManager, MikroORM } from '@mikro-orm/postgresql';
import type { SecretBox } from '../common/crypto.ts';
import type { SshTarget } from '../project/project.entity.ts';
import type { ProjectService } from '../project/project.service.ts';
import { DEPLOYMENT_COLUMNS, type DeploymentRow } from './job-plan.ts';
import { uuidArray } from './job-plan.ts';

export interface JobDispatchOptions {
  orm: MikroORM;
  box: SecretBox;
  projects: ProjectService;
  leaseMs: number;
}

export class JobDispatch {
  readonly #o: JobDispatchOptions;

  constructor(options: JobDispatchOptions) {
    this.#o = options;
  }

  /** Claims the pending jobs of these agents (marking them sent, lease started) and builds their assignments. */
  async claimPending(agentIds: string[]): Promise<Array<{ agentId: string; assign: JobAssign }>> {
    if (agentIds.length === 0) return [];
    return this.#o.orm.em.fork().transactional(async (em) => {
      const jobs = await em.execute<Array<{ id: string; deployment_id: string; agent_id: string }>>(
        `update deployment_jobs set status = 'sent', sent_at = now(),
                lease_expires_at = now() + ? * interval '1 millisecond'
          where id in (select id from deployment_jobs
                        where status = 'pending' and agent_id = any(?::uuid[])
                        order by created_at for update skip locked)
          returning id, deployment_id, agent_id`,
        [this.#o.leaseMs, uuidArray(agentIds)],
      );
      const result: Array<{ agentId: string; assign: JobAssign }> = [];
      for (const job of jobs) {
        const [d] = await em.execute<DeploymentRow[]>(
          `select ${DEPLOYMENT_COLUMNS} from deployments where id = ?`,
          [job.deployment_id],
        );
        if (d) result.push({ agentId: job.agent_id, assign: await this.#assignment(job.id, d, em) });
      }
      return result;
    });
  }

  /**
   * Claims pending jobs of deployments to SSH targets (they have no agent), marking them sent with
   * their lease started, and builds their assignments as an agent would receive them.
   */
  async claimPendingSsh(limit = 20): Promise<Array<{ assign: JobAssign; ssh: SshTarget['ssh'] }>> {
    return this.#o.orm.em.fork().transactional(async (em) => {
      const jobs = await em.execute<Array<{ id: string; deployment_id: string }>>(
        `update deployment_jobs set status = 'sent', sent_at = now(),
                lease_expires_at = now() + ? * interval '1 millisecond'
          where id in (select j.id from deployment_jobs j join deployments d on d.id = j.deployment_id
                        where j.status = 'pending' and j.agent_id is null
                          and d.snapshot->'target'->'ssh' is not null
                        order by j.created_at limit ? for update of j skip locked)
          returning id, deployment_id`,
        [this.#o.leaseMs, limit],
      );
      const result: Array<{ assign: JobAssign; ssh: SshTarget['ssh'] }> = [];
      for (const job of jobs) {
        const [d] = await em.execute<DeploymentRow[]>(
          `select ${DEPLOYMENT_COLUMNS} from deployments where id = ?`,
          [job.deployment_id],
        );
        const target = d?.snapshot.target;
        if (d && target && 'ssh' in target) {
          result.push({ assign: await this.#assignment(job.id, d, em), ssh: target.ssh });
        }
      }
      return result;
    });
  }

  /** Built inside the claiming transaction, on its connection. */
  async #assignment(jobId: string, d: DeploymentRow, em: EntityManager): Promise<JobAssign> {
    const s = d.snapshot;
    const secrets: Record<string, string> = s.secretsEncrypted
      ? this.#o.box.decryptJson(s.secretsEncrypted)
      : {};
    const env = { ...s.env, ...secrets };
    const project = await this.#o.projects.find(d.project_id, em);
    const useKey = project?.checkoutCredentials !== 'host' && isSshRemote(s.forgeUrl);
    const policies = s.policies;
    const commandSeconds = policies?.timeouts.command_seconds ?? null;
    return {
      type: 'job.assign',
      jobId,
      deploymentId: d.id,
      project: { id: d.project_id, name: s.projectName },
      repository: {
        url: s.forgeUrl,
        branch: d.branch,
        commit: d.commit,
        sshKey: useKey && project ? await this.#o.projects.deployKey(project, em) : null,
        knownHosts: project?.forgeKnownHosts ?? null,
      },
      commands: s.commands,
      env,
      kind: d.kind,
      rollbackTo: d.rollback_to,
      releases: policies?.releases
        ? { keep: policies.releases.keep, healthCheck: policies.releases.health_check }
        : null,
      commandTimeoutMs: commandSeconds === null ? null : commandSeconds * 1000,
      masks: maskedValues(env, Object.keys(secrets)),
    };
  }
}

/** ssh://… or scp-like user@host:path remotes use a key; https, file and local paths do not. */
export function isSshRemote(url: string): boolean {
  return url.startsWith('ssh://') || /^[A-Za-z0-9._-]+@[^:/]+:/.test(url);
}
