// The fault tests' stage: a real coordinator (fresh database) with its admin, a real git
// repository, real `deckhand-agent` processes (directly or through a TCP proxy the test can cut),
// folders for the files commands write (their pids), and polling and event-stream reading.
// `faultHarness(env)` registers its hooks in the calling scope (file or describe): everything it
// started is stopped after each test (stray processes) and after all (agents, proxies, the
// coordinator, the repository, the folders).
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, expect } from 'vitest';
import { type RunningAgent, startAgent } from './agents.ts';
import { type Client, signUp, startCoordinator, type TestCoordinator } from './coordinator.ts';
import { killAlive, type ProcessInfo, processesUnder } from './fault-processes.ts';
import { createTestRepo, type TestRepo } from './git.ts';
import { startTcpProxy, type TcpProxy } from './tcp-proxy.ts';

export const FINAL_STATUSES = ['success', 'failed', 'cancelled', 'timed_out'];

/* eslint-disable @typescript-eslint/no-explicit-any -- the API's JSON answers */
export type Detail = any;
export type LogEntry = any;
/* eslint-enable @typescript-eslint/no-explicit-any */

export interface FaultAgent {
  name: string;
  token: string;
  agent: RunningAgent;
  /** The node process of the agent. */
  pid: number;
  /** Set when the agent reaches the coordinator through a proxy. */
  proxy?: TcpProxy;
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Polls `probe` until it returns something other than undefined/false; fails with `what` and `explain()`. */
export async function waitFor<T>(
  what: string,
  probe: () => Promise<T | undefined | false> | T | undefined | false,
  opts: { timeoutMs?: number; everyMs?: number; explain?: () => Promise<string> | string } = {},
): Promise<T> {
  const deadline = Date.now() + (opts.timeoutMs ?? 20_000);
  for (;;) {
    const value = await probe();
    if (value !== undefined && value !== false) return value;
    if (Date.now() > deadline) {
      throw new Error(`timed out waiting for ${what}${opts.explain ? `\n${await opts.explain()}` : ''}`);
    }
    await sleep(opts.everyMs ?? 50);
  }
}

export interface SseCapture {
  /** Resolves at the stream's end (the `end` event, or the server closing it). */
  done: Promise<{ raw: string; events: Array<{ id: string; event: string; data: unknown }> }>;
  close(): void;
}

/** Reads GET /deploy/:id/events as the admin, keeping the raw text and the parsed events. */
export function captureEvents(base: string, cookie: string, deployId: string): SseCapture {
  const abort = new AbortController();
  const done = (async () => {
    const res = await fetch(`${base}/deploy/${deployId}/events`, {
      headers: { cookie, accept: 'text/event-stream' },
      signal: abort.signal,
    });
    expect(res.status).toBe(200);
    const reader = res.body!.getReader();
    const decoder = new TextDecoder();
    let raw = '';
    let buffer = '';
    const events: Array<{ id: string; event: string; data: unknown }> = [];
    try {
      for (;;) {
        const { value, done: finished } = await reader.read();
        if (finished) break;
        const text = decoder.decode(value, { stream: true });
        raw += text;
        buffer += text;
        let end: number;
        let sawEnd = false;
        while ((end = buffer.indexOf('\n\n')) >= 0) {
          const block = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          const field = (name: string) =>
            block
              .split('\n')
              .find((l) => l.startsWith(`${name}: `))
              ?.slice(name.length + 2);
          const event = field('event');
          if (!event) continue;
          events.push({ id: field('id') ?? '', event, data: JSON.parse(field('data') ?? 'null') });
          if (event === 'end') sawEnd = true;
        }
        if (sawEnd) break;
      }
    } catch (err) {
      if (!abort.signal.aborted) throw err;
    } finally {
      abort.abort();
    }
    return { raw, events };
  })();
  // The caller awaits `done`; a rejection before that must not count as unhandled.
  done.catch(() => undefined);
  return { done, close: () => abort.abort() };
}

export interface FaultHarness {
  readonly coord: TestCoordinator;
  readonly admin: Client;
  readonly repo: TestRepo;
  /** Registers an agent (named `<prefix>-<n>`), starts it (through a new proxy if asked) and waits until it is online. */
  launchAgent(opts?: { viaProxy?: boolean; args?: string[]; prefix?: string }): Promise<FaultAgent>;
  /** Starts the agent again (same name and token; its old work folder unless told otherwise) after it died. */
  relaunchAgent(previous: FaultAgent, opts?: { args?: string[]; sameWorkDir?: boolean }): Promise<FaultAgent>;
  /** Creates a project (unique name) targeting `agent`; returns its id and name (its folder on the agent). */
  createProject(agent: FaultAgent, body: Record<string, unknown>): Promise<{ id: string; name: string }>;
  deploy(projectId: string): Promise<string>;
  detail(deployId: string): Promise<Detail>;
  /** Polls GET /deploy/:id until `predicate` holds; returns that detail. */
  waitForDetail(
    deployId: string,
    what: string,
    predicate: (d: Detail) => boolean,
    timeoutMs?: number,
  ): Promise<Detail>;
  waitForEnd(deployId: string, timeoutMs?: number): Promise<Detail>;
  /** A fresh temporary folder, removed after all. */
  tempDir(): Promise<string>;
  /** Whether the named agent is online (GET /agents). */
  online(name: string): Promise<boolean>;
  /** Every agent's output, for failure messages. */
  agentOutput(): string;
  /** Live processes working inside the agents' work folders or the temp folders (strays). */
  strays(): ProcessInfo[];
}

/** The stage for the file or describe that calls this: coordinator env as given. */
export function faultHarness(env: Record<string, string>): FaultHarness {
  let coord: TestCoordinator | undefined;
  let admin: Client | undefined;
  let repo: TestRepo | undefined;
  const agents: FaultAgent[] = [];
  const dirs: string[] = [];
  let counter = 0;

  const must = <T>(v: T | undefined, what: string): T => {
    if (v === undefined) throw new Error(`${what} is not ready (use it inside a test or hook)`);
    return v;
  };

  const h: FaultHarness = {
    get coord() {
      return must(coord, 'the coordinator');
    },
    get admin() {
      return must(admin, 'the admin');
    },
    get repo() {
      return must(repo, 'the repository');
    },

    async launchAgent(opts = {}) {
      const name = `${opts.prefix ?? 'fault'}-${++counter}`;
      const reg = await h.admin.post('/agents', { name, labels: ['fault'] });
      expect(reg.status, reg.text).toBe(201);
      const proxy = opts.viaProxy ? await startTcpProxy(Number(new URL(h.coord.url).port)) : undefined;
      const agent = await startAgent(proxy?.url ?? h.coord.url, reg.json.token as string, opts.args ?? []);
      const token = reg.json.token as string;
      const entry: FaultAgent = { name, token, agent, pid: agent.child.pid!, ...(proxy ? { proxy } : {}) };
      agents.push(entry);
      await waitFor(`agent ${name} online`, () => h.online(name), { explain: () => agent.output() });
      return entry;
    },

    async relaunchAgent(previous, opts = {}) {
      const args = [
        ...(opts.sameWorkDir === false ? [] : ['--work-dir', previous.agent.workDir]),
        ...(opts.args ?? []),
      ];
      // The later --work-dir wins over the fresh folder the helper names first.
      const agent = await startAgent(previous.proxy?.url ?? h.coord.url, previous.token, args);
      const entry: FaultAgent = { ...previous, agent, pid: agent.child.pid! };
      agents.push(entry);
      await waitFor(`agent ${previous.name} online again`, () => h.online(previous.name), {
        explain: () => agent.output(),
      });
      return entry;
    },

    async createProject(agent, body) {
      const name = `proj-${++counter}`;
      const res = await h.admin.post('/projects', {
        name,
        forge_url: h.repo.url,
        branch_name: 'main',
        target: { agents: { names: [agent.name] } },
        ...body,
      });
      expect(res.status, res.text).toBe(201);
      return { id: res.json.project.id as string, name };
    },

    async deploy(projectId) {
      const res = await h.admin.post('/deploy', { projectId });
      expect(res.status, res.text).toBe(200);
      return res.json.deployId as string;
    },

    async detail(deployId) {
      const res = await h.admin.get(`/deploy/${deployId}`);
      expect(res.status, res.text).toBe(200);
      return res.json;
    },

    async waitForDetail(deployId, what, predicate, timeoutMs = 20_000) {
      let last: Detail;
      return waitFor(
        what,
        async () => {
          last = await h.detail(deployId);
          return predicate(last) ? last : undefined;
        },
        {
          timeoutMs,
          explain: () =>
            `last answer: ${JSON.stringify(last).slice(0, 4000)}\n${h.agentOutput().slice(-8000)}`,
        },
      );
    },

    waitForEnd(deployId, timeoutMs = 30_000) {
      return h.waitForDetail(
        deployId,
        `deployment ${deployId} to end`,
        (d) => FINAL_STATUSES.includes(d.deployment.status),
        timeoutMs,
      );
    },

    async tempDir() {
      const dir = await mkdtemp(join(tmpdir(), 'deckhand-fault-'));
      dirs.push(dir);
      return dir;
    },

    async online(name) {
      const res = await h.admin.get('/agents');
      return Boolean(
        (res.json.agents as Array<{ name: string; online: boolean }>).find((a) => a.name === name)?.online,
      );
    },

    agentOutput() {
      return agents.map((a) => `--- ${a.name}\n${a.agent.output()}`).join('\n');
    },

    strays() {
      return processesUnder(...agents.map((a) => a.agent.workDir), ...dirs);
    },
  };

  beforeAll(async () => {
    coord = await startCoordinator({ SCHEDULER_INTERVAL_MS: '100', AGENT_HEARTBEAT_MS: '300', ...env });
    ({ client: admin } = await signUp(coord.url));
    repo = await createTestRepo();
    await repo.commit({ 'version.txt': 'v1\n' }, 'first');
  });

  // Whatever a test left running in our folders is killed, whether or not the test passed (each
  // test asserts on its own processes; this is only the safety net).
  afterEach(() => {
    killAlive(h.strays().map((p) => p.pid));
  });

  afterAll(async () => {
    await Promise.all(
      agents.map(async (a) => {
        killAlive(processesUnder(a.agent.workDir).map((p) => p.pid));
        await a.agent.stop();
        await a.proxy?.close();
      }),
    );
    killAlive(processesUnder(...dirs).map((p) => p.pid));
    await coord?.close();
    await repo?.remove();
    await Promise.all(dirs.map((d) => rm(d, { recursive: true, force: true })));
  }, 60_000);

  return h;
}

/** The entries of `host` (every entry when omitted), in step order. */
export function entriesOf(detail: Detail, host?: string): LogEntry[] {
  return (detail.logs as LogEntry[]).filter((l) => host === undefined || l.host === host);
}

/** The entry whose command is `cmd`. */
export function entryFor(detail: Detail, cmd: string): LogEntry {
  const found = (detail.logs as LogEntry[]).find((l) => l.cmd === cmd);
  if (!found)
    throw new Error(`no entry for ${cmd} in ${JSON.stringify(detail.logs.map((l: LogEntry) => l.cmd))}`);
  return found;
}

/** `<word> 1\n<word> 2\n…<word> n\n`, as `steadyPrinter` prints it. */
export function numberedLines(n: number, word = 'line'): string {
  const parts: string[] = [];
  for (let i = 1; i <= n; i++) parts.push(`${word} ${i}\n`);
  return parts.join('');
}

/** A command that writes its pid (its process group) to `pidFile`, then prints `<word> i` steadily (~100 lines a second). */
export function steadyPrinter(pidFile: string, n: number, word = 'line'): string {
  return `echo $$ > ${pidFile}; for i in $(seq 1 ${n}); do echo "${word} $i"; sleep 0.01; done`;
}

/** `seq 1 n` as printed: one number per line. */
export function seqOutput(n: number, from = 1): string {
  const parts: string[] = [];
  for (let i = from; i <= n; i++) parts.push(`${i}\n`);
  return parts.join('');
}

/**
 * `actual` equals `expected` (strings, or bytes), failing with where they first differ and a
 * short window around it instead of megabytes of diff.
 */
export function expectSame(
  actual: string | Buffer | undefined,
  expected: string | Buffer,
  label: string,
): void {
  if (actual === undefined) {
    expect.fail(
      `${label}: nothing there (expected ${expected.length} ${typeof expected === 'string' ? 'characters' : 'bytes'})`,
    );
  }
  const same =
    typeof actual === 'string' ? actual === expected : Buffer.isBuffer(expected) && actual.equals(expected);
  if (same) return;
  const a = typeof actual === 'string' ? actual : actual.toString('latin1');
  const e = typeof expected === 'string' ? expected : expected.toString('latin1');
  let at = 0;
  while (at < a.length && at < e.length && a[at] === e[at]) at++;
  const window = (s: string) => JSON.stringify(s.slice(Math.max(0, at - 24), at + 24));
  expect.fail(
    `${label}: differs at ${at} (length ${a.length}, expected ${e.length}): got …${window(a)}…, expected …${window(e)}…`,
  );
}
