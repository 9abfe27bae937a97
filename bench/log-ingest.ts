// log-ingest: N agents streaming output as fast as they can, at the same time, through the
// coordinator into PostgreSQL — beside the same bytes written by N raw `pg` clients with batched
// INSERTs (at their best batch size) and with COPY (the ceiling). Also the memory the coordinator
// and the agents hold meanwhile, and how long a printed line takes to become readable through the API.
//
// Product: N real `deckhand-agent` processes (BENCH_INGEST_AGENTS, 4), each the only target of a
// project of its own (so the N deployments run in parallel), each running `cat <file>`: a file of
// its own of BENCH_INGEST_MIB (16) MiB of random base64 lines. The N deployments are triggered
// together; a round runs from the first `step.started` of a command step handled by the
// coordinator to the last of the N entries complete in PostgreSQL (`step.finished` handled: the
// entry's status, output_bytes and finished_at written; its output stays in its log_chunks rows).
// Each entry is then checked (success, output_bytes =
// the file's size). Aggregate MB/s = N × size / that time. Meanwhile the coordinator's RSS (it
// runs in this process: process.memoryUsage.rss()) and each agent's VmRSS (/proc/<pid>/status)
// are sampled every 100 ms.
//
// Baselines (raw-pg.ts): N `pg` connections write the same N files in the same 256 KiB chunks,
// concurrently, into a table shaped like log_chunks: multi-row INSERTs with bound parameters at
// the batch size that was fastest in a sweep, and one binary COPY per connection (pg-copy-streams).
// Rounds of the three are interleaved, in rotating order, after warm-ups.
//
// Latency: one agent runs `for i in $(seq 1 200); do echo "$(date +%s%N) line $i"; sleep 0.02;
// done`; a reader in a process of its own (lib/log-reader.ts) polls GET /deploy/:id every 5 ms, or
// follows GET /deploy/:id/events (SSE) — one reader per deployment, alternating — and records when
// each line is first readable. Latency = readable − the time printed in the line (both wall
// clock, same machine). Probes split it at the frame's arrival on the coordinator's socket and its
// storage.
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { decodeAgentFrame, encodeFrame, MAX_CHUNK_BYTES, type StepOutput } from '../protocol/src/index.ts';
import {
  type Benchmark,
  type BenchOutcome,
  type Cleanup,
  envInt,
  fmt,
  formatTable,
  interleave,
  median,
  quantile,
  withTimeout,
} from './lib/harness.ts';
import type { ReaderResult } from './lib/log-reader.ts';
import { cpuBetween, cpuSnapshot, machineCpu, MemorySampler, statusMiB } from './lib/proc.ts';
import { type ChunkTrace, type DeploymentTrace, startProduct } from './lib/product.ts';
import { startRawPgIngest } from './lib/raw-pg.ts';

const MiB = 1024 * 1024;
const BATCH_SIZES = [1, 4, 8, 16, 64];
const ROUND_TIMEOUT_MS = 120_000;
const SAMPLE_MS = 100;
const POLL_MS = 5;

const mbPerSecond = (bytes: number, ms: number) => bytes / 1e6 / (ms / 1000);
const sum = (values: readonly number[]) => values.reduce((a, b) => a + b, 0);

/** `size` bytes of log-like text: lines of 99 random base64 characters and a newline. */
async function writeLogFile(file: string, size: number): Promise<Buffer> {
  const text = Buffer.from(randomBytes(Math.ceil((size * 3) / 4)).toString('base64'), 'latin1');
  const out = Buffer.alloc(size);
  for (let at = 0; at < size; at += 100) {
    text.copy(out, at, at, Math.min(at + 99, size));
    if (at + 99 < size) out[at + 99] = 0x0a;
  }
  await writeFile(file, out);
  return out;
}

/** CPU-seconds spent per part during one round, and the machine's busy cores. */
interface CpuRound {
  /** This process: the coordinator (product rounds) or the pg clients (baseline rounds). */
  self: number;
  agents: number;
  backends: number;
  /** Busy CPU-seconds of the whole machine (all processes, other users' too) / wall seconds. */
  machineCores: number;
}

class CpuMeter {
  readonly #pids: () => Promise<number[]>;
  #self = process.cpuUsage();
  #agents = new Map<number, number>();
  #backends = new Map<number, number>();
  #machine = machineCpu();
  #wall = performance.now();
  readonly #agentPids: number[];

  constructor(agentPids: number[], backendPids: () => Promise<number[]>) {
    this.#agentPids = agentPids;
    this.#pids = backendPids;
  }

  async start(): Promise<void> {
    this.#backends = cpuSnapshot(await this.#pids());
    this.#agents = cpuSnapshot(this.#agentPids);
    this.#machine = machineCpu();
    this.#self = process.cpuUsage();
    this.#wall = performance.now();
  }

  async stop(): Promise<CpuRound> {
    const self = process.cpuUsage(this.#self);
    const wall = performance.now() - this.#wall;
    const machine = machineCpu();
    const agents = cpuBetween(this.#agents, cpuSnapshot(this.#agentPids));
    const backendPids = new Set([...this.#backends.keys(), ...(await this.#pids())]);
    const backends = cpuBetween(this.#backends, cpuSnapshot(backendPids));
    return {
      self: (self.user + self.system) / 1e6,
      agents,
      backends,
      machineCores: (machine.busy - this.#machine.busy) / (wall / 1000),
    };
  }
}

/** What one product round showed. */
interface ProductRound {
  mbps: number;
  windowMs: number;
  coordRssMax: number;
  agentRssMax: number[];
  cpu: CpuRound;
  /** Event loop utilization of this process (the coordinator's) over the round. */
  elu: number;
  /** Per agent: step.started → step.finished arriving on the coordinator's socket. */
  deliveredMs: number[];
  /** Per agent: step.started handled → last chunk stored. */
  storedMs: number[];
  /** Per agent: step.finished arrived on the socket → handled (queued behind output). */
  queuedMs: number[];
  /** Per agent: handling step.finished (entry completion: status, output_bytes, finished_at). */
  completeMs: number[];
  /** Window start → last chunk stored (all agents), and last chunk stored → window end. */
  lastStoredMs: number;
  tailMs: number;
  chunks: ChunkTrace[];
  /** outputs() calls: [begin, end] (one per batch). */
  calls: Array<[number, number]>;
  decode: { frames: number; ms: number };
  inserts: { count: number; ms: number; rows: number };
  /** Peak of output bytes that had reached the coordinator's socket but were not stored yet. */
  backlogPeak: number;
}

interface BaselineRound {
  mbps: number;
  cpu: CpuRound;
}

/** The largest running total of +bytes at arrival, −bytes at storage (ties: storage first). */
function backlogPeak(chunks: ChunkTrace[]): number {
  const events: Array<[number, number]> = [];
  for (const c of chunks) {
    if (!Number.isFinite(c.arrived)) continue;
    events.push([c.arrived, c.bytes], [c.stored, -c.bytes]);
  }
  events.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  let now = 0;
  let peak = 0;
  for (const [, delta] of events) {
    now += delta;
    peak = Math.max(peak, now);
  }
  return peak;
}

/** A reader process (lib/log-reader.ts) ready for a deployment id. */
async function startReader(
  cleanup: Cleanup,
  baseUrl: string,
  mode: 'poll' | 'sse',
): Promise<{ follow(deployId: string, cookie: string, lines: number): Promise<ReaderResult> }> {
  const script = fileURLToPath(new URL('./lib/log-reader.ts', import.meta.url));
  const child: ChildProcess = spawn(process.execPath, [script, baseUrl, mode, String(POLL_MS)], {
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  let exited = false;
  const gone = new Promise<void>((resolve) =>
    child.once('exit', () => {
      exited = true;
      resolve();
    }),
  );
  cleanup.defer(`log reader (${mode})`, async () => {
    if (exited) return;
    child.kill('SIGKILL');
    await gone;
  });
  const lines = createInterface({ input: child.stdout! });
  const next = () =>
    new Promise<string>((resolve, reject) => {
      lines.once('line', resolve);
      void gone.then(() => reject(new Error(`the ${mode} reader exited`)));
    });
  const ready = await withTimeout(next(), 15_000, `the ${mode} reader to start`);
  if (ready !== 'ready') throw new Error(`the ${mode} reader said ${ready}`);
  return {
    async follow(deployId, cookie, count) {
      const answer = next();
      child.stdin!.end(`${JSON.stringify({ deployId, cookie, lines: count })}\n`);
      const result = JSON.parse(await withTimeout(answer, 90_000, `the ${mode} reader`)) as ReaderResult;
      await gone;
      return result;
    },
  };
}

/** Latency of each line, split at the frame's arrival on the coordinator's socket and its storage. */
interface LineLatency {
  total: number;
  toSocket: number;
  toStored: number;
  toReadable: number;
}

function lineLatencies(result: ReaderResult, trace: DeploymentTrace): LineLatency[] {
  const chunks = trace.chunks.filter((c) => c.step === 1).sort((a, b) => a.offset - b.offset);
  const wall = (t: number) => performance.timeOrigin + t;
  return result.seen.map(([, printed, readable, end]) => {
    // The chunk holding the line's last byte (its newline).
    const c = chunks.find((x) => x.offset < end && end <= x.offset + x.bytes);
    const arrived = c ? wall(c.arrived) : Number.NaN;
    const stored = c ? wall(c.stored) : Number.NaN;
    return {
      total: readable - printed,
      toSocket: arrived - printed,
      toStored: stored - arrived,
      toReadable: readable - stored,
    };
  });
}

export const logIngest: Benchmark = {
  name: 'log-ingest',
  description:
    'N agents printing at once through the coordinator into PostgreSQL, vs N-client batched INSERTs and COPY; memory; line latency',
  async run({ cleanup, log }): Promise<BenchOutcome> {
    const n = envInt('BENCH_INGEST_AGENTS', 4);
    const size = envInt('BENCH_INGEST_MIB', 16) * MiB;
    const warmups = envInt('BENCH_INGEST_WARMUPS', 1);
    const rounds = envInt('BENCH_INGEST_ROUNDS', 5);
    const latencyLines = envInt('BENCH_INGEST_LATENCY_LINES', 200);
    const latencyRounds = envInt('BENCH_INGEST_LATENCY_ROUNDS', 2);
    if (n < 1 || size < MiB) throw new Error('log-ingest needs at least one agent and 1 MiB');
    const total = n * size;

    const dir = await mkdtemp(path.join(tmpdir(), 'deckhand-bench-ingest-'));
    cleanup.defer('output files', () => rm(dir, { recursive: true, force: true }));
    const files: string[] = [];
    const data: Buffer[] = [];
    for (let i = 0; i < n; i++) {
      const file = path.join(dir, `output-${i + 1}.txt`);
      data.push(await writeLogFile(file, size));
      files.push(file);
    }

    log(
      `log-ingest: ${n} agents × ${size / MiB} MiB; starting the coordinator, the agents and the baselines`,
    );
    // The per-entry output cap above the size: this measures how fast output is stored, not where it is cut.
    const product = await startProduct(
      cleanup,
      'ingest',
      { OUTPUT_LIMIT_BYTES: String(size + MiB) },
      { agents: n },
    );
    const projects: string[] = [];
    for (let i = 0; i < n; i++) {
      projects.push(
        await product.createProject(`ingest-${i + 1}`, [`cat '${files[i]}'`], product.agents[i]!.name),
      );
    }
    const raw = await startRawPgIngest(cleanup, data, MAX_CHUNK_BYTES);
    const productDb = (await product.pool.query<{ db: string }>('select current_database() as db')).rows[0]!
      .db;
    const productBackends = async () =>
      (
        await product.pool.query<{ pid: number }>(
          'select pid from pg_stat_activity where datname = $1 and pid <> pg_backend_pid()',
          [productDb],
        )
      ).rows.map((r) => r.pid);

    // The coordinator's output INSERTs (its ingest pool), timed: a wrapper on that pool instance.
    const ingestPool = product.coord.app.services.pool;
    const inserts = { count: 0, ms: 0, rows: 0 };
    const poolQuery = ingestPool.query.bind(ingestPool) as (...args: unknown[]) => Promise<unknown>;
    ingestPool.query = (async (...args: unknown[]) => {
      const text = typeof args[0] === 'string' ? args[0] : '';
      if (!text.startsWith('insert into log_chunks')) return poolQuery(...args);
      const begin = performance.now();
      try {
        return await poolQuery(...args);
      } finally {
        inserts.count += 1;
        inserts.ms += performance.now() - begin;
        inserts.rows += Array.isArray(args[1]) ? args[1].length / 3 : 0;
      }
    }) as typeof ingestPool.query;

    const agentPids = product.agents.map((a) => a.pid);

    // The INSERT baseline's batch size: the fastest of a sweep (best of two passes each).
    const sweep: string[] = [];
    let best = { batch: BATCH_SIZES[0]!, mbps: 0 };
    for (const batch of BATCH_SIZES) {
      const mbps = Math.max(
        mbPerSecond(total, await raw.insertRound(batch)),
        mbPerSecond(total, await raw.insertRound(batch)),
      );
      sweep.push(`${batch}: ${fmt(mbps)}`);
      if (mbps > best.mbps) best = { batch, mbps };
    }
    log(`log-ingest: INSERT sweep (rows per statement: MB/s) ${sweep.join(', ')}`);

    // Resident memory before the measured rounds. This process also holds the baselines' data
    // (N × size) and whatever their rounds left; the agents have connected and nothing more.
    const idle = {
      coord: process.memoryUsage.rss() / MiB,
      agents: agentPids.map((pid) => statusMiB(pid, 'VmRSS')),
    };

    const productRounds: ProductRound[] = [];
    const productRound = async (): Promise<number> => {
      const meter = new CpuMeter(agentPids, productBackends);
      await meter.start();
      const sampler = new MemorySampler(agentPids, SAMPLE_MS);
      const elu = performance.eventLoopUtilization();
      const before = { ...inserts };
      let ids: string[];
      try {
        ids = await Promise.all(projects.map((p) => product.deploy(p)));
        await Promise.all(ids.map((id) => product.jobFinished(id, ROUND_TIMEOUT_MS)));
      } catch (err) {
        throw new Error(`${(err as Error).message}\n${await product.diagnostics()}`, { cause: err });
      } finally {
        sampler.stop();
      }
      const loop = performance.eventLoopUtilization(elu);
      const cpu = await meter.stop();
      const { rows } = await product.pool.query<{ id: string; status: string; done: boolean; bytes: string }>(
        `select d.id, d.status, e.finished_at is not null as done, e.output_bytes as bytes
           from deployments d join log_entries e on e.deployment_id = d.id and e.seq = 1
          where d.id = any($1::uuid[])`,
        [ids],
      );
      if (
        rows.length !== n ||
        rows.some((r) => r.status !== 'success' || !r.done || Number(r.bytes) !== size)
      ) {
        throw new Error(
          `log-ingest: ${JSON.stringify(rows)}, expected ${n} successes of ${size} bytes\n${await product.diagnostics()}`,
        );
      }
      const traces = ids.map((id) => product.trace(id));
      const start = Math.min(...traces.map((t) => t.marks.get('started:1')!));
      const end = Math.max(...traces.map((t) => t.marks.get('finished:1')!));
      const chunks = traces.flatMap((t) => t.chunks.filter((c) => c.step === 1));
      const lastStored = Math.max(...chunks.map((c) => c.stored));
      const calls = new Map<number, number>();
      for (const c of chunks) calls.set(c.handling, c.stored);
      const r: ProductRound = {
        mbps: mbPerSecond(total, end - start),
        windowMs: end - start,
        coordRssMax: sampler.selfMax,
        agentRssMax: agentPids.map((pid) => sampler.max.get(pid) ?? Number.NaN),
        cpu,
        elu: loop.utilization,
        deliveredMs: traces.map(
          (t) =>
            (t.arrived.get('step.finished:1') ?? Number.NaN) -
            (t.arrived.get('step.started:1') ?? Number.NaN),
        ),
        storedMs: traces.map(
          (t) =>
            Math.max(...t.chunks.filter((c) => c.step === 1).map((c) => c.stored)) -
            t.marks.get('started:1')!,
        ),
        queuedMs: traces.map(
          (t) => t.marks.get('finishing:1')! - (t.arrived.get('step.finished:1') ?? Number.NaN),
        ),
        completeMs: traces.map((t) => t.marks.get('finished:1')! - t.marks.get('finishing:1')!),
        lastStoredMs: lastStored - start,
        tailMs: end - lastStored,
        chunks,
        calls: [...calls.entries()],
        decode: {
          frames: sum(traces.map((t) => t.decode.frames)),
          ms: sum(traces.map((t) => t.decode.ms)),
        },
        inserts: {
          count: inserts.count - before.count,
          ms: inserts.ms - before.ms,
          rows: inserts.rows - before.rows,
        },
        backlogPeak: backlogPeak(chunks),
      };
      productRounds.push(r);
      return r.mbps;
    };

    const baselineRounds = new Map<string, BaselineRound[]>([
      ['insert', []],
      ['copy', []],
    ]);
    const baselineRound = (name: 'insert' | 'copy', write: () => Promise<number>) => async () => {
      const meter = new CpuMeter([], async () => raw.backendPids);
      await meter.start();
      const ms = await write();
      const r = { mbps: mbPerSecond(total, ms), cpu: await meter.stop() };
      baselineRounds.get(name)!.push(r);
      return r.mbps;
    };

    const results = await interleave(
      [
        { name: 'product', round: productRound },
        { name: 'insert', round: baselineRound('insert', () => raw.insertRound(best.batch)) },
        { name: 'copy', round: baselineRound('copy', () => raw.copyRound()) },
      ],
      { warmups, rounds, log, label: 'log-ingest' },
    );

    // Latency: one agent prints a line every 20 ms; a reader (polling, or SSE) records when each is readable.
    const latencyCommand = `for i in $(seq 1 ${latencyLines}); do echo "$(date +%s%N) line $i"; sleep 0.02; done`;
    const latencyProject = await product.createProject('latency', [latencyCommand], product.agents[0]!.name);
    const latency = new Map<'poll' | 'sse', { lines: LineLatency[]; requests: number; requestMs: number[] }>([
      ['poll', { lines: [], requests: 0, requestMs: [] }],
      ['sse', { lines: [], requests: 0, requestMs: [] }],
    ]);
    const cookie = product.admin.cookie ?? '';
    for (let i = 0; i < 2 * latencyRounds; i++) {
      const mode = i % 2 === 0 ? 'poll' : 'sse';
      const reader = await startReader(cleanup, product.coord.url, mode);
      const id = await product.deploy(latencyProject);
      const result = await reader.follow(id, cookie, latencyLines);
      await product.jobFinished(id, ROUND_TIMEOUT_MS);
      if (result.error || result.seen.length !== latencyLines) {
        throw new Error(
          `log-ingest: the ${mode} reader saw ${result.seen.length} of ${latencyLines} lines${result.error ? `: ${result.error}` : ''}\n${await product.diagnostics()}`,
        );
      }
      const l = latency.get(mode)!;
      l.lines.push(...lineLatencies(result, product.trace(id)));
      l.requests += result.requests;
      if (result.requestMs !== null && Number.isFinite(result.requestMs)) l.requestMs.push(result.requestMs);
      log(`log-ingest: latency round ${i + 1}/${2 * latencyRounds} (${mode})`);
    }

    // The coordinator's synchronous cost of one full output frame, measured here on the same code.
    const frameCost = measureFrameDecode();

    return report();

    function report(): BenchOutcome {
      const prod = median(results.get('product')!);
      const ins = median(results.get('insert')!);
      const copy = median(results.get('copy')!);
      const pr = productRounds.slice(-rounds);
      const m = (f: (r: ProductRound) => number) => median(pr.map(f));
      const coordRss = Math.max(...pr.map((r) => r.coordRssMax));
      const agentRss = Math.max(...pr.flatMap((r) => r.agentRssMax));
      const agentHwm = Math.max(...agentPids.map((pid) => statusMiB(pid, 'VmHWM')));
      const lat = (mode: 'poll' | 'sse', q: number, f: (l: LineLatency) => number = (l) => l.total) =>
        quantile(latency.get(mode)!.lines.map(f), q);
      // CPU-seconds per GB written (10^9 bytes), medians of the rounds.
      const cpuLine = (name: string, rs: Array<{ cpu: CpuRound; mbps: number }>, withAgents: boolean) => {
        const perGB = (f: (x: CpuRound) => number) => median(rs.map((r) => f(r.cpu) / (total / 1e9)));
        return [
          name,
          fmt(median(rs.map((r) => r.mbps))),
          fmt(perGB((x) => x.self)),
          withAgents ? fmt(perGB((x) => x.agents)) : '—',
          fmt(perGB((x) => x.backends)),
          fmt(perGB((x) => x.self + (withAgents ? x.agents : 0) + x.backends)),
          fmt(median(rs.map((r) => r.cpu.machineCores))),
        ];
      };
      const allChunks = pr.flatMap((r) => r.chunks);
      const waits = allChunks.map((c) => c.handling - c.arrived).filter(Number.isFinite);
      const calls = pr.flatMap((r) => r.calls.map(([b, e]) => e - b));
      const chunksPerCall = m((r) => r.chunks.length / r.calls.length);
      const notes = [
        `log-ingest: ${n} agents × ${size / MiB} MiB (${fmt(total / 1e6)} MB) per round, ${rounds} rounds after ${warmups} warm-up(s); ` +
          `aggregate MB/s per round: product ${results.get('product')!.map(fmt).join(' ')}; ` +
          `INSERT ${results.get('insert')!.map(fmt).join(' ')}; COPY ${results.get('copy')!.map(fmt).join(' ')}.`,
        `log-ingest: INSERT sweep, ${n} clients, rows of 256 KiB per statement: MB/s ${sweep.join(', ')} → ${best.batch}.`,
        `log-ingest: CPU-seconds per GB written (medians of the rounds; "this process" is the coordinator in product rounds and the pg ` +
          `clients in baseline rounds; PostgreSQL = the backends serving that database, not its background processes; ` +
          `machine busy = every process on the machine, other users' too, in cores):`,
        indent(
          formatTable(
            ['contestant', 'MB/s', 'this process', 'agents', 'PostgreSQL', 'total', 'machine busy'],
            [
              cpuLine('product', pr, true),
              cpuLine(`INSERT ×${best.batch}`, baselineRounds.get('insert')!.slice(-rounds), false),
              cpuLine('COPY', baselineRounds.get('copy')!.slice(-rounds), false),
            ],
          ),
        ),
        'log-ingest: product round, medians (per agent: median of the agents):',
        `    first step.started → last entry complete   ${fmt(m((r) => r.windowMs))} ms; last chunk stored at ${fmt(m((r) => r.lastStoredMs))} ms, then ${fmt(m((r) => r.tailMs))} ms of completion`,
        `    agent: step.started → step.finished on the socket  ${fmt(m((r) => median(r.deliveredMs)))} ms (${fmt(m((r) => mbPerSecond(size, median(r.deliveredMs))))} MB/s per agent, ${fmt(m((r) => mbPerSecond(total, Math.max(...r.deliveredMs))))} MB/s together)`,
        `    per agent: step.started → last chunk stored  ${fmt(m((r) => median(r.storedMs)))} ms; step.finished waited in the hub ${fmt(m((r) => median(r.queuedMs)))} ms; entry completion ${fmt(m((r) => median(r.completeMs)))} ms`,
        `    coordinator event loop utilization        ${fmt(m((r) => r.elu * 100))} %`,
        `    hub message handler (decodeAgentFrame)    ${fmt(m((r) => r.decode.ms / r.decode.frames))} ms per output frame, ${fmt(m((r) => r.decode.ms))} ms per round`,
        `    one 256 KiB frame, measured alone, ms     coordinator: decodeAgentFrame ${fmt(frameCost.decode)}; agent: encodeFrame ${fmt(frameCost.encode)} (binary frames, no masking)`,
        `    JobService.outputs() calls                ${fmt(m((r) => r.calls.length))} per round, ${fmt(chunksPerCall)} frames each, ${fmt(median(calls))} ms each (p95 ${fmt(quantile(calls, 0.95))}); ${fmt(m((r) => sum(r.calls.map(([b, e]) => e - b))))} ms summed over agents`,
        `    of which the INSERT statements            ${fmt(m((r) => r.inserts.ms))} ms summed, ${fmt(m((r) => r.inserts.ms / r.inserts.count))} ms each, ${fmt(m((r) => r.inserts.rows / r.inserts.count))} rows each`,
        `    frame arrived → its outputs() call began  median ${fmt(median(waits))} ms, p95 ${fmt(quantile(waits, 0.95))} ms (queued in the coordinator)`,
        `    output held in the coordinator (arrived, not stored) peak ${fmt(m((r) => r.backlogPeak / MiB))} MiB of ${fmt(total / MiB)} MiB`,
        `log-ingest: memory: coordinator (this process) RSS ${fmt(idle.coord)} MiB before the rounds, at most ${fmt(coordRss)} MiB during product rounds; ` +
          `agents VmRSS ${idle.agents.map(fmt).join('/')} MiB idle, at most ` +
          `${agentPids.map((_, i) => fmt(Math.max(...pr.map((r) => r.agentRssMax[i]!)))).join('/')} MiB ` +
          `(the kernel's high-water mark VmHWM: at most ${fmt(agentHwm)} MiB); sampled every ${SAMPLE_MS} ms.`,
        `log-ingest: latency, ${latencyRounds} deployment(s) of ${latencyLines} lines per reader; ms from printed to readable, then split at the frame's arrival on the coordinator's socket and its storage (medians):`,
        indent(
          formatTable(
            [
              'reader',
              'p50',
              'p95',
              'p99',
              'max',
              'printed → socket',
              'socket → stored',
              'stored → readable',
              'requests',
            ],
            (['poll', 'sse'] as const).map((mode) => [
              mode === 'poll' ? `GET /deploy/:id every ${POLL_MS} ms` : 'GET /deploy/:id/events (SSE)',
              fmt(lat(mode, 0.5)),
              fmt(lat(mode, 0.95)),
              fmt(lat(mode, 0.99)),
              fmt(lat(mode, 1)),
              fmt(lat(mode, 0.5, (l) => l.toSocket)),
              fmt(lat(mode, 0.5, (l) => l.toStored)),
              fmt(lat(mode, 0.5, (l) => l.toReadable)),
              mode === 'poll'
                ? `${latency.get(mode)!.requests} (${fmt(median(latency.get(mode)!.requestMs))} ms each)`
                : String(latency.get(mode)!.requests),
            ]),
          ),
        ),
      ];
      const figure = `median MB/s, ${n} agents × ${size / MiB} MiB`;
      return {
        rows: [
          {
            benchmark: 'log-ingest',
            figure,
            product: prod,
            baseline: ins,
            baselineName: `${n} pg clients, multi-row INSERT, ${best.batch} × 256 KiB rows per statement`,
            ratio: prod / ins,
            ratioIs: 'product/baseline',
          },
          {
            benchmark: 'log-ingest',
            figure,
            product: prod,
            baseline: copy,
            baselineName: `${n} pg clients, one binary COPY each (ceiling)`,
            ratio: prod / copy,
            ratioIs: 'product/baseline',
          },
          { benchmark: 'log-ingest', figure: 'max RSS MiB, coordinator', product: coordRss },
          { benchmark: 'log-ingest', figure: 'max VmRSS MiB, one agent', product: agentRss },
          ...(['poll', 'sse'] as const).flatMap((mode) =>
            ([0.5, 0.95, 0.99] as const).map((q) => ({
              benchmark: 'log-ingest',
              figure: `line latency p${Math.round(q * 100)} ms, ${mode === 'poll' ? `poll ${POLL_MS} ms` : 'SSE'}`,
              product: lat(mode, q),
            })),
          ),
        ],
        notes,
      };
    }
  },
};

function indent(text: string): string {
  return text
    .split('\n')
    .map((l) => `    ${l}`)
    .join('\n');
}

/**
 * The per-frame work on both sides of the WebSocket for one full output frame, each step timed
 * alone (median of 30) on the same code: the agent's encodeFrame (a binary frame: header + bytes)
 * and the coordinator's decodeAgentFrame. ws masks nothing: the agent's masking key is zero.
 */
function measureFrameDecode(): { decode: number; encode: number } {
  const message: StepOutput = {
    type: 'step.output',
    jobId: '00000000-0000-4000-8000-000000000000',
    step: 1,
    seq: 0,
    offset: 0,
    data: randomBytes(MAX_CHUNK_BYTES),
  };
  const t = { decode: [] as number[], encode: [] as number[] };
  const time = (into: number[], f: () => unknown) => {
    const start = performance.now();
    f();
    into.push(performance.now() - start);
  };
  for (let i = 0; i < 30; i++) {
    let frame: string | Buffer = '';
    time(t.encode, () => (frame = encodeFrame(message)));
    let decoded: ReturnType<typeof decodeAgentFrame> | undefined;
    time(t.decode, () => (decoded = decodeAgentFrame(frame, true)));
    if (!decoded?.ok || decoded.message.type !== 'step.output')
      throw new Error('the sample frame did not decode');
  }
  return { decode: median(t.decode), encode: median(t.encode) };
}
