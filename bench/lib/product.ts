// The product as the benchmarks drive it: a real coordinator (in this process, real HTTP, its own
// fresh database), its admin, a local git repository as the forge, and one or more real
// `deckhand-agent` processes connected over the real WebSocket. Probes wrap a few JobService
// methods of this coordinator instance and listen on the agents' sockets (nothing in the product
// changes) to timestamp what the coordinator does with each deployment: job sent, step started,
// each output frame's arrival and storage, entry completed.
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import pino from 'pino';
import type { WebSocket } from 'ws';
import { loggerOptions } from '../../coordinator/src/plugins/logger.ts';
import {
  type Client,
  signUp,
  startCoordinator,
  type TestCoordinator,
} from '../../test/helpers/coordinator.ts';
import { createTestRepo } from '../../test/helpers/git.ts';
import { type Spawned, spawnNode } from '../../test/helpers/processes.ts';
import { type Cleanup, sleep, withTimeout } from './harness.ts';

/** step.output's binary header: kind, job id, step, seq, offset (protocol/src/codec.ts). */
const OUTPUT_HEADER_BYTES = 33;

export const FINAL_STATUSES = new Set(['success', 'failed', 'cancelled', 'timed_out']);

/** What the probes saw of one deployment, in performance.now() milliseconds. */
export interface DeploymentTrace {
  /** Named moments, first occurrence kept: jobSent, accepted, started:<step>, firstOutput:<step>, … */
  marks: Map<string, number>;
  /** Output frames stored per step: count, bytes, and time spent inside JobService.outputs(). */
  frames: Map<number, { count: number; bytes: number; busyMs: number; lastStored: number }>;
  /** First arrival of each frame kind on the coordinator's socket (`step.output:1`, `job.finished`…), before decoding. */
  arrived: Map<string, number>;
  /** Every output chunk handed to JobService.outputs(): its frame's arrival on the socket and when it was stored. */
  chunks: ChunkTrace[];
  /** Time spent synchronously in the hub's `message` handler (decodeAgentFrame's header read, batching) for output frames. */
  decode: { frames: number; ms: number };
}

export interface ChunkTrace {
  step: number;
  offset: number;
  bytes: number;
  /** The frame reached the coordinator's socket (before decoding); NaN if the probe missed it. */
  arrived: number;
  /** JobService.outputs() called with it / returned (stored, about to be acknowledged). */
  handling: number;
  stored: number;
  /** How many chunks that outputs() call stored together. */
  batch: number;
}

export interface ProductAgent {
  name: string;
  /** The agent's process id (its Node process: /proc/<pid>/status is the agent's own memory). */
  pid: number;
}

export interface Product {
  coord: TestCoordinator;
  admin: Client;
  /** The first agent's name (the one projects target unless told otherwise). */
  agentName: string;
  agents: ProductAgent[];
  /** The forge: a bare repository with one commit. */
  forgeUrl: string;
  commit: string;
  /** A pool on the coordinator's database, for the benchmarks' own checks. */
  pool: pg.Pool;
  /** A project whose target is one agent (the first unless `agentName` is given). */
  createProject(name: string, commands: string[], agentName?: string): Promise<string>;
  /** POST /deploy of the project at `commit` (as a push webhook would give it): the deployment id. */
  deploy(projectId: string): Promise<string>;
  trace(deploymentId: string): DeploymentTrace;
  /** The stored output of the deployment's command `seq` (1 = the first after the checkout), as text. */
  stepOutput(deploymentId: string, seq: number): Promise<string>;
  /** Drops what the probes hold of a finished deployment (the soak runs hundreds). */
  forget(deploymentId: string): void;
  /** Resolves when the coordinator has handled job.finished for the deployment. */
  jobFinished(deploymentId: string, timeoutMs: number): Promise<void>;
  /** Coordinator log and agent output, for failure messages. */
  diagnostics(): Promise<string>;
}

function newTrace(): DeploymentTrace {
  return {
    marks: new Map(),
    frames: new Map(),
    arrived: new Map(),
    chunks: [],
    decode: { frames: 0, ms: 0 },
  };
}

export async function startProduct(
  cleanup: Cleanup,
  label: string,
  env: Record<string, string> = {},
  opts: { agents?: number } = {},
): Promise<Product> {
  const agentCount = opts.agents ?? 1;
  const dir = await mkdtemp(path.join(tmpdir(), `deckhand-bench-${label}-`));
  cleanup.defer('temporary folder', () => rm(dir, { recursive: true, force: true }));

  // The coordinator logs at info (its default), into a file: it formats and writes what it
  // would in production, and the file explains a failure.
  const logFile = path.join(dir, 'coordinator.log');
  const destination = pino.destination({ dest: logFile, sync: false });
  const logger = pino(loggerOptions('info'), destination);
  // Flushed, not ended: a timer of the coordinator may still log after app.close() (Retention's
  // first pass, set up with a setTimeout that stop() does not clear), and pino throws on a write
  // to an ended destination, which would kill the whole benchmark run.
  cleanup.defer('coordinator log', () => new Promise<void>((resolve) => destination.flush(() => resolve())));

  const coord = await startCoordinator({ LOG_LEVEL: 'info', ...env }, { logger });
  cleanup.defer('coordinator and its database', () => coord.close());
  const dbUrl = String(coord.orm.config.get('clientUrl'));
  const pool = new pg.Pool({ connectionString: dbUrl, max: 4 });
  pool.on('error', () => undefined);
  cleanup.defer('benchmark pool', () => pool.end());

  // Probes, installed before the agent connects.
  const traces = new Map<string, DeploymentTrace>();
  const jobToDeployment = new Map<string, string>();
  const finishedWaiters = new Map<string, () => void>();
  const traceOf = (deploymentId: string) => {
    let t = traces.get(deploymentId);
    if (!t) traces.set(deploymentId, (t = newTrace()));
    return t;
  };
  const traceOfJob = (jobId: string) => {
    const d = jobToDeployment.get(jobId);
    return d === undefined ? undefined : traceOf(d);
  };
  const mark = (t: DeploymentTrace | undefined, name: string, at = performance.now()) => {
    if (t && !t.marks.has(name)) t.marks.set(name, at);
  };
  const jobs = coord.app.services.jobs;
  const dispatch = coord.app.services.dispatch;
  const claimPending = dispatch.claimPending.bind(dispatch);
  dispatch.claimPending = async (agentIds) => {
    const claimed = await claimPending(agentIds);
    const at = performance.now();
    for (const { assign } of claimed) {
      jobToDeployment.set(assign.jobId, assign.deploymentId);
      mark(traceOf(assign.deploymentId), 'jobSent', at);
    }
    return claimed;
  };
  const accepted = jobs.accepted.bind(jobs);
  jobs.accepted = async (agentId, jobId) => {
    mark(traceOfJob(jobId), 'accepted');
    return accepted(agentId, jobId);
  };
  const stepStarted = jobs.stepStarted.bind(jobs);
  jobs.stepStarted = async (agentId, jobId, step, cmd) => {
    mark(traceOfJob(jobId), `started:${step}`);
    return stepStarted(agentId, jobId, step, cmd);
  };
  const outputs = jobs.outputs.bind(jobs);
  jobs.outputs = async (agentId, chunks) => {
    const begin = performance.now();
    const acked = await outputs(agentId, chunks);
    const end = performance.now();
    for (const chunk of chunks) {
      const t = traceOfJob(chunk.jobId);
      if (!t) continue;
      const frameKey = `${chunk.jobId}:${chunk.step}:${chunk.offset}`;
      t.chunks.push({
        step: chunk.step,
        offset: chunk.offset,
        bytes: chunk.data.length,
        arrived: frameArrivals.get(frameKey) ?? Number.NaN,
        handling: begin,
        stored: end,
        batch: chunks.length,
      });
      frameArrivals.delete(frameKey);
      mark(t, `firstOutput:${chunk.step}`, end);
      mark(t, 'firstOutput', end);
      let f = t.frames.get(chunk.step);
      if (!f) t.frames.set(chunk.step, (f = { count: 0, bytes: 0, busyMs: 0, lastStored: end }));
      f.count += 1;
      f.bytes += chunk.data.length;
      f.busyMs += (end - begin) / chunks.length;
      f.lastStored = end;
    }
    return acked;
  };
  const stepFinished = jobs.stepFinished.bind(jobs);
  jobs.stepFinished = async (agentId, jobId, step, result) => {
    const t = traceOfJob(jobId);
    mark(t, `finishing:${step}`);
    await stepFinished(agentId, jobId, step, result);
    mark(t, `finished:${step}`);
  };
  const jobFinished = jobs.jobFinished.bind(jobs);
  jobs.jobFinished = async (agentId, jobId, status, reason) => {
    await jobFinished(agentId, jobId, status, reason);
    const deploymentId = jobToDeployment.get(jobId);
    if (deploymentId !== undefined) {
      mark(traceOf(deploymentId), 'jobFinished');
      finishedWaiters.get(deploymentId)?.();
    }
  };
  // Arrival of each kind of frame on the coordinator's socket, timestamped before the hub decodes
  // and queues it, and the time the hub's own `message` listener takes (a listener before it and
  // one after it). JSON frames start with `type` then `jobId` (then `step`); step.output is a
  // binary frame whose 33-byte header holds the job id, step, seq and offset (protocol codec.ts).
  const frameArrivals = new Map<string, number>();
  const hub = coord.app.services.hub;
  const accept = hub.accept.bind(hub);
  hub.accept = (socket: WebSocket, agent) => {
    let current: { t: DeploymentTrace; at: number } | undefined;
    socket.on('message', (data: Buffer, isBinary: boolean) => {
      current = undefined;
      if (!Buffer.isBuffer(data)) return;
      const at = performance.now();
      if (isBinary) {
        if (data.length < OUTPUT_HEADER_BYTES || data[0] !== 1) return;
        const hex = data.subarray(1, 17).toString('hex');
        const jobId = `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
        const t = traceOfJob(jobId);
        if (!t) return;
        const step = data.readUInt32BE(17);
        const key = `step.output:${step}`;
        if (!t.arrived.has(key)) t.arrived.set(key, at);
        frameArrivals.set(`${jobId}:${step}:${Number(data.readBigUInt64BE(25))}`, at);
        current = { t, at };
        return;
      }
      const m = /^\{"type":"([a-z.]+)","jobId":"([0-9a-f-]{36})"(?:,"step":(\d+))?/.exec(
        data.subarray(0, 160).toString('latin1'),
      );
      if (!m) return;
      const t = traceOfJob(m[2]!);
      const key = m[3] === undefined ? m[1]! : `${m[1]}:${m[3]}`;
      if (t && !t.arrived.has(key)) t.arrived.set(key, at);
    });
    accept(socket, agent);
    socket.on('message', () => {
      if (!current) return;
      current.t.decode.frames += 1;
      current.t.decode.ms += performance.now() - current.at;
      current = undefined;
    });
  };

  const { client: admin } = await signUp(coord.url, 'bench@example.com', 'a long benchmark passphrase');
  const repo = await createTestRepo();
  cleanup.defer('git repository', () => repo.remove());
  const commit = await repo.commit({ 'README.md': 'deckhand benchmark\n' }, 'benchmark');

  // Each agent is a process of its own, with a work folder of its own.
  const running: Array<{ name: string; agent: RunningAgent }> = [];
  for (let i = 0; i < agentCount; i++) {
    const name = i === 0 ? 'bench-agent' : `bench-agent-${i + 1}`;
    const registered = await admin.post('/agents', { name, labels: ['bench'] });
    if (registered.status !== 201) throw new Error(`POST /agents: ${registered.status} ${registered.text}`);
    const agent = await spawnAgent(coord.url, registered.json.token as string, path.join(dir, name));
    cleanup.defer(`agent process ${name}`, () => agent.stop());
    running.push({ name, agent });
  }
  const agentName = running[0]!.name;

  const deadline = Date.now() + 20_000;
  for (;;) {
    const res = await admin.get('/agents');
    const online = new Set(
      ((res.json?.agents ?? []) as Array<{ name: string; online: boolean }>)
        .filter((a) => a.online)
        .map((a) => a.name),
    );
    if (running.every((r) => online.has(r.name))) break;
    const dead = running.find((r) => r.agent.child.exitCode !== null);
    if (dead || Date.now() > deadline) {
      const which = dead ?? running.find((r) => !online.has(r.name))!;
      throw new Error(`the agent ${which.name} did not come online:\n${which.agent.output()}`);
    }
    await sleep(50);
  }

  const diagnostics = async () => {
    const log = await readFile(logFile, 'utf8').catch(() => '');
    const tail = (text: string) => text.split('\n').slice(-40).join('\n');
    const agents = running.map((r) => `--- agent ${r.name} output (tail) ---\n${tail(r.agent.output())}`);
    return `--- coordinator log (tail) ---\n${tail(log)}\n${agents.join('\n')}`;
  };

  return {
    coord,
    admin,
    agentName,
    agents: running.map((r) => ({ name: r.name, pid: r.agent.child.pid! })),
    forgeUrl: repo.url,
    commit,
    pool,
    async createProject(name, commands, target = agentName) {
      const res = await admin.post('/projects', {
        name,
        forge_url: repo.url,
        branch_name: 'main',
        commands,
        target: { agents: { names: [target] } },
      });
      if (res.status !== 201) {
        throw new Error(`POST /projects: ${res.status} ${res.text}\n${await diagnostics()}`);
      }
      return res.json.project.id as string;
    },
    async deploy(projectId) {
      const res = await admin.post('/deploy', { projectId, commit });
      if (res.status !== 200) throw new Error(`POST /deploy: ${res.status} ${res.text}`);
      return res.json.deployId as string;
    },
    trace: traceOf,
    async stepOutput(deploymentId, seq) {
      const { rows } = await pool.query<{ output: string | null }>(
        `select convert_from(string_agg(c.data, ''::bytea order by c."offset"), 'UTF8') as output
           from log_entries e join log_chunks c on c.log_entry_id = e.id
          where e.deployment_id = $1 and e.seq = $2`,
        [deploymentId, seq],
      );
      return rows[0]?.output ?? '';
    },
    forget(deploymentId) {
      traces.delete(deploymentId);
      for (const [jobId, d] of jobToDeployment) if (d === deploymentId) jobToDeployment.delete(jobId);
    },
    async jobFinished(deploymentId, timeoutMs) {
      if (traceOf(deploymentId).marks.has('jobFinished')) return;
      await withTimeout(
        new Promise<void>((resolve) => finishedWaiters.set(deploymentId, resolve)),
        timeoutMs,
        `deployment ${deploymentId} to finish`,
      ).finally(() => finishedWaiters.delete(deploymentId));
    },
    diagnostics,
  };
}

interface RunningAgent extends Spawned {
  stop(): Promise<void>;
}

/** A real agent process at its default log level (info), with a work folder of its own. */
async function spawnAgent(url: string, token: string, workDir: string): Promise<RunningAgent> {
  const env: Record<string, string | undefined> = { ...process.env };
  for (const key of Object.keys(env)) {
    if (key.startsWith('DECKHAND_') || key === 'DATABASE_URL' || key === 'LOG_LEVEL') delete env[key];
  }
  const proc = spawnNode(
    'agent/bin/deckhand-agent.js',
    ['--url', url, '--token', token, '--work-dir', workDir],
    env,
  );
  return {
    ...proc,
    async stop() {
      if (proc.child.exitCode === null && proc.child.signalCode === null) {
        proc.child.kill('SIGTERM');
        const timer = setTimeout(() => proc.child.kill('SIGKILL'), 5_000);
        await proc.exited;
        clearTimeout(timer);
      }
    },
  };
}
