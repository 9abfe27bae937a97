// Shared pieces of the coordinator fault-injection suites (test/fault/coordinator-*.test.ts): an
// admin session that registers agents and projects and waits for deployments to end, a command
// whose exact output is known in advance, a raw WebSocket "agent" that speaks the protocol frame
// by frame (to send what a real agent never would), and the stored bytes of a log entry read
// straight from PostgreSQL.
import type { ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import {
  type AgentMessage,
  type CoordinatorMessage,
  decodeCoordinatorFrame,
  encodeFrame,
  type Hello,
  PROTOCOL_VERSION,
} from '@deckhand/protocol';
import { afterAll, beforeAll, expect } from 'vitest';
import WebSocket from 'ws';
import { type RunningAgent, startAgent } from './agents.ts';
import { type Client, signUp } from './coordinator.ts';
import { connectPg, createTestDatabase, type TestDatabase } from './database.ts';
import { createTestRepo, type TestRepo } from './git.ts';
import { type CoordinatorProcess, startCoordinatorProcess } from './processes.ts';
import { ENTRY_OUTPUT } from './sql.ts';

export const FINAL_DEPLOYMENT_STATES = ['success', 'failed', 'cancelled', 'timed_out'];

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** Polls `read` until `ok` holds (returning that value) or throws with `describe()` after `ms`. */
export async function waitFor<T>(
  read: () => Promise<T>,
  ok: (value: T) => boolean,
  ms: number,
  describe: (last: T | undefined) => string = (last) => JSON.stringify(last),
  everyMs = 50,
): Promise<T> {
  const deadline = Date.now() + ms;
  let last: T | undefined;
  for (;;) {
    try {
      last = await read();
      if (ok(last)) return last;
    } catch (err) {
      if (Date.now() >= deadline) throw err;
    }
    if (Date.now() >= deadline) throw new Error(`condition not met within ${ms} ms: ${describe(last)}`);
    await sleep(everyMs);
  }
}

/**
 * A command printing `count` numbered lines, one every `intervalMs`, and exactly what it prints.
 * Every line differs, so a lost, repeated or reordered line changes the stored bytes.
 */
export function numberedLines(count: number, intervalMs = 50): { cmd: string; expected: string } {
  const seconds = (intervalMs / 1000).toFixed(3);
  const cmd = `for i in $(seq 1 ${count}); do printf 'line %04d of ${count}\\n' "$i"; sleep ${seconds}; done`;
  let expected = '';
  for (let i = 1; i <= count; i++) expected += `line ${String(i).padStart(4, '0')} of ${count}\n`;
  return { cmd, expected };
}

export interface LogJson {
  id: string;
  seq?: number;
  host: string;
  cmd: string;
  log: string;
  status: string;
  success: boolean;
}

export interface DeploymentJson {
  deployment: { id: string; status: string; reason: string | null; hosts: string[] };
  logs: LogJson[];
}

/** The first account of a coordinator (its admin) and what the suites do with it. */
export class Admin {
  readonly client: Client;
  readonly url: string;
  /** Extra text for failure messages (agent and coordinator output). */
  diagnostics: () => string = () => '';

  constructor(client: Client, url: string) {
    this.client = client;
    this.url = url;
  }

  static async signUp(url: string): Promise<Admin> {
    const { client } = await signUp(url);
    return new Admin(client, url);
  }

  /** POST /agents: the new agent's id and its one-time token. */
  async registerAgent(name: string, labels: string[]): Promise<{ id: string; token: string }> {
    const res = await this.client.post('/agents', { name, labels });
    expect(res.status, `${res.text}\n${this.diagnostics()}`).toBe(201);
    return { id: res.json.agent.id as string, token: res.json.token as string };
  }

  async createProject(body: Record<string, unknown>): Promise<string> {
    const res = await this.client.post('/projects', { branch_name: 'main', ...body });
    expect(res.status, res.text).toBe(201);
    return res.json.project.id as string;
  }

  async deploy(projectId: string): Promise<string> {
    const res = await this.client.post('/deploy', { projectId });
    expect(res.status, res.text).toBe(200);
    return res.json.deployId as string;
  }

  async detail(deployId: string): Promise<DeploymentJson> {
    const res = await this.client.get(`/deploy/${deployId}`);
    if (res.status !== 200) throw new Error(`GET /deploy/${deployId}: ${res.status} ${res.text}`);
    return res.json as DeploymentJson;
  }

  async waitForOnline(names: string[], ms = 20_000): Promise<void> {
    await waitFor(
      async () => {
        const res = await this.client.get('/agents');
        if (res.status !== 200) return [] as string[];
        return (res.json.agents as Array<{ name: string; online: boolean }>)
          .filter((a) => a.online)
          .map((a) => a.name);
      },
      (online) => names.every((n) => online.includes(n)),
      ms,
      (online) =>
        `agents online: ${JSON.stringify(online)}, wanted ${names.join(', ')}\n${this.diagnostics()}`,
      100,
    );
  }

  /** Waits until the deployment has ended; its detail. */
  async waitForEnd(deployId: string, ms = 30_000): Promise<DeploymentJson> {
    return waitFor(
      () => this.detail(deployId),
      (d) => FINAL_DEPLOYMENT_STATES.includes(d.deployment.status),
      ms,
      (d) => `deployment did not end: ${JSON.stringify(d)}\n${this.diagnostics()}`,
      100,
    );
  }

  /** Waits until the deployment's entry for `cmd` has printed something (its command is running). */
  async waitForOutput(deployId: string, cmd: string, ms = 20_000): Promise<void> {
    await waitFor(
      () => this.detail(deployId),
      (d) => d.logs.some((l) => l.cmd === cmd && l.log.length > 0),
      ms,
      (d) => `no output of ${cmd} yet: ${JSON.stringify(d)}\n${this.diagnostics()}`,
      50,
    );
  }
}

/** The stored bytes of a deployment's log entries for `cmd`, straight from PostgreSQL (one row per entry). */
export async function storedEntries(
  databaseUrl: string,
  deployId: string,
  cmd: string,
): Promise<Array<{ host: string; status: string; output: Buffer; output_bytes: string; chunks: number }>> {
  const client = await connectPg(databaseUrl);
  try {
    const { rows } = await client.query(
      `select e.host, e.status, ${ENTRY_OUTPUT} as output, e.output_bytes,
              (select count(*)::int from log_chunks c where c.log_entry_id = e.id) as chunks
         from log_entries e where e.deployment_id = $1 and e.cmd = $2 order by e.host`,
      [deployId, cmd],
    );
    return rows as Array<{
      host: string;
      status: string;
      output: Buffer;
      output_bytes: string;
      chunks: number;
    }>;
  } finally {
    await client.end();
  }
}

/** Checks the one entry of `cmd` is complete and holds exactly `expected`, in the database and in the API. */
export async function expectExactLog(
  databaseUrl: string,
  detail: DeploymentJson,
  cmd: string,
  expected: string,
): Promise<void> {
  const entries = await storedEntries(databaseUrl, detail.deployment.id, cmd);
  expect(entries).toHaveLength(1);
  const [entry] = entries;
  expect(entry!.status).toBe('success');
  const stored = entry!.output;
  expect(Number(entry!.output_bytes)).toBe(stored.length);
  if (!stored.equals(Buffer.from(expected))) {
    // A readable diff of the lines, not two blobs.
    expect(stored.toString('utf8').split('\n')).toEqual(expected.split('\n'));
  }
  expect(stored.equals(Buffer.from(expected))).toBe(true);
  const logs = detail.logs.filter((l) => l.cmd === cmd);
  expect(logs).toHaveLength(1);
  expect(logs[0]!.log).toBe(expected);
}

/** Output of processes for failure messages, the tail of each. */
export function tails(...procs: Array<{ output(): string } | undefined>): string {
  return procs
    .filter((p) => p !== undefined)
    .map((p) => p.output().slice(-6_000))
    .join('\n-----\n');
}

export interface Closed {
  code: number;
  reason: string;
}

/**
 * A raw agent connection: the test sends frames of its choosing and reads every frame and the
 * close code. Pings are answered by `ws` itself (as the real agent's library does).
 */
export class RawAgent {
  readonly ws: WebSocket;
  readonly received: CoordinatorMessage[] = [];
  /** Frames from the coordinator that did not decode (there should be none). */
  readonly undecodable: string[] = [];
  readonly opened: Promise<void>;
  readonly closed: Promise<Closed>;
  /** The HTTP status of a refused upgrade, if it was refused. */
  refusedStatus: number | undefined;
  #waiters: Array<() => void> = [];

  constructor(baseUrl: string, token: string) {
    const url = `${baseUrl.replace(/^http/, 'ws')}/agent/ws`;
    this.ws = new WebSocket(url, { headers: { Authorization: `Bearer ${token}` }, maxPayload: 0 });
    this.opened = new Promise((resolve, reject) => {
      this.ws.once('open', () => resolve());
      this.ws.once('close', () => reject(new Error(`closed before it opened (${this.refusedStatus})`)));
    });
    this.opened.catch(() => undefined);
    this.ws.on('unexpected-response', (_req, res) => {
      this.refusedStatus = res.statusCode;
      res.resume();
      this.ws.terminate();
    });
    this.ws.on('error', () => undefined);
    this.ws.on('message', (data, isBinary) => {
      const decoded = decodeCoordinatorFrame(isBinary ? null : data);
      if (decoded.ok) this.received.push(decoded.message);
      else this.undecodable.push(String(data));
      for (const wake of this.#waiters.splice(0)) wake();
    });
    this.closed = new Promise((resolve) => {
      this.ws.once('close', (code, reason) => {
        resolve({ code, reason: reason.toString('utf8') });
        for (const wake of this.#waiters.splice(0)) wake();
      });
    });
  }

  get isOpen(): boolean {
    return this.ws.readyState === WebSocket.OPEN;
  }

  send(message: AgentMessage | Record<string, unknown>): void {
    this.ws.send(encodeFrame(message as AgentMessage));
  }

  sendRaw(data: string | Buffer, binary = false): void {
    this.ws.send(data, { binary });
  }

  hello(runningJobs: Hello['runningJobs'] = [], overrides: Partial<Hello> = {}): void {
    this.send({
      type: 'hello',
      protocolVersion: PROTOCOL_VERSION,
      agentVersion: 'raw-test',
      hostname: hostname(),
      labels: [],
      runningJobs,
      ...overrides,
    } satisfies Hello);
  }

  /** The next received message (at or after index `from`) matching `match`. */
  async next<T extends CoordinatorMessage['type']>(
    type: T,
    match: (m: Extract<CoordinatorMessage, { type: T }>) => boolean = () => true,
    ms = 10_000,
    from = 0,
  ): Promise<Extract<CoordinatorMessage, { type: T }>> {
    const deadline = Date.now() + ms;
    for (;;) {
      const found = this.received
        .slice(from)
        .find((m): m is Extract<CoordinatorMessage, { type: T }> => m.type === type && match(m as never));
      if (found) return found;
      if (Date.now() >= deadline || this.ws.readyState === WebSocket.CLOSED) {
        throw new Error(
          `no ${type} within ${ms} ms (socket state ${this.ws.readyState}); got ${JSON.stringify(this.received.map((m) => m.type))}`,
        );
      }
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, Math.max(1, deadline - Date.now()));
        this.#waiters.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
  }

  /** Connects, says hello and waits for welcome. */
  static async welcomed(baseUrl: string, token: string, runningJobs: Hello['runningJobs'] = []) {
    const agent = new RawAgent(baseUrl, token);
    await agent.opened;
    agent.hello(runningJobs);
    await agent.next('welcome');
    return agent;
  }

  close(): void {
    if (this.ws.readyState === WebSocket.OPEN || this.ws.readyState === WebSocket.CONNECTING) {
      this.ws.terminate();
    }
  }
}

/** The JSON log lines (pino) a process printed with message `msg`. */
export function logLines(
  proc: { output(): string },
  msg: string,
): Array<Record<string, unknown> & { time: number }> {
  const lines: Array<Record<string, unknown> & { time: number }> = [];
  for (const line of proc.output().split('\n')) {
    if (!line.startsWith('{')) continue;
    try {
      const parsed = JSON.parse(line) as Record<string, unknown> & { time: number };
      if (parsed.msg === msg) lines.push(parsed);
    } catch {
      // not a log line
    }
  }
  return lines;
}

// Children still running when this test process exits (a crash, a timeout that skipped the
// hooks) are killed with it, so that no coordinator or agent outlives its test file.
const children = new Set<ChildProcess>();
process.once('exit', () => {
  for (const child of children)
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
});

/** Kills `child` when this test process exits, if it is still running then. */
export function killOnExit(child: ChildProcess): void {
  children.add(child);
  child.once('exit', () => children.delete(child));
}

/** Kills a coordinator process (also each one after a restart) when this test process exits. */
export function guardCoordinator<T extends { proc: { child: ChildProcess }; restart(): Promise<void> }>(
  handle: T,
): T {
  killOnExit(handle.proc.child);
  const restart = handle.restart.bind(handle);
  handle.restart = async () => {
    const started = restart();
    // restart() replaces `proc` synchronously, before it waits for readiness.
    killOnExit(handle.proc.child);
    await started;
  };
  return handle;
}

/** startCoordinatorProcess, killed with this test process if still running then. */
export async function launchCoordinator(env: Record<string, string>): Promise<CoordinatorProcess> {
  return guardCoordinator(await startCoordinatorProcess(env));
}

/** startAgent, killed with this test process if still running then. */
export async function launchAgent(
  url: string,
  token: string,
  extraArgs: string[] = [],
): Promise<RunningAgent> {
  const agent = await startAgent(url, token, extraArgs);
  killOnExit(agent.child);
  return agent;
}

/** Stops agents, ignoring ones that already exited. */
export async function stopAll(agents: RunningAgent[]): Promise<void> {
  await Promise.allSettled(agents.map((a) => a.stop()));
}

export interface CoordinatorCluster {
  readonly db: TestDatabase;
  /** The processes, in the order started (all on `db`, with one root secret). */
  readonly processes: CoordinatorProcess[];
  /** Raw agents the tests open: closed before the processes stop. */
  readonly raws: RawAgent[];
  /** Real agents the tests start: stopped before the processes stop. */
  readonly agents: RunningAgent[];
}

/**
 * `count` coordinator processes on one fresh database, sharing a root secret (as README says for
 * replicas), for the file or describe that calls this (beforeAll/afterAll). Raw and real agents
 * pushed onto `raws`/`agents` go first at the end, and the processes get a moment to record them.
 */
export function coordinatorCluster(count: number, env: Record<string, string>): CoordinatorCluster {
  let db: TestDatabase | undefined;
  const processes: CoordinatorProcess[] = [];
  const raws: RawAgent[] = [];
  const agents: RunningAgent[] = [];
  beforeAll(async () => {
    db = await createTestDatabase();
    const shared = { DATABASE_URL: db.url, DECKHAND_SECRET: randomBytes(32).toString('base64url'), ...env };
    for (let i = 0; i < count; i++) processes.push(await launchCoordinator(shared));
  }, 90_000);
  afterAll(async () => {
    for (const raw of raws) raw.close();
    await stopAll(agents);
    // Let the processes record those disconnects before they stop (see coordinator-shutdown.test.ts).
    await sleep(500);
    await Promise.allSettled(processes.map((p) => p.stop()));
    await db?.drop();
  }, 60_000);
  return {
    get db() {
      if (!db) throw new Error('the cluster is not started yet (use it inside a test or hook)');
      return db;
    },
    processes,
    raws,
    agents,
  };
}

export interface FaultCoordinator {
  readonly db: TestDatabase;
  /** The coordinator process (on `db`); its `restart()` brings it back on the same port. */
  readonly coordinator: CoordinatorProcess;
  /** The first account, signed up on it; failure messages carry the processes' log tails. */
  readonly admin: Admin;
  /** A repository with one commit (`app.txt`). */
  readonly repo: TestRepo;
  /** Raw agents the tests open: closed before the coordinator stops. */
  readonly raws: RawAgent[];
  /** Real agents the tests start: stopped before the coordinator stops. */
  readonly agents: RunningAgent[];
}

/**
 * One coordinator process on a fresh database, an admin and a repository, for the file or
 * describe that calls this (beforeAll/afterAll) — the single-process counterpart of
 * `coordinatorCluster`. `env` comes on top of the database and a fresh root secret.
 */
export function faultCoordinator(env: Record<string, string>): FaultCoordinator {
  let started: Omit<FaultCoordinator, 'raws' | 'agents'> | undefined;
  const raws: RawAgent[] = [];
  const agents: RunningAgent[] = [];
  beforeAll(async () => {
    const db = await createTestDatabase();
    const coordinator = await launchCoordinator({
      DATABASE_URL: db.url,
      DECKHAND_SECRET: randomBytes(32).toString('base64url'),
      ...env,
    });
    const admin = await Admin.signUp(coordinator.url);
    admin.diagnostics = () => tails(coordinator.proc, ...agents);
    const repo = await createTestRepo();
    await repo.commit({ 'app.txt': 'v1\n' }, 'first');
    started = { db, coordinator, admin, repo };
  }, 90_000);
  afterAll(async () => {
    for (const raw of raws) raw.close();
    await stopAll(agents);
    // Let the coordinator record those disconnects before it stops (see coordinator-shutdown.test.ts).
    await sleep(500);
    await started?.coordinator.stop();
    await started?.db.drop();
    await started?.repo.remove();
  }, 60_000);
  const get = () => {
    if (!started) throw new Error('the coordinator is not started yet (use it inside a test or hook)');
    return started;
  };
  return {
    get db() {
      return get().db;
    },
    get coordinator() {
      return get().coordinator;
    },
    get admin() {
      return get().admin;
    },
    get repo() {
      return get().repo;
    },
    raws,
    agents,
  };
}
