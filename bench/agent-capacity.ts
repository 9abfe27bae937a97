// agent-capacity: thousands of idle agents on one coordinator — memory per agent, event-loop delay
// and CPU while they idle, and how long all of them take to be back after a restart — against a
// bare `ws` server with the same handshake and heartbeat.
//
// Both servers run as processes of their own, with lib/loop-probe.ts preloaded (`--import`), which
// measures them from inside the same way (event-loop delay histogram, utilisation, CPU, memory
// after a full GC), with their open-file limit raised to the hard limit. Product: the real
// coordinator (`node coordinator/src/server.ts`) on a fresh database with BENCH_CAPACITY_AGENTS
// (2000) agents registered through the API. Baseline: lib/bare-agent-server.ts. The agents are
// simulated (lib/agent-swarm.ts, one process): bare ws clients with a real token each that say
// hello, answer pings and reconnect with the agent's own backoff.
//
// A round, for either server: start it; memory after GC; connect every agent (time until the last
// is welcomed); BENCH_CAPACITY_IDLE_SECONDS (15) of idling with the coordinator's heartbeat
// (AGENT_HEARTBEAT_MS, BENCH_CAPACITY_HEARTBEAT_MS, 10 000 by default): event-loop delay p99 and
// max, CPU; memory after GC again (per agent = growth / agents); then SIGTERM (both close their
// connections with GOING_AWAY), start a new process on the same port, and time until every agent
// has been welcomed again, from the SIGTERM and from the new process answering HTTP.
import { randomBytes } from 'node:crypto';
import { openSync, closeSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { signUp } from '../test/helpers/coordinator.ts';
import { createTestDatabase } from '../test/helpers/database.ts';
import {
  type Benchmark,
  type BenchOutcome,
  Cleanup,
  envInt,
  fmt,
  interleave,
  median,
  sleep,
} from './lib/harness.ts';
import { spawnWithFileLimit, startSwarm } from './lib/swarm.ts';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const probe = fileURLToPath(new URL('./lib/loop-probe.ts', import.meta.url));
const MiB = 1024 * 1024;
const wallMs = () => performance.timeOrigin + performance.now();

interface Stats {
  p50: number;
  p99: number;
  max: number;
  utilization: number;
  cpuSeconds: number;
  seconds: number;
}
interface Memory {
  rss: number;
  heapUsed: number;
  heapTotal: number;
  external: number;
}

interface ServerProcess {
  pid: number;
  probe<T>(type: 'reset' | 'stats' | 'memory'): Promise<T>;
  /** SIGTERM, then SIGKILL after 20 s; resolves when the process is gone. */
  stop(): Promise<void>;
}

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/** A server process with the probe, started once it answers HTTP on its port. */
async function startServerProcess(
  args: string[],
  env: NodeJS.ProcessEnv,
  port: number,
  logFile: string,
): Promise<ServerProcess & { readyAt: number }> {
  const fd = openSync(logFile, 'a');
  const child = spawnWithFileLimit(['--import', probe, ...args], {
    env,
    cwd: root,
    stdio: ['ignore', fd, fd, 'ipc'],
  });
  closeSync(fd);
  let exited = false;
  const gone = new Promise<void>((resolve) =>
    child.once('exit', () => {
      exited = true;
      resolve();
    }),
  );
  let nextId = 0;
  const pending = new Map<number, (m: unknown) => void>();
  child.on('message', (m: { id: number }) => {
    pending.get(m.id)?.(m);
    pending.delete(m.id);
  });
  const deadline = Date.now() + 60_000;
  for (;;) {
    if (exited) throw new Error(`${args.join(' ')} exited before it listened; see ${logFile}`);
    try {
      await fetch(`http://127.0.0.1:${port}/healthz`, { signal: AbortSignal.timeout(1_000) });
      break;
    } catch {
      if (Date.now() > deadline) throw new Error(`${args.join(' ')} did not listen within 60 s`);
      await sleep(20);
    }
  }
  const readyAt = wallMs();
  return {
    pid: child.pid!,
    readyAt,
    probe<T>(type: string) {
      const id = nextId++;
      return new Promise<T>((resolve, reject) => {
        pending.set(id, resolve as (m: unknown) => void);
        child.send({ type, id }, (err) => err && reject(err));
      });
    },
    async stop() {
      if (exited) return;
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 20_000);
      await gone;
      clearTimeout(timer);
    },
  };
}

interface Round {
  connectMs: number;
  idle: Stats;
  perAgentRss: number;
  perAgentHeap: number;
  rssBefore: number;
  rssAfter: number;
  perAgentExternal: number;
  heapTotalAfter: number;
  /** SIGTERM → the process gone; gone → the new one answering HTTP. */
  stopMs: number;
  startMs: number;
  reconnectFromStop: number;
  reconnectFromReady: number;
  attempts: number;
}

export const agentCapacity: Benchmark = {
  name: 'agent-capacity',
  description:
    'thousands of idle agents on one coordinator: memory per agent, event-loop delay, reconnect after a restart; vs a bare ws server',
  async run({ cleanup, log }): Promise<BenchOutcome> {
    const n = envInt('BENCH_CAPACITY_AGENTS', 2000);
    const idleSeconds = envInt('BENCH_CAPACITY_IDLE_SECONDS', 15);
    const heartbeatMs = envInt('BENCH_CAPACITY_HEARTBEAT_MS', 10_000);
    const warmups = envInt('BENCH_CAPACITY_WARMUPS', 1);
    const rounds = envInt('BENCH_CAPACITY_ROUNDS', 2);

    const dir = await mkdtemp(path.join(tmpdir(), 'deckhand-bench-capacity-'));
    cleanup.defer('temporary folder', () => rm(dir, { recursive: true, force: true }));
    const db = await createTestDatabase();
    cleanup.defer('coordinator database', () => db.drop());
    const productPort = await freePort();
    const productEnv: NodeJS.ProcessEnv = {};
    for (const [k, v] of Object.entries(process.env)) {
      if (!k.startsWith('DECKHAND_') && k !== 'DATABASE_URL' && k !== 'LOG_LEVEL') productEnv[k] = v;
    }
    Object.assign(productEnv, {
      HOST: '127.0.0.1',
      PORT: String(productPort),
      DATABASE_URL: db.url,
      DECKHAND_SECRET: randomBytes(32).toString('base64url'),
      DECKHAND_DATA_DIR: path.join(dir, 'data'),
      AGENT_HEARTBEAT_MS: String(heartbeatMs),
    });
    const coordinatorLog = path.join(dir, 'coordinator.log');
    const startProduct = () =>
      startServerProcess(['coordinator/src/server.ts'], productEnv, productPort, coordinatorLog);
    const basePort = await freePort();
    const startBaseline = () =>
      startServerProcess(
        ['bench/lib/bare-agent-server.ts', String(basePort), String(heartbeatMs)],
        process.env,
        basePort,
        path.join(dir, 'baseline.log'),
      );

    log(`agent-capacity: registering ${n} agents (coordinator log: ${coordinatorLog})`);
    const first = await startProduct();
    const tokens: string[] = [];
    try {
      const base = `http://127.0.0.1:${productPort}`;
      const { client: admin } = await signUp(base, 'bench@example.com', 'a long benchmark passphrase');
      let next = 0;
      await Promise.all(
        Array.from({ length: 8 }, async () => {
          while (next < n) {
            const i = next++;
            const res = await admin.post('/agents', { name: `idle-${i + 1}`, labels: ['idle'] });
            if (res.status !== 201) throw new Error(`POST /agents: ${res.status} ${res.text}`);
            tokens[i] = res.json.token as string;
          }
        }),
      );
    } finally {
      await first.stop();
    }

    const details = new Map<string, Round[]>([
      ['product', []],
      ['baseline', []],
    ]);
    const round =
      (name: 'product' | 'baseline', start: () => ReturnType<typeof startProduct>, url: string) =>
      async () => {
        const scope = new Cleanup();
        try {
          let server = await start();
          scope.defer(`${name} server`, () => server.stop());
          await sleep(500);
          const before = await server.probe<Memory>('memory');
          const swarm = await startSwarm(scope, `capacity ${name}`);
          // Half, then the rest: memory per agent is the growth between the two, without what the
          // first connections cost once (code compiled, pools and caches filled).
          const half = Math.floor(n / 2);
          const first = await swarm.command<{ ev: string; ms: number }>({
            cmd: 'connect',
            url,
            tokens: tokens.slice(0, half),
          });
          const middle = await server.probe<Memory>('memory');
          const second = await swarm.command<{ ev: string; ms: number }>({
            cmd: 'connect',
            url,
            tokens: tokens.slice(half),
          });
          await server.probe('reset');
          await sleep(idleSeconds * 1000);
          const idle = await server.probe<Stats>('stats');
          const after = await server.probe<Memory>('memory');
          await swarm.command({ cmd: 'mark' });
          const stopAt = wallMs();
          await server.stop();
          const stoppedAt = wallMs();
          server = await start();
          const back = await swarm.command<{ ev: string; lastAt: number; attempts: number }>({
            cmd: 'await-welcome',
          });
          const r: Round = {
            connectMs: first.ms + second.ms,
            idle,
            perAgentRss: (after.rss - middle.rss) / (n - half),
            perAgentHeap: (after.heapUsed - middle.heapUsed) / (n - half),
            perAgentExternal: (after.external - middle.external) / (n - half),
            heapTotalAfter: after.heapTotal,
            rssBefore: before.rss,
            rssAfter: after.rss,
            stopMs: stoppedAt - stopAt,
            startMs: server.readyAt - stoppedAt,
            reconnectFromStop: back.lastAt - stopAt,
            reconnectFromReady: back.lastAt - server.readyAt,
            attempts: back.attempts,
          };
          details.get(name)!.push(r);
          return r;
        } finally {
          await scope.run();
        }
      };

    const wsPath = '/agent/ws';
    await interleave(
      [
        { name: 'product', round: round('product', startProduct, `ws://127.0.0.1:${productPort}${wsPath}`) },
        { name: 'baseline', round: round('baseline', startBaseline, `ws://127.0.0.1:${basePort}${wsPath}`) },
      ],
      { warmups, rounds, log, label: 'agent-capacity' },
    );

    const m = (name: string, f: (r: Round) => number) => median(details.get(name)!.slice(-rounds).map(f));
    const row = (
      figure: string,
      f: (r: Round) => number,
      ratioIs: 'product/baseline' | 'baseline/product',
      note = '',
    ) => {
      const product = m('product', f);
      const baseline = m('baseline', f);
      return {
        benchmark: 'agent-capacity',
        figure,
        product,
        baseline,
        baselineName: `bare ws server, same hello/welcome and heartbeat${note}`,
        ratio: ratioIs === 'product/baseline' ? product / baseline : baseline / product,
        ratioIs,
      };
    };
    return {
      rows: [
        row(
          `KiB RSS growth per idle agent, ${n} agents`,
          (r) => (r.rssAfter - r.rssBefore) / n / 1024,
          'baseline/product',
        ),
        row(`event-loop delay p99 ms, idle`, (r) => r.idle.p99, 'baseline/product'),
        row(`event-loop delay max ms, idle`, (r) => r.idle.max, 'baseline/product'),
        row(`s until all ${n} are back after SIGTERM`, (r) => r.reconnectFromStop / 1000, 'baseline/product'),
      ],
      notes: [
        `agent-capacity: ${n} simulated agents (one process; open-file limit raised to the hard limit), heartbeat ${heartbeatMs} ms, ` +
          `${idleSeconds} s idle per round, ${rounds} rounds after ${warmups} warm-up(s); medians:`,
        ...(['product', 'baseline'] as const).map(
          (name) =>
            `    ${name.padEnd(8)} connect all ${fmt(m(name, (r) => r.connectMs))} ms; RSS after GC ${fmt(m(name, (r) => r.rssBefore / MiB))} → ${fmt(m(name, (r) => r.rssAfter / MiB))} MiB ` +
            `(growth over the second half: ${fmt(m(name, (r) => r.perAgentRss / 1024))} KiB/agent, of which JS heap ${fmt(m(name, (r) => r.perAgentHeap / 1024))}, ` +
            `external ${fmt(m(name, (r) => r.perAgentExternal / 1024))}; heap committed at the end ${fmt(m(name, (r) => r.heapTotalAfter / MiB))} MiB); ` +
            `idle: loop delay p50 ${fmt(m(name, (r) => r.idle.p50))} / p99 ${fmt(m(name, (r) => r.idle.p99))} / max ${fmt(m(name, (r) => r.idle.max))} ms, ` +
            `utilisation ${fmt(m(name, (r) => r.idle.utilization * 100))} %, CPU ${fmt(m(name, (r) => (r.idle.cpuSeconds / r.idle.seconds) * 100))} % of a core; ` +
            `restart: stopped in ${fmt(m(name, (r) => r.stopMs))} ms, the new process answered ${fmt(m(name, (r) => r.startMs))} ms later, ` +
            `all agents back ${fmt(m(name, (r) => r.reconnectFromStop))} ms after SIGTERM (${fmt(m(name, (r) => r.reconnectFromReady))} ms after the new process answered), ` +
            `${fmt(m(name, (r) => r.attempts))} connection attempts`,
        ),
      ],
    };
  },
};
