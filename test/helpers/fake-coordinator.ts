// A stand-in for the coordinator's agent endpoint, for agent tests: a real WebSocket server on
// 127.0.0.1 at /agent/ws that checks the bearer token (HTTP 401 otherwise), records every frame
// the agent sends (decoded with the protocol's own decoder), answers hello with welcome (or a
// reject), pings like the coordinator, acknowledges output and job ends when asked to, and lets
// the test send frames and close connections.
// Also the real agent process and a real git remote (a bare repository) for those tests.
import { execFileSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import {
  type AgentMessage,
  type CoordinatorMessage,
  decodeAgentFrame,
  encodeFrame,
  type Hello,
  type JobAssign,
  PROTOCOL_VERSION,
  type StepOutput,
} from '@deckhand/protocol';
import { type WebSocket, WebSocketServer } from 'ws';
import { cleanEnv, type Spawned, spawnNode } from './processes.ts';

export interface FakeCoordinatorOptions {
  token: string;
  heartbeatMs?: number;
  /** Ping every heartbeatMs (as the coordinator does); off to test dead-connection detection. */
  ping?: boolean;
  /** Acknowledge output as it arrives (the contiguous prefix held, like the coordinator). */
  autoAck?: boolean;
  /** Answer each `job.finished` with `job.ack` (default: as autoAck). */
  ackJobs?: boolean;
  /** welcome.leaseMs / welcome.abandonAfterMs (defaults 30 s / 60 s). */
  leaseMs?: number;
  abandonAfterMs?: number;
  /** Sees every frame after it is recorded (and before any automatic answer): return 'drop' to terminate that connection instead of answering. */
  onFrame?: (message: AgentMessage, conn: number) => 'drop' | void;
  /** Answers a hello: `welcome` (default), or a reject with a reason and close code. */
  onHello?: (hello: Hello) => 'welcome' | { reject: string; code: number };
}

export interface Received {
  /** Which connection (0, 1, …) it came on. */
  conn: number;
  at: number;
  message: AgentMessage;
}

export interface Closed {
  conn: number;
  code: number;
  reason: string;
}

export class FakeCoordinator {
  readonly received: Received[] = [];
  readonly closes: Closed[] = [];
  readonly badFrames: string[] = [];
  /** HTTP statuses given to refused upgrades. */
  readonly refusedUpgrades: number[] = [];
  readonly #opts: FakeCoordinatorOptions;
  readonly #http: Server;
  readonly #wss = new WebSocketServer({ noServer: true });
  readonly #sockets: WebSocket[] = [];
  readonly #stored = new Map<string, number>();
  #refuseWith: number | undefined;
  #waiters: (() => void)[] = [];

  private constructor(opts: FakeCoordinatorOptions) {
    this.#opts = opts;
    this.#http = createServer((_req, res) => res.writeHead(404).end());
    this.#http.on('upgrade', (req, socket, head) => {
      const url = new URL(req.url ?? '/', 'http://x');
      const status =
        url.pathname !== '/agent/ws'
          ? 404
          : req.headers.authorization !== `Bearer ${opts.token}`
            ? 401
            : this.#refuseWith;
      if (status !== undefined) {
        this.refusedUpgrades.push(status);
        socket.end(`HTTP/1.1 ${status} Refused\r\nConnection: close\r\nContent-Length: 0\r\n\r\n`);
        return;
      }
      this.#wss.handleUpgrade(req, socket, head, (ws) => this.#onConnection(ws));
    });
  }

  static async start(opts: FakeCoordinatorOptions): Promise<FakeCoordinator> {
    const fake = new FakeCoordinator(opts);
    await new Promise<void>((resolve) => fake.#http.listen(0, '127.0.0.1', resolve));
    return fake;
  }

  get url(): string {
    return `http://127.0.0.1:${(this.#http.address() as AddressInfo).port}`;
  }

  get connections(): number {
    return this.#sockets.length;
  }

  /** Refuses upgrades with this HTTP status until `acceptUpgrades()` (a coordinator that is down). */
  refuseUpgrades(status = 503): void {
    this.#refuseWith = status;
  }

  acceptUpgrades(): void {
    this.#refuseWith = undefined;
  }

  /** Sends to the latest connection. */
  send(message: CoordinatorMessage): void {
    this.sendRaw(encodeFrame(message));
  }

  sendRaw(text: string | Buffer): void {
    const ws = this.#sockets.at(-1);
    if (!ws || ws.readyState !== ws.OPEN) throw new Error('no open agent connection');
    ws.send(text);
  }

  /** Closes the latest connection with a code. */
  closeConnection(code: number, reason = ''): void {
    this.#sockets.at(-1)?.close(code, reason);
  }

  messages<T extends AgentMessage['type']>(type: T, conn?: number): Extract<AgentMessage, { type: T }>[] {
    return this.received
      .filter((r) => r.message.type === type && (conn === undefined || r.conn === conn))
      .map((r) => r.message as Extract<AgentMessage, { type: T }>);
  }

  /** Resolves with the first received message matching, waiting for it if needed. */
  async waitFor<T extends AgentMessage['type']>(
    type: T,
    match: (m: Extract<AgentMessage, { type: T }>) => boolean = () => true,
    timeoutMs = 15_000,
  ): Promise<Extract<AgentMessage, { type: T }>> {
    let found: Extract<AgentMessage, { type: T }> | undefined;
    await this.until(
      () => {
        found = this.messages(type).find(match);
        return found !== undefined;
      },
      `${type} within ${timeoutMs} ms`,
      timeoutMs,
    );
    return found!;
  }

  /** Waits until `check()` holds, re-checking on every frame and close. */
  async until(check: () => boolean, what: string, timeoutMs = 15_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (!check()) {
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`timed out waiting for ${what}`);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, Math.min(left, 100));
        this.#waiters.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
  }

  /**
   * A step's output as received: the chunks put together by offset (duplicates must agree with
   * what is held; a gap throws).
   */
  output(jobId: string, step: number): Buffer {
    const chunks = this.messages('step.output').filter((m) => m.jobId === jobId && m.step === step);
    const parts: Buffer[] = [];
    let held = 0;
    for (const c of [...chunks].sort((a, b) => a.offset - b.offset)) {
      const bytes = c.data;
      if (c.offset > held) throw new Error(`gap in output of ${jobId}/${step} at ${held}`);
      const overlap = Math.min(held - c.offset, bytes.length);
      if (overlap > 0) {
        const mine = Buffer.concat(parts).subarray(c.offset, c.offset + overlap);
        if (!mine.equals(bytes.subarray(0, overlap)))
          throw new Error(`re-sent bytes differ at offset ${c.offset}`);
      }
      if (bytes.length > overlap) {
        parts.push(bytes.subarray(overlap));
        held += bytes.length - overlap;
      }
    }
    return Buffer.concat(parts, held);
  }

  /** Bytes of a step stored (the contiguous prefix received), as the coordinator would ack. */
  stored(jobId: string, step: number): number {
    return this.#stored.get(`${jobId}/${step}`) ?? 0;
  }

  /** Acknowledges everything stored so far, every step (on the latest connection). */
  ackStored(): void {
    for (const [key, offset] of this.#stored) {
      const [jobId, step] = key.split('/');
      this.send({ type: 'output.ack', jobId: jobId!, step: Number(step), offset });
    }
  }

  /** Terminates the latest connection without a close handshake (a dropped network). */
  dropConnection(): void {
    this.#sockets.at(-1)?.terminate();
  }

  async close(): Promise<void> {
    for (const ws of this.#sockets) ws.terminate();
    this.#wss.close();
    await new Promise<void>((resolve) => this.#http.close(() => resolve()));
  }

  #notify(): void {
    const waiters = this.#waiters;
    this.#waiters = [];
    for (const w of waiters) w();
  }

  #onConnection(ws: WebSocket): void {
    const conn = this.#sockets.length;
    this.#sockets.push(ws);
    let pinger: NodeJS.Timeout | undefined;
    ws.on('message', (data, isBinary) => {
      const decoded = decodeAgentFrame(data, isBinary);
      if (!decoded.ok) {
        this.badFrames.push(decoded.error);
        ws.close(decoded.code, decoded.error.slice(0, 100));
        return;
      }
      const message = decoded.message;
      this.received.push({ conn, at: Date.now(), message });
      if (message.type === 'step.output') this.#store(message);
      if (this.#opts.onFrame?.(message, conn) === 'drop') {
        ws.terminate();
        this.#notify();
        return;
      }
      if (message.type === 'hello') {
        const answer = this.#opts.onHello?.(message) ?? 'welcome';
        if (answer === 'welcome') {
          const heartbeatMs = this.#opts.heartbeatMs ?? 5_000;
          ws.send(
            encodeFrame({
              type: 'welcome',
              agentId: randomUUID(),
              agentName: 'test-agent',
              protocolVersion: PROTOCOL_VERSION,
              heartbeatMs,
              leaseMs: this.#opts.leaseMs ?? 30_000,
              abandonAfterMs: this.#opts.abandonAfterMs ?? 60_000,
            }),
          );
          if (this.#opts.ping !== false) pinger = setInterval(() => ws.ping(), heartbeatMs);
        } else {
          ws.send(encodeFrame({ type: 'reject', reason: answer.reject }));
          ws.close(answer.code, 'rejected');
        }
      } else if (message.type === 'job.finished' && (this.#opts.ackJobs ?? this.#opts.autoAck)) {
        ws.send(encodeFrame({ type: 'job.ack', jobId: message.jobId }));
      } else if (message.type === 'step.output' && this.#opts.autoAck) {
        ws.send(
          encodeFrame({
            type: 'output.ack',
            jobId: message.jobId,
            step: message.step,
            offset: this.#stored.get(`${message.jobId}/${message.step}`)!,
          }),
        );
      }
      this.#notify();
    });
    ws.on('close', (code, reason) => {
      clearInterval(pinger);
      this.closes.push({ conn, code, reason: reason.toString() });
      this.#notify();
    });
  }

  /** Keeps how many contiguous bytes of the step arrived (all an ack needs). */
  #store(m: StepOutput): void {
    const key = `${m.jobId}/${m.step}`;
    const held = this.#stored.get(key) ?? 0;
    const end = m.offset + m.data.length;
    this.#stored.set(key, m.offset <= held && end > held ? end : held);
  }
}

// ── The real agent process and a real git remote, for the tests that drive them ──

const GIT_ID = ['-c', 'user.name=t', '-c', 'user.email=t@example.com'];

function git(cwd: string, ...args: string[]): string {
  return execFileSync('git', args, { cwd, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] }).trim();
}

export interface TestRepo {
  /** The bare repository's path: what `repository.url` holds. */
  url: string;
  /** Commits these files (path → content) and pushes to main; returns the commit id. */
  commit(files: Record<string, string>, message?: string): string;
}

export function createRepo(root: string): TestRepo {
  const bare = path.join(root, 'remote.git');
  const work = path.join(root, 'work');
  mkdirSync(root, { recursive: true });
  git(root, 'init', '--bare', '-b', 'main', bare);
  git(root, 'clone', bare, work);
  return {
    url: bare,
    commit(files, message = 'change') {
      for (const [file, content] of Object.entries(files)) {
        mkdirSync(path.dirname(path.join(work, file)), { recursive: true });
        writeFileSync(path.join(work, file), content);
      }
      git(work, 'add', '-A');
      git(work, ...GIT_ID, 'commit', '-q', '-m', message);
      git(work, 'push', '-q', 'origin', 'HEAD:main');
      return git(work, 'rev-parse', 'HEAD');
    },
  };
}

export function headOf(dir: string): string {
  return git(dir, 'rev-parse', 'HEAD');
}

export function jobAssign(
  opts: {
    url: string;
    commit: string;
    commands: string[];
    project?: { id: string; name: string };
    env?: Record<string, string>;
    jobId?: string;
  } & Partial<
    Pick<JobAssign, 'deploymentId' | 'kind' | 'rollbackTo' | 'releases' | 'commandTimeoutMs' | 'masks'>
  >,
): JobAssign {
  return {
    type: 'job.assign',
    jobId: opts.jobId ?? randomUUID(),
    deploymentId: opts.deploymentId ?? randomUUID(),
    project: opts.project ?? { id: randomUUID(), name: 'web' },
    repository: { url: opts.url, branch: 'main', commit: opts.commit, sshKey: null, knownHosts: null },
    commands: opts.commands,
    env: opts.env ?? {},
    kind: opts.kind ?? 'deploy',
    rollbackTo: opts.rollbackTo ?? null,
    releases: opts.releases ?? null,
    commandTimeoutMs: opts.commandTimeoutMs ?? null,
    masks: opts.masks ?? [],
  };
}

export interface TestAgent extends Spawned {
  workDir: string;
  /** SIGTERM (a graceful stop), then SIGKILL if it lingers; resolves when it has exited. */
  stop(): Promise<void>;
}

export function startAgent(
  fake: FakeCoordinator,
  workDir: string,
  opts: { token?: string; args?: string[]; env?: Record<string, string> } = {},
): TestAgent {
  const args = [
    '--url',
    fake.url,
    '--token',
    opts.token ?? TEST_TOKEN,
    '--work-dir',
    workDir,
    '--kill-grace-ms',
    '500',
    ...(opts.args ?? []),
  ];
  const proc = spawnNode('agent/bin/deckhand-agent.js', args, cleanEnv({ LOG_LEVEL: 'debug', ...opts.env }));
  let exited = false;
  void proc.exited.then(() => (exited = true));
  return {
    ...proc,
    workDir,
    async stop() {
      if (exited) return;
      proc.child.kill('SIGTERM');
      const timer = setTimeout(() => proc.child.kill('SIGKILL'), 5_000);
      await proc.exited;
      clearTimeout(timer);
    },
  };
}

export const TEST_TOKEN = 'dha_test_token_0123456789';

/** Whether a process is alive (a zombie counts as gone: it is dead, only not yet reaped). */
export function processAlive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const state = stat.slice(stat.lastIndexOf(')') + 2).split(' ')[0];
    return state !== 'Z' && state !== 'X';
  } catch {
    return false;
  }
}
