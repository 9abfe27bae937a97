// Agent self-update, for real: the one-file agent (built here with scripts/build-agent.ts, its
// version patched to make it older or newer) runs as its own process. Against a real coordinator,
// an older agent is offered the served one in its welcome, downloads it, checks it, replaces its
// own file and starts again — online with the new version. Against a small stand-in coordinator
// that says what the test wants: an offer of an older version, a file that is not the version
// offered, and one whose SHA-256 differs are all refused (the file stays, the agent keeps
// running); a good offer waits until the running job has finished and been acknowledged.
import { type ChildProcess, spawn } from 'node:child_process';
import { createHash, randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  type AgentMessage,
  decodeAgentFrame,
  encodeFrame,
  PROTOCOL_VERSION,
  type Welcome,
} from '@deckhand/protocol';
import { type WebSocket, WebSocketServer } from 'ws';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildAgentBundle } from '../../scripts/build-agent.ts';
import { AgentBundle } from '../../coordinator/src/modules/agent-bundle/agent-bundle.ts';
import { signUp, startCoordinator, type TestCoordinator } from '../helpers/coordinator.ts';
import { createRepo, jobAssign, processAlive } from '../helpers/fake-coordinator.ts';
import { cleanEnv } from '../helpers/processes.ts';

let tmp: string;
/** The agent as built from this checkout. */
let built: Buffer;
/** Processes to stop afterwards: pids, or folders whose agent.pid names one. */
const pids: number[] = [];
const pidDirs: string[] = [];

/** The bundle with another version in its banner and in the version it reports. */
function withVersion(code: Buffer, version: string): Buffer {
  const text = code
    .toString('utf8')
    .replace(/^\/\/ deckhand-agent \S+:/m, `// deckhand-agent ${version}:`)
    .replace(/\{ "version": "[^"]+" \}\.version/, `{ "version": ${JSON.stringify(version)} }.version`);
  expect(text).toContain(`{ "version": ${JSON.stringify(version)} }.version`);
  return Buffer.from(text);
}

const sha256 = (b: Buffer) => createHash('sha256').update(b).digest('hex');

interface RunningBundle {
  child: ChildProcess;
  dir: string;
  file: string;
  output(): string;
  exited: Promise<number | null>;
}

/** Runs `code` as <dir>/deckhand-agent.js from <dir>, its pid in <dir>/agent.pid (as the nohup install does). */
async function runBundle(code: Buffer, url: string, token: string, name: string): Promise<RunningBundle> {
  const dir = join(tmp, name);
  await mkdir(dir, { recursive: true });
  const file = join(dir, 'deckhand-agent.js');
  await writeFile(file, code, { mode: 0o755 });
  const env = cleanEnv({ LOG_LEVEL: 'debug' });
  delete env.INVOCATION_ID;
  const child = spawn(
    process.execPath,
    [file, '--url', url, '--token', token, '--work-dir', join(dir, 'work'), '--kill-grace-ms', '500'],
    { cwd: dir, env: env as NodeJS.ProcessEnv, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  await writeFile(join(dir, 'agent.pid'), `${child.pid}\n`);
  pidDirs.push(dir);
  pids.push(child.pid!);
  let out = '';
  child.stdout!.on('data', (d) => (out += d));
  child.stderr!.on('data', (d) => (out += d));
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  return { child, dir, file, output: () => out, exited };
}

async function until(check: () => boolean | Promise<boolean>, what: string, timeoutMs = 30_000) {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

beforeAll(async () => {
  tmp = await mkdtemp(join(tmpdir(), 'deckhand-self-update-'));
  const b = await buildAgentBundle(join(tmp, 'built', 'deckhand-agent.js'));
  built = readFileSync(b.file);
}, 120_000);

afterAll(async () => {
  for (const dir of pidDirs) {
    try {
      pids.push(Number(readFileSync(join(dir, 'agent.pid'), 'utf8').trim()));
    } catch {
      // none
    }
  }
  for (const pid of pids) {
    try {
      process.kill(pid, 'SIGTERM');
    } catch {
      // already gone
    }
  }
  await new Promise((r) => setTimeout(r, 500));
  await rm(tmp, { recursive: true, force: true });
});

describe('against a real coordinator', () => {
  let coordinator: TestCoordinator;
  beforeAll(async () => {
    coordinator = await startCoordinator({ AGENT_HEARTBEAT_MS: '1000' });
  });
  afterAll(async () => {
    await coordinator?.close();
  });

  it('an older agent updates itself to the served one and comes back online with it', async () => {
    const served = await new AgentBundle().get();
    const { client: admin } = await signUp(coordinator.url);
    const created = await admin.post('/agents', { name: 'self-updating' });
    expect(created.status).toBe(201);
    const old = await runBundle(withVersion(built, '0.0.9'), coordinator.url, created.json.token, 'real');

    const agent = async () =>
      (
        (await admin.get('/agents')).json.agents as Array<{ name: string; online: boolean; version: string }>
      ).find((a) => a.name === 'self-updating');
    await until(async () => {
      const a = await agent();
      return a?.online === true && a.version === served.version;
    }, `the agent online with ${served.version}\n${old.output()}`);
    // The old process handed over and exited; the file is the served one; a new process runs it.
    expect(await old.exited).toBe(0);
    expect(old.output()).toContain('agent updated; restarting with the new version');
    expect(readFileSync(old.file).equals(served.code)).toBe(true);
    const newPid = Number(readFileSync(join(old.dir, 'agent.pid'), 'utf8').trim());
    expect(newPid).not.toBe(old.child.pid);
    expect(processAlive(newPid)).toBe(true);
    // The served version is not offered again: the new process stays.
    await new Promise((r) => setTimeout(r, 1500));
    expect(processAlive(newPid)).toBe(true);
    expect((await agent())?.online).toBe(true);
  });
});

/** A stand-in coordinator: welcomes with whatever `offer()` says, serves `download`, acknowledges everything. */
class StandIn {
  readonly received: Array<{ conn: number; message: AgentMessage }> = [];
  download: Buffer = Buffer.alloc(0);
  downloads = 0;
  offer: (conn: number) => Welcome['update'] = () => undefined;
  readonly #http: Server;
  readonly #wss = new WebSocketServer({ noServer: true });
  readonly #sockets: WebSocket[] = [];

  constructor() {
    this.#http = createServer((req, res) => {
      if (req.url === '/agent/download') {
        this.downloads++;
        res.writeHead(200, { 'content-type': 'text/javascript' }).end(this.download);
      } else res.writeHead(404).end();
    });
    this.#http.on('upgrade', (req, socket, head) =>
      this.#wss.handleUpgrade(req, socket, head, (ws) => this.#connected(ws)),
    );
  }

  async listen(): Promise<string> {
    await new Promise<void>((r) => this.#http.listen(0, '127.0.0.1', r));
    return `http://127.0.0.1:${(this.#http.address() as AddressInfo).port}`;
  }

  send(message: Parameters<typeof encodeFrame>[0]): void {
    this.#sockets.at(-1)!.send(encodeFrame(message));
  }

  drop(): void {
    this.#sockets.at(-1)?.terminate();
  }

  hellos(): Array<{ conn: number; version: string }> {
    return this.received
      .filter((r) => r.message.type === 'hello')
      .map((r) => ({ conn: r.conn, version: (r.message as { agentVersion: string }).agentVersion }));
  }

  async close(): Promise<void> {
    for (const ws of this.#sockets) ws.terminate();
    this.#wss.close();
    await new Promise<void>((r) => this.#http.close(() => r()));
  }

  #connected(ws: WebSocket): void {
    const conn = this.#sockets.length;
    this.#sockets.push(ws);
    const stored = new Map<string, number>();
    ws.on('message', (data, isBinary) => {
      const decoded = decodeAgentFrame(data, isBinary);
      if (!decoded.ok) return;
      const m = decoded.message;
      this.received.push({ conn, message: m });
      if (m.type === 'hello') {
        const update = this.offer(conn);
        ws.send(
          encodeFrame({
            type: 'welcome',
            agentId: randomUUID(),
            agentName: 'stand-in',
            protocolVersion: PROTOCOL_VERSION,
            heartbeatMs: 5_000,
            leaseMs: 30_000,
            abandonAfterMs: 60_000,
            ...(update ? { update } : {}),
          }),
        );
      } else if (m.type === 'step.output') {
        const key = `${m.jobId}/${m.step}`;
        stored.set(key, Math.max(stored.get(key) ?? 0, m.offset + m.data.length));
        ws.send(encodeFrame({ type: 'output.ack', jobId: m.jobId, step: m.step, offset: stored.get(key)! }));
      } else if (m.type === 'job.finished') {
        ws.send(encodeFrame({ type: 'job.ack', jobId: m.jobId }));
      }
    });
  }
}

describe('against a stand-in coordinator', () => {
  let standIn: StandIn;
  let url: string;
  beforeAll(async () => {
    standIn = new StandIn();
    url = await standIn.listen();
  });
  afterAll(async () => {
    await standIn?.close();
  });

  it('refuses an older version, a file that is not the version offered, and a wrong SHA-256', async () => {
    const older = withVersion(built, '0.0.5');
    const offers: Array<Welcome['update']> = [
      { version: '0.0.5', sha256: sha256(older) },
      // Offered as newer, but the file says 0.0.5.
      { version: '99.0.0', sha256: sha256(older) },
      { version: '99.0.0', sha256: 'f'.repeat(64) },
    ];
    standIn.download = older;
    standIn.offer = (conn) => offers[conn];
    const agent = await runBundle(built, url, 'dha_stand_in_token', 'refusing');
    await until(() => agent.output().includes('refusing the offered agent'), 'the refusal of 0.0.5');
    expect(standIn.downloads).toBe(0);

    standIn.drop();
    await until(
      () => agent.output().includes('not the 99.0.0 offered'),
      `the refusal of a mislabelled file\n${agent.output()}`,
    );
    standIn.drop();
    await until(
      () => agent.output().includes(`not the ${'f'.repeat(64)} the coordinator named`),
      'the SHA check',
    );
    expect(standIn.downloads).toBe(2);
    // Still the same file and the same process, connected.
    expect(readFileSync(agent.file).equals(built)).toBe(true);
    expect(agent.child.exitCode).toBe(null);
    expect(agent.output()).not.toContain('agent updated');
    await until(() => standIn.hellos().length === 4, 'a fourth connection');
    standIn.drop();
    agent.child.kill('SIGTERM');
    await agent.exited;
  });

  it('installs a good offer only once the running job has finished and been acknowledged', async () => {
    const before = standIn.received.length;
    const newer = withVersion(built, '99.1.0');
    standIn.download = newer;
    const repo = createRepo(join(tmp, 'repo'));
    const commit = repo.commit({ 'app.txt': 'hello\n' });
    let offerFrom = Infinity;
    standIn.offer = (conn) => (conn >= offerFrom ? { version: '99.1.0', sha256: sha256(newer) } : undefined);
    const agent = await runBundle(built, url, 'dha_stand_in_token', 'waiting');
    await until(() => standIn.received.length > before, 'the hello');
    const first = standIn.hellos().at(-1)!;
    const job = jobAssign({ url: repo.url, commit, commands: ['sleep 2', 'echo done'] });
    standIn.send(job);
    await until(
      () => standIn.received.some((r) => r.message.type === 'step.started' && r.message.step === 1),
      'the job running',
    );
    // The next connection is offered 99.1.0 while the job runs.
    offerFrom = first.conn + 1;
    standIn.drop();
    await until(() => agent.output().includes('waiting for the running jobs to finish'), 'the wait');
    expect(agent.child.exitCode).toBe(null);
    await until(() => standIn.hellos().some((h) => h.version === '99.1.0'), 'the new version connecting');
    const finishedAt = standIn.received.findIndex(
      (r) => r.message.type === 'job.finished' && r.message.jobId === job.jobId,
    );
    const newHelloAt = standIn.received.findIndex(
      (r) => r.message.type === 'hello' && r.message.agentVersion === '99.1.0',
    );
    expect(finishedAt).toBeGreaterThan(-1);
    expect(finishedAt).toBeLessThan(newHelloAt);
    expect(
      standIn.received.find((r) => r.message.type === 'job.finished' && r.message.jobId === job.jobId)!
        .message,
    ).toMatchObject({ status: 'success' });
    expect(await agent.exited).toBe(0);
    expect(readFileSync(agent.file).equals(newer)).toBe(true);
  });
});
