// What agents report about their jobs, turned into stored state: log entries per step, output
// chunks stored once by byte offset (acknowledged, capped per entry; they stay the entry's
// output), entries completed, jobs and then deployments finished. Every method checks that the job belongs to the
// reporting agent: an agent writes only to the jobs it was given, and a job that has ended cannot
// be changed by late messages. Also leases (a job whose agent is silent past its lease is lost)
// and cancellation (asked here, sent by the hub, confirmed by the agent). Sending jobs is
// job-dispatch.ts's.
import { MAX_CHUNK_BYTES } from '@deckhand/protocol';
import type { EntityManager, MikroORM } from '@mikro-orm/postgresql';
import type pg from 'pg';
import type { JobStatus } from './deployment.entity.ts';
import type { DeploymentEvents } from './deployment-events.ts';
import { OutputWriter } from './output-writer.ts';
import { DEPLOYMENT_COLUMNS, type DeploymentRow, deploymentOutcome, planOf, uuidArray } from './job-plan.ts';

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
  /** Bytes stored (at most the output limit). */
  stored: number;
  /** Bytes acknowledged: stored, or dropped past the limit. */
  received: number;
  finished: boolean;
}

export interface JobServiceOptions {
  orm: MikroORM;
  /** A plain `pg` pool for the output hot path: bound (binary) parameters, written by OutputWriter. */
  pool: pg.Pool;
  events: DeploymentEvents;
  leaseMs: number;
  /** How long past the lease an agent keeps a job while cut off (then it abandons it). */
  abandonGraceMs: number;
  outputLimitBytes: number;
}

const FINAL_JOB: ReadonlySet<JobStatus> = new Set([
  'success',
  'failed',
  'cancelled',
  'timed_out',
  'abandoned',
]);

/** A stored row holds at most what one output frame may carry, so readers' rows stay as small. */
const MERGED_ROW_BYTES = MAX_CHUNK_BYTES;

const size = (n: number) =>
  n >= 1024 * 1024
    ? `${Math.round((n / 1024 / 1024) * 10) / 10} MiB`
    : n >= 1024
      ? `${Math.round(n / 1024)} KiB`
      : `${n} bytes`;

/**
 * Who reports on a job: the id of the agent it was given to, or null for a job with no agent (an
 * SSH target's, run and reported by this coordinator). A report is accepted only from the job's own.
 */
export type Reporter = string | null;

export class JobService {
  readonly #o: JobServiceOptions;
  readonly #writer: OutputWriter;
  /** Called when a deployment ends, so the scheduler can start the next one of its project. */
  onDeploymentFinished: (deploymentId: string) => void = () => {};
  /** Called when a cancel was asked for, so the hubs send `job.cancel` to the agents. */
  onCancelRequested: () => void = () => {};
  /** Bytes of output stored (for the metrics). */
  onOutputStored: (bytes: number) => void = () => {};
  // Per (job, step) still receiving output: where its entry is and how far its output got.
  // Rebuilt from the database on first use, so any coordinator process can take over an agent.
  readonly #entries = new Map<string, EntryState>();
  /** Jobs receiving output, by id (ownership does not change while a job runs). */
  readonly #jobs = new Map<string, JobRow>();

  constructor(options: JobServiceOptions) {
    this.#o = options;
    this.#writer = new OutputWriter(options.pool, options.pool.options.max ?? 1);
  }

  #em(): EntityManager {
    return this.#o.orm.em.fork();
  }

  /** The job, if it was given to this agent; an ended one only when `endedOk` (re-sent output). */
  async #job(agentId: Reporter, jobId: string, em = this.#em(), endedOk = false): Promise<JobRow> {
    const [job] = await em.execute<JobRow[]>(
      'select id, deployment_id, agent_id, host, status from deployment_jobs where id = ?',
      [jobId],
    );
    if (!job || job.agent_id !== agentId)
      throw new ProtocolViolation(`job ${jobId} was not given to this agent`);
    if (FINAL_JOB.has(job.status) && !endedOk) throw new LateMessage(`job ${jobId} is already ${job.status}`);
    return job;
  }

  /**
   * An agent said hello, listing the jobs it still holds: jobs sent to it that it does not have
   * go back to pending (sent again); jobs it was running and no longer has are lost with it.
   * Cancels it may have missed are sent again.
   */
  async agentReconnected(agentId: string, heldJobIds: string[]): Promise<string[]> {
    // What this process remembers of the agent's output may be stale: meanwhile it may have
    // streamed through another replica. Read it from the database again.
    for (const [jobId, job] of this.#jobs) {
      if (job.agent_id !== agentId) continue;
      this.#jobs.delete(jobId);
      for (const key of this.#entries.keys()) if (key.startsWith(`${jobId}:`)) this.#entries.delete(key);
    }
    const em = this.#em();
    const held = uuidArray(heldJobIds);
    await em.execute(
      `update deployment_jobs set status = 'pending', sent_at = null
        where agent_id = ? and status = 'sent' and not (id = any(?::uuid[]))`,
      [agentId, held],
    );
    await em.execute(
      `update deployment_jobs set cancel_sent_at = null where agent_id = ? and status in ('sent', 'running')`,
      [agentId],
    );
    const lost = await em.execute<JobRow[]>(
      `select id, deployment_id, agent_id, host, status from deployment_jobs
        where agent_id = ? and status = 'running' and not (id = any(?::uuid[]))`,
      [agentId, held],
    );
    for (const job of lost)
      await this.#endJob(job, 'failed', 'the agent restarted while running it; the job was lost');
    // Jobs the agent still runs that have ended here (given up as lost while it was cut off, or
    // never its own): they must stop on the host too.
    if (heldJobIds.length === 0) return [];
    const live = await em.execute<Array<{ id: string }>>(
      `select id from deployment_jobs
        where id = any(?::uuid[]) and agent_id = ? and status in ('pending', 'sent', 'running')`,
      [held, agentId],
    );
    const liveIds = new Set(live.map((j) => j.id));
    return heldJobIds.filter((id) => !liveIds.has(id));
  }

  // --- leases -------------------------------------------------------------------------------

  /** The agents were heard from: their in-flight jobs are theirs for another lease. */
  async renewLeases(agentIds: string[]): Promise<void> {
    if (agentIds.length === 0) return;
    await this.#em().execute(
      `update deployment_jobs set lease_expires_at = now() + ? * interval '1 millisecond'
        where agent_id = any(?::uuid[]) and status in ('pending', 'sent', 'running')`,
      [this.#o.leaseMs, uuidArray(agentIds)],
    );
  }

  /**
   * Jobs whose agent has been silent past the lease end `failed`: agent lost. An SSH job (no
   * agent) whose lease ran out lost the coordinator process that ran it.
   */
  async expireLeases(): Promise<number> {
    // Not while its agent is connected and heard from (its renewal may simply not have run yet,
    // e.g. just after it reconnected): lost means gone.
    const expired = await this.#em().execute<JobRow[]>(
      `select j.id, j.deployment_id, j.agent_id, j.host, j.status from deployment_jobs j
        where j.status in ('pending', 'sent', 'running') and j.lease_expires_at < now()
          and not exists (select 1 from agents a
                           where a.id = j.agent_id and a.connected_to is not null
                             and a.last_seen_at > now() - ? * interval '1 millisecond')`,
      [this.#o.leaseMs],
    );
    for (const job of expired) {
      await this.#endJob(job, 'failed', job.agent_id === null ? 'coordinator lost (SSH)' : 'agent lost');
    }
    return expired.length;
  }

  /**
   * At start-up, and when the database is back after an outage (while it was away nobody could
   * renew a lease, and the hub dropped its agents): whatever was in flight gets a fresh lease as
   * long as an agent keeps a job while cut off (lease + abandon grace: its agent needs that long
   * at most to come back, given its reconnect backoff), and its pending cancels are sent again.
   */
  async reconcileInFlight(): Promise<number> {
    const rows = await this.#em().execute<Array<{ id: string }>>(
      `update deployment_jobs
          set lease_expires_at = greatest(lease_expires_at, now() + ? * interval '1 millisecond'),
              cancel_sent_at = null
        where status in ('pending', 'sent', 'running') returning id`,
      [this.#o.leaseMs + this.#o.abandonGraceMs],
    );
    return rows.length;
  }

  // --- cancellation -------------------------------------------------------------------------

  /**
   * Asks for a deployment to end (`cancelled`, or `timed_out` at its deadline), inside the
   * caller's transaction: a queued one ends at once; a running one's unsent jobs are cancelled and
   * its agents are told (the hub sends `job.cancel`); it ends when they confirm.
   */
  async requestCancelIn(
    em: EntityManager,
    deploymentId: string,
    as: 'cancelled' | 'timed_out',
    reason: string,
  ) {
    const [queued] = await em.execute<Array<{ id: string }>>(
      `update deployments set status = ?, reason = ?, finished_at = now(),
              cancel_requested_at = now(), cancel_as = ?, cancel_reason = ?
        where id = ? and status = 'queued' returning id`,
      [as, reason, as, reason, deploymentId],
    );
    if (queued) return;
    await em.execute(
      `update deployments set cancel_requested_at = now(), cancel_as = ?, cancel_reason = ?
        where id = ? and status = 'running' and cancel_requested_at is null`,
      [as, reason, deploymentId],
    );
    await em.execute(
      `update deployment_jobs set status = ?, reason = ?, finished_at = now()
        where deployment_id = ? and status = 'pending'`,
      [as, reason, deploymentId],
    );
  }

  /** After the transaction that asked for a cancel committed. */
  async afterCancelRequested(deploymentId: string): Promise<void> {
    await this.#finishDeploymentIfDone(deploymentId);
    this.#o.events.changed(deploymentId);
    this.onCancelRequested();
  }

  async requestCancel(deploymentId: string, as: 'cancelled' | 'timed_out', reason: string): Promise<void> {
    await this.#em().transactional((em) => this.requestCancelIn(em, deploymentId, as, reason));
    await this.afterCancelRequested(deploymentId);
  }

  /** The cancels to send to these agents now (marked sent). */
  async cancelsToSend(
    agentIds: string[],
  ): Promise<Array<{ agentId: string; jobId: string; as: 'cancelled' | 'timed_out'; reason: string }>> {
    if (agentIds.length === 0) return [];
    const rows = await this.#em().execute<
      Array<{ id: string; agent_id: string; cancel_as: 'cancelled' | 'timed_out'; cancel_reason: string }>
    >(
      `update deployment_jobs j set cancel_sent_at = now()
         from deployments d
        where j.deployment_id = d.id and d.cancel_requested_at is not null and j.cancel_sent_at is null
          and j.status in ('sent', 'running') and j.agent_id = any(?::uuid[])
        returning j.id, j.agent_id, d.cancel_as, d.cancel_reason`,
      [uuidArray(agentIds)],
    );
    return rows.map((r) => ({ agentId: r.agent_id, jobId: r.id, as: r.cancel_as, reason: r.cancel_reason }));
  }

  // --- what agents report -------------------------------------------------------------------

  async accepted(agentId: Reporter, jobId: string): Promise<void> {
    const job = await this.#job(agentId, jobId);
    await this.#em().execute(
      `update deployment_jobs set status = 'running', started_at = coalesce(started_at, now())
        where id = ? and status in ('sent', 'running')`,
      [job.id],
    );
  }

  async stepStarted(agentId: Reporter, jobId: string, step: number, cmd: string): Promise<void> {
    const job = await this.#job(agentId, jobId);
    await this.#openEntry(job, step, cmd, this.#em());
    this.#o.events.changed(job.deployment_id);
  }

  /**
   * Creates a step's entry (idempotent: a re-sent step.started changes nothing). A step can also
   * become known by its output alone — the agent does not re-send `step.started` or
   * `job.accepted` that a dying connection swallowed — so a job still `sent` becomes running.
   */
  async #openEntry(job: JobRow, step: number, cmd: string, em: EntityManager): Promise<void> {
    if (job.status === 'sent') {
      await em.execute(
        `update deployment_jobs set status = 'running', started_at = coalesce(started_at, now()) where id = ? and status = 'sent'`,
        [job.id],
      );
      job.status = 'running';
    }
    await em.execute(
      `insert into log_entries (id, created_at, deployment_id, seq, host, cmd, status, success, output_bytes, started_at)
       values (gen_random_uuid(), now(), ?, ?, ?, ?, 'running', false, 0, clock_timestamp())
       on conflict (deployment_id, host, seq) do nothing`,
      [job.deployment_id, step, job.host, cmd],
    );
  }

  async #entry(job: JobRow, step: number, em: EntityManager): Promise<EntryState> {
    const key = `${job.id}:${step}`;
    const cached = this.#entries.get(key);
    if (cached) return cached;
    const [row] = await em.execute<Array<{ id: string; finished: boolean; stored: string | number }>>(
      `select e.id, e.finished_at is not null as finished,
              case when e.finished_at is not null then e.output_bytes
                   else coalesce((select max(c."offset" + length(c.data))
                                    from log_chunks c where c.log_entry_id = e.id), 0)
              end as stored
         from log_entries e where e.deployment_id = ? and e.host = ? and e.seq = ?`,
      [job.deployment_id, job.host, step],
    );
    if (!row) {
      // Its step.started was lost with a connection: open the entry from the plan, then read it.
      const [d] = await em.execute<DeploymentRow[]>(
        `select ${DEPLOYMENT_COLUMNS} from deployments where id = ?`,
        [job.deployment_id],
      );
      const planned = d ? planOf(d).find((s) => s.index === step) : undefined;
      if (!planned || FINAL_JOB.has(job.status)) {
        throw new ProtocolViolation(`step ${step} of job ${job.id} is not part of its plan`);
      }
      await this.#openEntry(job, step, planned.cmd, em);
      return this.#entry(job, step, em);
    }
    const stored = Number(row.stored);
    const state = { id: row.id, stored, received: stored, finished: row.finished };
    // Only entries still receiving output are kept in memory.
    if (!state.finished) this.#entries.set(key, state);
    return state;
  }

  /**
   * Stores output chunks at their byte offsets — one statement for the lot — and returns, per
   * step, the offset up to which everything is stored (the acknowledgement). Bytes already stored
   * are dropped; a chunk past a gap is not stored, so the agent re-sends from the acknowledged
   * offset; past the output limit bytes are counted, acknowledged and dropped. Output re-sent for
   * a step that already ended is acknowledged and dropped: its entry is complete.
   */
  async outputs(
    agentId: Reporter,
    chunks: Array<{ jobId: string; step: number; offset: number; data: Buffer }>,
  ): Promise<Array<{ jobId: string; step: number; offset: number }>> {
    const em = this.#em();
    // One row per run of contiguous bytes of an entry (up to MERGED_ROW_BYTES), not one per frame:
    // agents send output in small frames, and each row costs PostgreSQL a tuple, an index entry
    // and a foreign-key check.
    const rows: Array<{ entryId: string; offset: number; parts: Buffer[]; bytes: number }> = [];
    const acks = new Map<string, { jobId: string; step: number; offset: number }>();
    const touched = new Set<string>();
    const keys = new Set<string>();
    try {
      for (const chunk of chunks) {
        const job = await this.#ownedJob(agentId, chunk.jobId, em);
        const entry = await this.#entry(job, chunk.step, em);
        const key = `${job.id}:${chunk.step}`;
        keys.add(key);
        const end = chunk.offset + chunk.data.length;
        if (entry.finished) {
          acks.set(key, { jobId: job.id, step: chunk.step, offset: Math.max(entry.received, end) });
          continue;
        }
        if (chunk.offset <= entry.received && end > entry.received) {
          const fresh = chunk.data.subarray(entry.received - chunk.offset);
          const kept = fresh.subarray(0, Math.max(0, this.#o.outputLimitBytes - entry.stored));
          if (kept.length > 0) {
            const last = rows.at(-1);
            if (
              last?.entryId === entry.id &&
              last.offset + last.bytes === entry.stored &&
              last.bytes + kept.length <= MERGED_ROW_BYTES
            ) {
              last.parts.push(kept);
              last.bytes += kept.length;
            } else {
              rows.push({ entryId: entry.id, offset: entry.stored, parts: [kept], bytes: kept.length });
            }
            entry.stored += kept.length;
            touched.add(job.deployment_id);
          }
          entry.received = end;
        }
        acks.set(key, { jobId: job.id, step: chunk.step, offset: entry.received });
      }
      if (rows.length > 0) {
        await this.#writer.write(
          rows.map((r) => ({
            entryId: r.entryId,
            offset: r.offset,
            data: r.parts.length === 1 ? r.parts[0]! : Buffer.concat(r.parts, r.bytes),
          })),
        );
        this.onOutputStored(rows.reduce((n, r) => n + r.bytes, 0));
      }
    } catch (err) {
      // What is in memory may be ahead of what was stored: read it from the database next time.
      for (const key of keys) this.#entries.delete(key);
      throw err;
    }
    for (const id of touched) this.#o.events.changed(id);
    return [...acks.values()];
  }

  /** The job, if it was given to this agent (ended ones too: re-sent output); cached while it runs. */
  async #ownedJob(agentId: Reporter, jobId: string, em: EntityManager): Promise<JobRow> {
    const cached = this.#jobs.get(jobId);
    if (cached) {
      if (cached.agent_id !== agentId)
        throw new ProtocolViolation(`job ${jobId} was not given to this agent`);
      return cached;
    }
    const job = await this.#job(agentId, jobId, em, true);
    if (!FINAL_JOB.has(job.status)) this.#jobs.set(jobId, job);
    return job;
  }

  async stepFinished(
    agentId: Reporter,
    jobId: string,
    step: number,
    result: { exitCode: number | null; signal: string | null; outputBytes: number; error?: string },
  ): Promise<void> {
    const em = this.#em();
    const job = await this.#job(agentId, jobId, em);
    const entry = await this.#entry(job, step, em);
    if (entry.finished) return;
    const notes: string[] = [];
    if (result.outputBytes > entry.stored && entry.stored >= this.#o.outputLimitBytes) {
      notes.push(
        `output truncated: this entry keeps the first ${size(this.#o.outputLimitBytes)}; ${result.outputBytes - entry.stored} more bytes were printed`,
      );
    }
    if (result.error) notes.push(result.error);
    const success = result.exitCode === 0 && result.signal === null && !result.error;
    const status = success ? 'success' : await this.#failedStepStatus(em, job.deployment_id, result.error);
    await this.#completeEntry(em, entry.id, status, result.exitCode, result.signal, notes);
    entry.finished = true;
    this.#entries.delete(`${job.id}:${step}`);
    this.#o.events.changed(job.deployment_id);
  }

  /** A step that did not succeed: stopped by a cancel or deadline that was asked for, by its own time limit, or failed. */
  async #failedStepStatus(
    em: EntityManager,
    deploymentId: string,
    error: string | undefined,
  ): Promise<string> {
    const [d] = await em.execute<Array<{ cancel_as: string | null }>>(
      'select cancel_as from deployments where id = ?',
      [deploymentId],
    );
    if (d?.cancel_as) return d.cancel_as;
    return /^timed out/.test(error ?? '') ? 'timed_out' : 'failed';
  }

  /**
   * Ends an entry, with notes at the end of its output when it did not end by itself. Its output
   * stays in its chunks, where it was stored as it arrived: copying every byte again into one
   * value when the command ends cost PostgreSQL more than storing it had (see bench/README.md).
   */
  async #completeEntry(
    em: EntityManager,
    entryId: string,
    status: string,
    exitCode: number | null,
    signal: string | null,
    notes: string[],
  ): Promise<void> {
    await em.transactional(async (tx) => {
      const open = await tx.execute<Array<{ id: string }>>(
        'select id from log_entries where id = ? and finished_at is null for update',
        [entryId],
      );
      if (open.length === 0) return;
      const [stored] = await tx.execute<Array<{ bytes: string | number }>>(
        `select coalesce(max("offset" + length(data)), 0) as bytes from log_chunks where log_entry_id = ?`,
        [entryId],
      );
      const end = Number(stored?.bytes ?? 0);
      const suffix = Buffer.from(notes.map((n) => `\n[deckhand] ${n}\n`).join(''));
      if (suffix.length > 0) {
        await tx.execute(
          `insert into log_chunks (log_entry_id, "offset", data, created_at) values (?, ?, ?, now())`,
          [entryId, end, suffix],
        );
      }
      await tx.execute(
        `update log_entries
            set output_bytes = ?, status = ?, success = ?, exit_code = ?, signal = ?, finished_at = now()
          where id = ?`,
        [end + suffix.length, status, status === 'success', exitCode, signal, entryId],
      );
    });
  }

  async jobFinished(agentId: Reporter, jobId: string, status: JobStatus, reason?: string): Promise<void> {
    const job = await this.#job(agentId, jobId);
    await this.#endJob(job, status, reason ?? null);
  }

  /** Ends a job (reported by its agent, or lost): open entries close, the rest are skipped. */
  async #endJob(job: JobRow, status: JobStatus, reason: string | null): Promise<void> {
    this.#jobs.delete(job.id);
    const em = this.#em();
    const [d] = await em.execute<DeploymentRow[]>(
      `select ${DEPLOYMENT_COLUMNS} from deployments where id = ?`,
      [job.deployment_id],
    );
    const entries = await em.execute<Array<{ id: string; seq: number; finished: boolean }>>(
      `select id, seq, finished_at is not null as finished from log_entries where deployment_id = ? and host = ?`,
      [job.deployment_id, job.host],
    );
    // A step still open when the job ended (cancelled, lost) ends with the job, saying so at its end.
    for (const open of entries.filter((e) => !e.finished)) {
      const entryStatus = status === 'success' ? 'failed' : status === 'abandoned' ? 'failed' : status;
      await this.#completeEntry(em, open.id, entryStatus, null, null, [reason ?? `job ${status}`]);
      this.#entries.delete(`${job.id}:${open.seq}`);
    }
    const lastStarted = entries.reduce((max, e) => Math.max(max, e.seq), -1);
    await em.transactional(async (tx) => {
      for (const step of d ? planOf(d).filter((s) => s.index > lastStarted) : []) {
        await tx.execute(
          `insert into log_entries (id, created_at, deployment_id, seq, host, cmd, status, success, output, output_bytes, started_at, finished_at)
           values (gen_random_uuid(), now(), ?, ?, ?, ?, 'skipped', false, ''::bytea, 0, clock_timestamp(), clock_timestamp())
           on conflict (deployment_id, host, seq) do nothing`,
          [job.deployment_id, step.index, job.host, step.cmd],
        );
      }
      await tx.execute(
        `update deployment_jobs set status = ?, reason = ?, finished_at = now()
          where id = ? and status in ('pending', 'sent', 'running')`,
        [status, reason, job.id],
      );
    });
    await this.#finishDeploymentIfDone(job.deployment_id);
    this.#o.events.changed(job.deployment_id);
  }

  async #finishDeploymentIfDone(deploymentId: string): Promise<void> {
    const em = this.#em();
    const jobs = await em.execute<Array<{ host: string; status: JobStatus; reason: string | null }>>(
      'select host, status, reason from deployment_jobs where deployment_id = ? order by host',
      [deploymentId],
    );
    if (jobs.length === 0 || jobs.some((j) => !FINAL_JOB.has(j.status))) return;
    const [d] = await em.execute<
      Array<{ commit: string; cancel_as: 'cancelled' | 'timed_out' | null; cancel_reason: string | null }>
    >('select commit, cancel_as, cancel_reason from deployments where id = ?', [deploymentId]);
    const outcome = deploymentOutcome(
      jobs,
      d?.commit ?? '',
      d?.cancel_as ? { as: d.cancel_as, reason: d.cancel_reason ?? '' } : null,
    );
    const updated = await em.execute<Array<{ id: string }>>(
      `update deployments set status = ?, reason = ?, finished_at = now() where id = ? and status = 'running' returning id`,
      [outcome.status, outcome.reason, deploymentId],
    );
    if (updated.length) this.onDeploymentFinished(deploymentId);
  }
}
