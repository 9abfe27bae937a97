// Installing an agent from the Agents page (POST /agents/install): the coordinator itself runs the
// installer (@deckhand/installer) against the host over SSH — connect with the pinned host key,
// check Node, register the agent, upload the file it serves, start it, wait until it is online.
// The process that runs it records its progress in PostgreSQL (`agent_installs`): steps at once,
// the installer's lines at most every WRITE_EVERY_MS, everything at the end, and a heartbeat
// (`updated_at`) while it goes — so the progress page (GET /agents/installs/:id) reads the same on
// every coordinator process, and a run whose process died is shown failed. The private key lives
// only in the run's closure until the run ends: it is never stored, logged or returned. Each run
// is audit-logged when it starts and when it ends.
import { randomUUID } from 'node:crypto';
import {
  type InstallCoordinator,
  InstallError,
  installAgent,
  type InstallStep,
  INSTALL_STEPS,
  type InstallTarget,
} from '@deckhand/installer';
import type { MikroORM } from '@mikro-orm/postgresql';
import type { FastifyBaseLogger as Logger } from 'fastify';
import type { AgentBundle } from '../agent-bundle/agent-bundle.ts';
import { AgentBundleUnavailable } from '../agent-bundle/agent-bundle.ts';
import type { AgentService } from '../agent/agent.service.ts';
import { recordAudit } from '../audit/audit.service.ts';
import type { Actor } from '../common/actor.ts';
import { NotFoundError } from '../common/errors.ts';
import { AgentInstall } from './agent-install.entity.ts';
import { isUuid } from '../common/schemas.ts';

export type InstallStatus = 'running' | 'succeeded' | 'failed';
export type StepStatus = 'pending' | 'running' | 'done' | 'failed';

/** What the progress page and GET /agents/installs/:id show of a run (nothing secret). */
export interface InstallRunJson {
  id: string;
  status: InstallStatus;
  name: string;
  labels: string[];
  host: string;
  port: number;
  username: string;
  host_key_fingerprint: string;
  steps: Array<{ step: InstallStep; title: string; status: StepStatus }>;
  /** What the installer said, in order. */
  lines: string[];
  /** Why it failed and what to do next. */
  error: string | null;
  agent_id: string | null;
  agent_version: string | null;
  started_by: string;
  started_at: string;
  finished_at: string | null;
}

export const STEP_TITLES: Record<InstallStep, string> = {
  download: 'Load the agent file',
  connect: 'Connect over SSH (host key checked)',
  check: 'Check Node 22+ and git on the host',
  register: 'Register the agent and create its token',
  upload: 'Upload the agent and its token',
  start: 'Start it (systemd unit, or nohup)',
  online: 'Wait until it is online',
};

export interface InstallRequest {
  host: string;
  port: number;
  username: string;
  privateKey: string;
  fingerprint: string;
  name: string;
  labels: string[];
  agentUrl: string;
  insecure: boolean;
  dir: string | null;
  node: string | null;
  waitMs: number;
}

/** The installer's lines kept for the page: the last LINES_KEPT, at most LINES_BYTES in all. */
const LINES_KEPT = 500;
const LINES_BYTES = 64 * 1024;
const LINE_CHARS = 4_000;
/** New lines reach the database at most this often; step changes and the end at once. */
const WRITE_EVERY_MS = 200;
/** Runs are kept this long, at most KEEP_RUNS of them (pruned when one starts). */
const KEEP_DAYS = 30;
const KEEP_RUNS = 200;
const FINAL_WRITE_ATTEMPTS = 3;

export const STOPPED_ERROR =
  'The coordinator running this installation stopped before it ended; run it again.';

interface Run {
  json: InstallRunJson;
  /** Bytes in json.lines. */
  bytes: number;
}

export class AgentInstalls {
  readonly #running = new Set<Promise<void>>();
  #closing = false;
  /** This process, as recorded in the runs it writes. */
  readonly #coordinatorId = randomUUID();
  readonly #heartbeatMs: number;
  readonly #o: { orm: MikroORM; agents: AgentService; bundle: AgentBundle; log: Logger };

  /**
   * `heartbeatMs`: a running run's row is written at least this often; one not written for three
   * of those counts as stopped with the process that ran it.
   */
  constructor(o: {
    orm: MikroORM;
    agents: AgentService;
    bundle: AgentBundle;
    log: Logger;
    heartbeatMs: number;
  }) {
    this.#o = o;
    this.#heartbeatMs = o.heartbeatMs;
  }

  /** A run as recorded, from whichever process runs or ran it. */
  async get(id: string): Promise<InstallRunJson> {
    const missing = new NotFoundError('No such installation');
    if (!isUuid(id)) throw missing;
    const [row] = await this.#o.orm.em.fork().execute<Array<InstallRow>>(
      `select i.*, (i.status = 'running' and i.updated_at < now() - ? * interval '1 millisecond') as stale
         from agent_installs i where i.id = ?`,
      [3 * this.#heartbeatMs, id],
    );
    if (!row) throw missing;
    return fromRow(row);
  }

  /** Starts an installation in the background; the run is returned at once. */
  async start(request: InstallRequest, actor: Actor): Promise<InstallRunJson> {
    await this.#prune().catch((err) => this.#o.log.warn({ err }, 'could not prune old agent installations'));
    const run: Run = {
      json: {
        id: randomUUID(),
        status: 'running',
        name: request.name,
        labels: request.labels,
        host: request.host,
        port: request.port,
        username: request.username,
        host_key_fingerprint: request.fingerprint,
        steps: INSTALL_STEPS.map((step) => ({ step, title: STEP_TITLES[step], status: 'pending' })),
        lines: [],
        error: null,
        agent_id: null,
        agent_version: null,
        started_by: actor.name,
        started_at: new Date().toISOString(),
        finished_at: null,
      },
      bytes: 0,
    };
    const r = run.json;
    await this.#o.orm.em.fork().transactional(async (em) => {
      em.create(AgentInstall, {
        id: r.id,
        createdAt: new Date(r.started_at),
        createdBy: actor.name.slice(0, 255),
        host: r.host,
        port: r.port,
        username: r.username,
        hostKeyFingerprint: r.host_key_fingerprint,
        name: r.name,
        labels: r.labels,
        status: r.status,
        steps: r.steps,
        lines: [],
        error: null,
        agentId: null,
        agentVersion: null,
        coordinator: this.#coordinatorId,
        updatedAt: new Date(),
        finishedAt: null,
      });
      recordAudit(em, actor, 'agent.install.start', null, {
        install: r.id,
        name: r.name,
        labels: r.labels,
        host: r.host,
        port: r.port,
        username: r.username,
        host_key_fingerprint: r.host_key_fingerprint,
      });
    });
    this.#o.log.info(
      { install: r.id, agent: r.name, host: r.host, port: r.port, user: r.username },
      'agent installation started',
    );
    const done = this.#run(run, request, actor).finally(() => this.#running.delete(done));
    this.#running.add(done);
    return structuredClone(r);
  }

  /** Stops waiting: runs under way end (failed) at their next pause, and are waited for. */
  async close(): Promise<void> {
    this.#closing = true;
    await Promise.allSettled([...this.#running]);
  }

  async #run(run: Run, request: InstallRequest, actor: Actor): Promise<void> {
    const r = run.json;
    const target: InstallTarget = {
      host: request.host,
      port: request.port,
      user: request.username,
      auth: { privateKey: request.privateKey },
      fingerprint: request.fingerprint,
      name: request.name,
      labels: request.labels,
      agentUrl: request.agentUrl,
      insecure: request.insecure,
      dir: request.dir,
      node: request.node,
      waitMs: request.waitMs,
    };
    const progress = new ProgressWriter(
      () => this.#save(run),
      this.#heartbeatMs,
      (err) => this.#o.log.warn({ err, install: r.id }, 'could not record the installation progress'),
    );
    const mark = (status: StepStatus) => {
      const current = r.steps.find((s) => s.status === 'running');
      if (current) current.status = status;
    };
    let audit: { action: string; target: { type: string; id: string } | null; details: object };
    try {
      const result = await installAgent(
        target,
        this.#coordinator(run, actor, progress),
        {
          step: (step) => {
            mark('done');
            const next = r.steps.find((s) => s.step === step);
            if (next) next.status = 'running';
            progress.now();
          },
          say: (line) => {
            addLine(run, line);
            progress.soon();
          },
        },
        {
          sleep: async (ms) => {
            await new Promise((resolve) => setTimeout(resolve, ms));
            if (this.#closing)
              throw new InstallError(
                'host',
                'The coordinator stopped while waiting for the agent: look at the Agents page.',
              );
          },
        },
      );
      mark('done');
      r.status = 'succeeded';
      r.agent_version = result.version;
      this.#o.log.info({ install: r.id, agent: r.name }, 'agent installed and online');
      audit = {
        action: 'agent.install.succeeded',
        target: { type: 'agent', id: result.agentId },
        details: { install: r.id, name: r.name, version: result.version },
      };
    } catch (err) {
      mark('failed');
      r.status = 'failed';
      r.error =
        err instanceof InstallError || err instanceof AgentBundleUnavailable
          ? err.message
          : `The installation failed: ${(err as Error).message}`;
      if (!(err instanceof InstallError))
        this.#o.log.error({ err, install: r.id }, 'agent installation failed');
      else this.#o.log.warn({ install: r.id, reason: err.message }, 'agent installation failed');
      audit = {
        action: 'agent.install.failed',
        target: null,
        details: { install: r.id, name: r.name, host: r.host, error: r.error.slice(0, 2000) },
      };
    } finally {
      // Only the run's closure held the key; `request` goes out of scope with it.
      request.privateKey = '';
      target.auth = { privateKey: '' };
    }
    r.finished_at = new Date().toISOString();
    // The end and its audit entry together, after every write before them.
    await progress.finish(async () => {
      for (let attempt = 1; ; attempt++) {
        try {
          await this.#o.orm.em.fork().transactional(async (em) => {
            await this.#save(run, em);
            recordAudit(em, actor, audit.action, audit.target, { ...audit.details });
          });
          return;
        } catch (err) {
          if (attempt >= FINAL_WRITE_ATTEMPTS) {
            this.#o.log.error({ err, install: r.id }, 'could not record the end of the installation');
            return;
          }
          await new Promise((resolve) => setTimeout(resolve, 500 * attempt));
        }
      }
    });
  }

  /** Writes the run's progress (and this process's heartbeat), in `em`'s transaction if given. */
  async #save(run: Run, em = this.#o.orm.em.fork()): Promise<void> {
    const r = run.json;
    await em.execute(
      `update agent_installs
          set status = ?, steps = cast(? as jsonb), lines = cast(? as jsonb), error = ?, agent_id = ?,
              agent_version = ?, coordinator = ?, updated_at = now(),
              finished_at = case when ? = 'running' then null else coalesce(finished_at, now()) end
        where id = ?`,
      [
        r.status,
        JSON.stringify(r.steps),
        JSON.stringify(r.lines),
        r.error,
        r.agent_id,
        r.agent_version,
        this.#coordinatorId,
        r.status,
        r.id,
      ],
    );
  }

  /** The coordinator's side of the installer: its own services, no HTTP. */
  #coordinator(run: Run, actor: Actor, progress: ProgressWriter): InstallCoordinator {
    const { agents, bundle } = this.#o;
    return {
      async downloadAgent() {
        try {
          const file = await bundle.get();
          return { code: file.code, version: file.version };
        } catch (err) {
          if (err instanceof AgentBundleUnavailable) throw new InstallError('coordinator', err.message);
          throw err;
        }
      },
      async register(name, labels) {
        const created = await agents.create({ name, labels }, actor);
        run.json.agent_id = created.agent.id;
        progress.now();
        return { id: created.agent.id, token: created.token };
      },
      async unregister(id) {
        await agents.delete(id, actor);
        run.json.agent_id = null;
        progress.now();
      },
      async agent(by) {
        const list = await agents.list();
        return list.find((a) => ('id' in by ? a.id === by.id : a.name === by.name)) ?? null;
      },
    };
  }

  /** Old runs go: past KEEP_DAYS, or beyond the newest KEEP_RUNS — never one still running. */
  async #prune(): Promise<void> {
    await this.#o.orm.em.fork().execute(
      `delete from agent_installs
        where not (status = 'running' and updated_at > now() - ? * interval '1 millisecond')
          and (created_at < now() - ? * interval '1 day'
               or id not in (select id from agent_installs order by created_at desc limit ?))`,
      [3 * this.#heartbeatMs, KEEP_DAYS, KEEP_RUNS],
    );
  }
}

/** Keeps the last lines, within LINES_KEPT and LINES_BYTES. */
function addLine(run: Run, line: string): void {
  const kept = line.length > LINE_CHARS ? `${line.slice(0, LINE_CHARS)}…` : line;
  run.json.lines.push(kept);
  run.bytes += Buffer.byteLength(kept);
  while (run.json.lines.length > LINES_KEPT || run.bytes > LINES_BYTES) {
    run.bytes -= Buffer.byteLength(run.json.lines.shift()!);
  }
}

/**
 * Writes one run's progress in order, one write at a time: `soon()` within WRITE_EVERY_MS, `now()`
 * at once, and at least every heartbeat until `finish()`.
 */
class ProgressWriter {
  readonly #save: () => Promise<void>;
  readonly #onError: (err: unknown) => void;
  readonly #heartbeat: NodeJS.Timeout;
  #timer: NodeJS.Timeout | undefined;
  #chain: Promise<void> = Promise.resolve();
  #done = false;

  constructor(save: () => Promise<void>, heartbeatMs: number, onError: (err: unknown) => void) {
    this.#save = save;
    this.#onError = onError;
    this.#heartbeat = setInterval(() => this.now(), heartbeatMs);
  }

  soon(): void {
    if (this.#timer || this.#done) return;
    this.#timer = setTimeout(() => this.now(), WRITE_EVERY_MS);
  }

  now(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    if (this.#done) return;
    this.#chain = this.#chain.then(() => this.#save()).catch(this.#onError);
  }

  /** No more writes of its own; `last` runs after the ones under way. */
  async finish(last: () => Promise<void>): Promise<void> {
    this.#done = true;
    clearTimeout(this.#timer);
    clearInterval(this.#heartbeat);
    this.#chain = this.#chain.then(last).catch(this.#onError);
    await this.#chain;
  }
}

type InstallRow = {
  id: string;
  created_at: Date | string;
  created_by: string;
  host: string;
  port: number;
  username: string;
  host_key_fingerprint: string;
  name: string;
  labels: string[];
  status: InstallStatus;
  steps: InstallRunJson['steps'];
  lines: string[];
  error: string | null;
  agent_id: string | null;
  agent_version: string | null;
  finished_at: Date | string | null;
  /** Still "running", but its process has not written for three heartbeats. */
  stale: boolean;
};

function fromRow(row: InstallRow): InstallRunJson {
  const json: InstallRunJson = {
    id: row.id,
    status: row.status,
    name: row.name,
    labels: row.labels,
    host: row.host,
    port: row.port,
    username: row.username,
    host_key_fingerprint: row.host_key_fingerprint,
    steps: row.steps,
    lines: row.lines,
    error: row.error,
    agent_id: row.agent_id,
    agent_version: row.agent_version,
    started_by: row.created_by,
    started_at: new Date(row.created_at).toISOString(),
    finished_at: row.finished_at === null ? null : new Date(row.finished_at).toISOString(),
  };
  if (row.stale) {
    // Its process died (or lost the database) mid-run: nothing will finish it.
    json.status = 'failed';
    for (const s of json.steps) if (s.status === 'running') s.status = 'failed';
    json.error = row.agent_id
      ? `${STOPPED_ERROR} It had registered the agent ${row.name}: unless the Agents page shows it online, revoke it there first.`
      : STOPPED_ERROR;
  }
  return json;
}
