// What agents report about their jobs, turned into stored state: log entries per step, output
// chunks stored once by byte offset (and acknowledged), entries completed and compacted, jobs and
// then deployments finished. Every method checks that the job belongs to the reporting agent and
// is not finished: an agent writes only to the jobs it was given. Also builds `job.assign` for
// pending jobs (the hub sends them) and reconciles an agent's jobs when it reconnects.
import type { EntityManager, MikroORM } from '@mikro-orm/postgresql';
import { type JobAssign, planSteps } from '@deckhand/protocol';
import type { SecretBox } from '../common/crypto.ts';
import type { ProjectService } from '../project/project.service.ts';
import type { DeploymentSnapshot, DeploymentStatus, JobStatus } from './deployment.entity.ts';
import type { DeploymentEvents } from './deployment-events.ts';

/** A message that breaks the rules of the protocol (a job not given to this agent, steps out of order). */
export class ProtocolViolation extends Error {}

/**
 * A message about a job that has already ended (e.g. it was given up as lost, then the agent's
 * outbox delivered its real end). It changes nothing; it is not worth closing the connection.
 */
export class LateMessage extends Error {}

interface JobRow {
  id: string;
  deployment_id: string;
  agent_id: string | null;
  host: string;
  status: JobStatus;
}

interface EntryState {
  id: string;
  /** Bytes stored contiguously from 0. */
  stored: number;
  finished: boolean;
}

const FINAL_JOB: ReadonlySet<JobStatus> = new Set([
  'success',
  'failed',
  'cancelled',
  'timed_out',
  'abandoned',
]);

export class JobService {
  readonly #orm: MikroORM;
  readonly #events: DeploymentEvents;
  readonly #box: SecretBox;
  readonly #projects: ProjectService;
  /** Called when a deployment ends, so the scheduler can start the next one of its project. */
  onDeploymentFinished: (deploymentId: string) => void = () => {};
  // Per (job, step): where its entry is and how much of its output is stored. Rebuilt from the
  // database on first use, so any coordinator process can take over an agent's connection.
  readonly #entries = new Map<string, EntryState>();

  constructor(orm: MikroORM, events: DeploymentEvents, box: SecretBox, projects: ProjectService) {
    this.#orm = orm;
    this.#events = events;
    this.#box = box;
    this.#projects = projects;
  }

  #em(): EntityManager {
    return this.#orm.em.fork();
  }

  /** The job, if it was given to this agent; a finished one only when `finishedOk` (re-sent output). */
  async #job(agentId: string, jobId: string, em = this.#em(), finishedOk = false): Promise<JobRow> {
    const rows = await em.execute<JobRow[]>(
      'select id, deployment_id, agent_id, host, status from deployment_jobs where id = ?',
      [jobId],
    );
    const job = rows[0];
    if (!job || job.agent_id !== agentId)
      throw new ProtocolViolation(`job ${jobId} was not given to this agent`);
    if (FINAL_JOB.has(job.status) && !finishedOk) {
      throw new LateMessage(`job ${jobId} is already ${job.status}`);
    }
    return job;
  }

  /** Claims the pending jobs of these agents (marking them sent) and builds their assignments. */
  async claimPending(agentIds: string[]): Promise<Array<{ agentId: string; assign: JobAssign }>> {
    if (agentIds.length === 0) return [];
    const claimed = await this.#em().transactional(async (em) => {
      const jobs = await em.execute<Array<{ id: string; deployment_id: string; agent_id: string }>>(
        `update deployment_jobs set status = 'sent', sent_at = now()
          where id in (select id from deployment_jobs
                        where status = 'pending' and agent_id = any(?::uuid[])
                        order by created_at for update skip locked)
          returning id, deployment_id, agent_id`,
        [uuidArray(agentIds)],
      );
      const result: Array<{ agentId: string; assign: JobAssign }> = [];
      for (const job of jobs) {
        const [d] = await em.execute<
          Array<{
            id: string;
            project_id: string;
            commit: string;
            branch: string;
            snapshot: DeploymentSnapshot;
          }>
        >('select id, project_id, commit, branch, snapshot from deployments where id = ?', [
          job.deployment_id,
        ]);
        if (!d) continue;
        result.push({ agentId: job.agent_id, assign: await this.#assignment(job.id, d) });
      }
      return result;
    });
    return claimed;
  }

  async #assignment(
    jobId: string,
    d: { id: string; project_id: string; commit: string; branch: string; snapshot: DeploymentSnapshot },
  ): Promise<JobAssign> {
    const s = d.snapshot;
    const secrets: Record<string, string> = s.secretsEncrypted
      ? this.#box.decryptJson(s.secretsEncrypted)
      : {};
    const project = await this.#projects.find(d.project_id);
    const useKey = project?.checkoutCredentials !== 'host' && isSshRemote(s.forgeUrl);
    return {
      type: 'job.assign',
      jobId,
      deploymentId: d.id,
      project: { id: d.project_id, name: s.projectName },
      repository: {
        url: s.forgeUrl,
        branch: d.branch,
        commit: d.commit,
        sshKey: useKey && project ? await this.#projects.deployKey(project) : null,
        knownHosts: project?.forgeKnownHosts ?? null,
      },
      commands: s.commands,
      env: { ...s.env, ...secrets },
    };
  }

  /**
   * An agent said hello: jobs sent to it that it does not report as running go back to pending
   * (they will be sent again); jobs it was running and no longer has are lost with their host.
   */
  async agentReconnected(agentId: string, runningJobIds: string[]): Promise<void> {
    const em = this.#em();
    await em.execute(
      `update deployment_jobs set status = 'pending', sent_at = null
        where agent_id = ? and status = 'sent' and not (id = any(?::uuid[]))`,
      [agentId, uuidArray(runningJobIds)],
    );
    const lost = await em.execute<Array<{ id: string }>>(
      `select id from deployment_jobs where agent_id = ? and status = 'running' and not (id = any(?::uuid[]))`,
      [agentId, uuidArray(runningJobIds)],
    );
    for (const job of lost) {
      await this.jobFinished(
        agentId,
        job.id,
        'failed',
        'the agent restarted while running it; the job was lost',
      );
    }
  }

  async accepted(agentId: string, jobId: string): Promise<void> {
    const job = await this.#job(agentId, jobId);
    const em = this.#em();
    await em.execute(
      `update deployment_jobs set status = 'running', started_at = coalesce(started_at, now())
        where id = ? and status in ('sent', 'running')`,
      [job.id],
    );
  }

  async stepStarted(agentId: string, jobId: string, step: number, cmd: string): Promise<void> {
    const job = await this.#job(agentId, jobId);
    if (job.status !== 'running')
      throw new ProtocolViolation(`step.started for job ${jobId} before job.accepted`);
    const em = this.#em();
    // Idempotent: an agent re-sending step.started after a reconnect changes nothing.
    await em.execute(
      `insert into log_entries (id, created_at, deployment_id, seq, host, cmd, status, success, output_bytes, started_at)
       values (gen_random_uuid(), now(), ?, ?, ?, ?, 'running', false, 0, clock_timestamp())
       on conflict (deployment_id, host, seq) do nothing`,
      [job.deployment_id, step, job.host, cmd],
    );
    this.#events.changed(job.deployment_id);
  }

  async #entry(job: JobRow, step: number, em: EntityManager): Promise<EntryState> {
    const key = `${job.id}:${step}`;
    const cached = this.#entries.get(key);
    if (cached) return cached;
    const rows = await em.execute<Array<{ id: string; finished: boolean; stored: string | number }>>(
      `select e.id, e.finished_at is not null as finished,
              case when e.finished_at is not null then e.output_bytes
                   else coalesce((select max(c."offset" + length(c.data))
                                    from log_chunks c where c.log_entry_id = e.id), 0)
              end as stored
         from log_entries e where e.deployment_id = ? and e.host = ? and e.seq = ?`,
      [job.deployment_id, job.host, step],
    );
    const row = rows[0];
    if (!row) throw new ProtocolViolation(`output for step ${step} of job ${job.id} before step.started`);
    const state = { id: row.id, stored: Number(row.stored), finished: row.finished };
    // Only entries still receiving output are kept in memory.
    if (!state.finished) this.#entries.set(key, state);
    return state;
  }

  /**
   * Stores a chunk of output at its byte offset and returns the offset up to which everything is
   * stored (the acknowledgement). Bytes already stored are dropped; a chunk past a gap is not
   * stored, so the agent re-sends from the acknowledged offset. Output re-sent after a reconnect
   * for a step that already ended is acknowledged and dropped: its entry is complete.
   */
  async output(agentId: string, jobId: string, step: number, offset: number, data: Buffer): Promise<number> {
    const em = this.#em();
    const job = await this.#job(agentId, jobId, em, true);
    const entry = await this.#entry(job, step, em);
    const end = offset + data.length;
    if (entry.finished) return Math.max(entry.stored, end);
    if (offset > entry.stored || end <= entry.stored) return entry.stored;
    const fresh = data.subarray(entry.stored - offset);
    await em.execute(
      `insert into log_chunks (log_entry_id, "offset", data, created_at) values (?, ?, ?, now())
       on conflict (log_entry_id, "offset") do nothing`,
      [entry.id, entry.stored, fresh],
    );
    entry.stored = end;
    this.#events.changed(job.deployment_id);
    return entry.stored;
  }

  async stepFinished(
    agentId: string,
    jobId: string,
    step: number,
    result: { exitCode: number | null; signal: string | null; outputBytes: number; error?: string },
  ): Promise<void> {
    const em = this.#em();
    const job = await this.#job(agentId, jobId, em);
    const entry = await this.#entry(job, step, em);
    if (entry.finished) return;
    const success = result.exitCode === 0 && result.signal === null && !result.error;
    const status = success ? 'success' : 'failed';
    await this.#completeEntry(em, entry.id, status, result.exitCode, result.signal, result.error);
    entry.finished = true;
    this.#entries.delete(`${job.id}:${step}`);
    this.#events.changed(job.deployment_id);
  }

  /** Ends an entry: its chunks become its output (compaction), with a note when it did not end by itself. */
  async #completeEntry(
    em: EntityManager,
    entryId: string,
    status: string,
    exitCode: number | null,
    signal: string | null,
    note?: string,
  ): Promise<void> {
    await em.transactional(async (tx) => {
      const suffix = note ? Buffer.from(`\n[deckhand] ${note}\n`) : Buffer.alloc(0);
      const updated = await tx.execute<Array<{ id: string }>>(
        `update log_entries e
            set output = coalesce((select string_agg(c.data, ''::bytea order by c."offset")
                                     from log_chunks c where c.log_entry_id = e.id), ''::bytea) || ?::bytea,
                status = ?, success = ?, exit_code = ?, signal = ?, finished_at = now()
          where e.id = ? and e.finished_at is null
          returning e.id`,
        [suffix, status, status === 'success', exitCode, signal, entryId],
      );
      if (updated.length === 0) return;
      await tx.execute('update log_entries set output_bytes = length(output) where id = ?', [entryId]);
      await tx.execute('delete from log_chunks where log_entry_id = ?', [entryId]);
    });
  }

  async jobFinished(agentId: string, jobId: string, status: JobStatus, reason?: string): Promise<void> {
    const em = this.#em();
    const job = await this.#job(agentId, jobId, em);
    const [d] = await em.execute<Array<{ snapshot: DeploymentSnapshot; commit: string }>>(
      'select snapshot, commit from deployments where id = ?',
      [job.deployment_id],
    );
    const plan = planSteps({ commit: d!.commit, commands: d!.snapshot.commands });
    const entries = await em.execute<Array<{ id: string; seq: number; finished: boolean }>>(
      `select id, seq, finished_at is not null as finished from log_entries where deployment_id = ? and host = ?`,
      [job.deployment_id, job.host],
    );
    // A step still open when the job ended (cancelled, lost) ends with the job, saying so.
    for (const open of entries.filter((e) => !e.finished)) {
      await this.#completeEntry(
        em,
        open.id,
        status === 'success' ? 'failed' : status,
        null,
        null,
        reason ?? `job ${status}`,
      );
      this.#entries.delete(`${job.id}:${open.seq}`);
    }
    const lastStarted = entries.reduce((max, e) => Math.max(max, e.seq), -1);
    await em.transactional(async (tx) => {
      for (const step of plan.filter((s) => s.index > lastStarted)) {
        await tx.execute(
          `insert into log_entries (id, created_at, deployment_id, seq, host, cmd, status, success, output, output_bytes, started_at, finished_at)
           values (gen_random_uuid(), now(), ?, ?, ?, ?, 'skipped', false, ''::bytea, 0, clock_timestamp(), clock_timestamp())
           on conflict (deployment_id, host, seq) do nothing`,
          [job.deployment_id, step.index, job.host, step.cmd],
        );
      }
      await tx.execute(
        `update deployment_jobs set status = ?, reason = ?, finished_at = now() where id = ? and status in ('sent', 'running')`,
        [status, reason ?? null, job.id],
      );
    });
    await this.#finishDeploymentIfDone(job.deployment_id);
    this.#events.changed(job.deployment_id);
  }

  async #finishDeploymentIfDone(deploymentId: string): Promise<void> {
    const em = this.#em();
    const jobs = await em.execute<Array<{ host: string; status: JobStatus; reason: string | null }>>(
      'select host, status, reason from deployment_jobs where deployment_id = ? order by host',
      [deploymentId],
    );
    if (jobs.length === 0 || jobs.some((j) => !FINAL_JOB.has(j.status))) return;
    const [d] = await em.execute<Array<{ commit: string }>>('select commit from deployments where id = ?', [
      deploymentId,
    ]);
    const outcome = deploymentOutcome(jobs, d?.commit ?? '');
    const updated = await em.execute<Array<{ id: string }>>(
      `update deployments set status = ?, reason = ?, finished_at = now() where id = ? and status = 'running' returning id`,
      [outcome.status, outcome.reason, deploymentId],
    );
    if (updated.length) this.onDeploymentFinished(deploymentId);
  }
}

/** The deployment's end from its hosts' jobs: success only when every host succeeded. */
export function deploymentOutcome(
  jobs: Array<{ host: string; status: JobStatus; reason: string | null }>,
  commit: string,
): { status: DeploymentStatus; reason: string } {
  const hosts = jobs.map((j) => j.host).join(', ');
  if (jobs.every((j) => j.status === 'success')) {
    return { status: 'success', reason: `Deployed ${commit.slice(0, 12)} to ${hosts}` };
  }
  const bad = jobs.filter((j) => j.status !== 'success');
  const reason = bad.map((j) => `${j.host}: ${j.reason ?? j.status}`).join('; ');
  const status: DeploymentStatus = bad.some((j) => j.status === 'timed_out')
    ? 'timed_out'
    : bad.every((j) => j.status === 'cancelled')
      ? 'cancelled'
      : 'failed';
  return { status, reason };
}

/** A PostgreSQL array literal of uuids (MikroORM spreads JS arrays into separate parameters). */
function uuidArray(ids: string[]): string {
  if (!ids.every((id) => /^[0-9a-f-]{36}$/i.test(id))) throw new Error('not a uuid list');
  return `{${ids.join(',')}}`;
}

/** ssh://… or scp-like user@host:path remotes use a key; https, file and local paths do not. */
export function isSshRemote(url: string): boolean {
  return url.startsWith('ssh://') || /^[A-Za-z0-9._-]+@[^:/]+:/.test(url);
}
