// Installing an agent from the Agents page (POST /agents/install): the coordinator itself runs the
// installer (@deckhand/installer) against the host over SSH — connect with the pinned host key,
// check Node, register the agent, upload the file it serves, start it, wait until it is online —
// as a run recorded here, in this process's memory, whose steps and lines the progress page
// (GET /agents/installs/:id) shows while it goes. The private key lives only in the run's
// closure until the run ends: it is never stored, logged or returned. Each run is audit-logged
// when it starts and when it ends.
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

/** Finished runs are kept this long for their page, at most MAX_RUNS in all. */
const KEEP_FINISHED_MS = 60 * 60_000;
const MAX_RUNS = 100;

export class AgentInstalls {
  readonly #runs = new Map<string, InstallRunJson>();
  readonly #running = new Set<Promise<void>>();
  #closing = false;
  readonly #o: { orm: MikroORM; agents: AgentService; bundle: AgentBundle; log: Logger };

  constructor(o: { orm: MikroORM; agents: AgentService; bundle: AgentBundle; log: Logger }) {
    this.#o = o;
  }

  get(id: string): InstallRunJson {
    const run = this.#runs.get(id);
    if (!run)
      throw new NotFoundError(
        'No such installation here (runs are kept in the memory of the coordinator process that started them, for an hour)',
      );
    return run;
  }

  /** Starts an installation in the background; the run is returned at once. */
  async start(request: InstallRequest, actor: Actor): Promise<InstallRunJson> {
    this.#prune();
    const run: InstallRunJson = {
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
    };
    this.#runs.set(run.id, run);
    await this.#audit(actor, 'agent.install.start', null, {
      install: run.id,
      name: run.name,
      labels: run.labels,
      host: run.host,
      port: run.port,
      username: run.username,
      host_key_fingerprint: run.host_key_fingerprint,
    });
    this.#o.log.info(
      { install: run.id, agent: run.name, host: run.host, port: run.port, user: run.username },
      'agent installation started',
    );
    const done = this.#run(run, request, actor).finally(() => this.#running.delete(done));
    this.#running.add(done);
    return run;
  }

  /** Stops waiting: runs under way end (failed) at their next pause, and are waited for. */
  async close(): Promise<void> {
    this.#closing = true;
    await Promise.allSettled([...this.#running]);
  }

  async #run(run: InstallRunJson, request: InstallRequest, actor: Actor): Promise<void> {
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
    const mark = (status: StepStatus) => {
      const current = run.steps.find((s) => s.status === 'running');
      if (current) current.status = status;
    };
    try {
      const result = await installAgent(
        target,
        this.#coordinator(run, actor),
        {
          step: (step) => {
            mark('done');
            const next = run.steps.find((s) => s.step === step);
            if (next) next.status = 'running';
          },
          say: (line) => run.lines.push(line),
        },
        {
          sleep: async (ms) => {
            await new Promise((r) => setTimeout(r, ms));
            if (this.#closing)
              throw new InstallError(
                'host',
                'The coordinator stopped while waiting for the agent: look at the Agents page.',
              );
          },
        },
      );
      mark('done');
      run.status = 'succeeded';
      run.agent_version = result.version;
      this.#o.log.info({ install: run.id, agent: run.name }, 'agent installed and online');
      await this.#audit(
        actor,
        'agent.install.succeeded',
        { type: 'agent', id: result.agentId },
        { install: run.id, name: run.name, version: result.version },
      ).catch((err) => this.#o.log.error({ err, install: run.id }, 'could not record the installation'));
    } catch (err) {
      mark('failed');
      run.status = 'failed';
      run.error =
        err instanceof InstallError || err instanceof AgentBundleUnavailable
          ? err.message
          : `The installation failed: ${(err as Error).message}`;
      if (!(err instanceof InstallError))
        this.#o.log.error({ err, install: run.id }, 'agent installation failed');
      else this.#o.log.warn({ install: run.id, reason: err.message }, 'agent installation failed');
      await this.#audit(actor, 'agent.install.failed', null, {
        install: run.id,
        name: run.name,
        host: run.host,
        error: run.error.slice(0, 2000),
      }).catch((err) => this.#o.log.error({ err, install: run.id }, 'could not record the installation'));
    } finally {
      run.finished_at = new Date().toISOString();
      // Only the run's closure held the key; `request` goes out of scope with it.
      request.privateKey = '';
    }
  }

  /** The coordinator's side of the installer: its own services, no HTTP. */
  #coordinator(run: InstallRunJson, actor: Actor): InstallCoordinator {
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
        run.agent_id = created.agent.id;
        return { id: created.agent.id, token: created.token };
      },
      async unregister(id) {
        await agents.delete(id, actor);
        run.agent_id = null;
      },
      async agent(by) {
        const list = await agents.list();
        return list.find((a) => ('id' in by ? a.id === by.id : a.name === by.name)) ?? null;
      },
    };
  }

  async #audit(
    actor: Actor,
    action: string,
    target: { type: string; id: string } | null,
    details: Record<string, unknown>,
  ): Promise<void> {
    const em = this.#o.orm.em.fork();
    recordAudit(em, actor, action, target, details);
    await em.flush();
  }

  #prune(): void {
    const now = Date.now();
    for (const [id, run] of this.#runs) {
      if (run.finished_at && now - Date.parse(run.finished_at) > KEEP_FINISHED_MS) this.#runs.delete(id);
    }
    for (const [id, run] of this.#runs) {
      if (this.#runs.size < MAX_RUNS) break;
      if (run.finished_at) this.#runs.delete(id);
    }
  }
}
