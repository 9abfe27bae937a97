// soak: a mixed load for a while (issue #8, item 6: ten minutes by default; memory flat, counts
// exact). `npm run bench -- soak --duration 60s` (or BENCH_SOAK_SECONDS) for a shorter one.
//
// The coordinator (lib/product.ts: in this process, real HTTP and database) with BENCH_SOAK_AGENTS
// (2) real agents; each agent deploys its own project again and again, one deployment at a time,
// for the whole duration: lib/line-printer.ts prints BENCH_SOAK_LINES (1000) lines at
// BENCH_SOAK_RATE (200) lines/s. Every deployment is watched from its start by BENCH_SOAK_VIEWERS
// (2) event streams (GET /deploy/:id/events) and the API is read at BENCH_SOAK_READS (10)
// requests/s (GET /deploy/:id of the newest deployment, GET /projects, GET /agents), both from
// lib/soak-load.ts, a process of its own, so that this process holds the coordinator and little
// else (the probes forget each deployment once checked). Counts: every deployment must end in
// success with exactly lines 1..N in order in PostgreSQL, every viewer must have seen exactly them
// in order, and every read must be answered 200. Memory: this process's RSS and JS heap after two
// full garbage collections, sampled through the run after a warm-up (a tenth of the duration,
// at most a minute); reported as the first window of samples (the first minute, or a sixth of a
// shorter run) against the last, and the least-squares slope over the second half. The "baseline"
// of the memory rows is the same run's first window: a ratio near 1 is flat.
import { type ChildProcess, spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { type Benchmark, type BenchOutcome, envInt, fmt, type ResultRow, sleep } from './lib/harness.ts';
import { startProduct } from './lib/product.ts';

const PRINTER = fileURLToPath(new URL('./lib/line-printer.ts', import.meta.url));
const LOAD = fileURLToPath(new URL('./lib/soak-load.ts', import.meta.url));
const MiB = 1024 * 1024;
const LINE = /^\S+ line (\d+)$/;

/** `--duration 90s|10m|600` (or `--duration=…`) on the command line, else BENCH_SOAK_SECONDS, else 600. */
export function soakSeconds(argv: string[] = process.argv): number {
  const i = argv.findIndex((a) => a === '--duration' || a.startsWith('--duration='));
  const raw = i === -1 ? undefined : argv[i]!.includes('=') ? argv[i]!.split('=')[1] : argv[i + 1];
  if (raw === undefined) return envInt('BENCH_SOAK_SECONDS', 600);
  const m = /^(\d+)(s|m)?$/.exec(raw);
  if (!m) throw new Error(`--duration: ${raw} is not a duration like 90s, 10m or 600`);
  return Number(m[1]) * (m[2] === 'm' ? 60 : 1);
}

/** Least-squares slope of y over x. */
function slope(points: Array<[number, number]>): number {
  const n = points.length;
  if (n < 2) return Number.NaN;
  const mx = points.reduce((s, [x]) => s + x, 0) / n;
  const my = points.reduce((s, [, y]) => s + y, 0) / n;
  let num = 0;
  let den = 0;
  for (const [x, y] of points) {
    num += (x - mx) * (y - my);
    den += (x - mx) ** 2;
  }
  return num / den;
}

/** Whether `text` holds exactly the lines `… line 1` to `… line n`, in order (other lines ignored). */
function exactLines(text: string, n: number): boolean {
  let next = 1;
  for (const line of text.split('\n')) {
    const m = LINE.exec(line);
    if (!m) continue;
    if (Number(m[1]) !== next) return false;
    next++;
  }
  return next === n + 1;
}

interface Sample {
  at: number;
  rss: number;
  heap: number;
}

export const soak: Benchmark = {
  name: 'soak',
  description:
    'a mixed soak (deploys streaming from real agents, SSE viewers, API reads): memory flat, counts exact',
  async run({ cleanup, log }): Promise<BenchOutcome> {
    const seconds = soakSeconds();
    const agents = envInt('BENCH_SOAK_AGENTS', 2);
    const lines = envInt('BENCH_SOAK_LINES', 1000);
    const rate = envInt('BENCH_SOAK_RATE', 200);
    const viewers = envInt('BENCH_SOAK_VIEWERS', 2);
    const readsPerSecond = envInt('BENCH_SOAK_READS', 10);
    setFlagsFromString('--expose-gc');
    const gc = runInNewContext('gc') as () => void;

    log(`soak: ${seconds} s with ${agents} agents; starting the coordinator and the agents`);
    const product = await startProduct(cleanup, 'soak', {}, { agents });
    const projects: string[] = [];
    for (const [i, agent] of product.agents.entries()) {
      projects.push(
        await product.createProject(
          `soak-${i + 1}`,
          [`'${process.execPath}' '${PRINTER}' ${rate} ${lines}`],
          agent.name,
        ),
      );
    }

    const load: ChildProcess = spawn(process.execPath, [LOAD, product.coord.url], {
      stdio: ['pipe', 'pipe', 'inherit'],
    });
    cleanup.defer('soak load process', async () => {
      if (load.exitCode !== null || load.signalCode !== null) return;
      const exited = new Promise((resolve) => load.once('exit', resolve));
      load.kill('SIGTERM');
      await exited;
    });
    const send = (c: object) => load.stdin!.write(`${JSON.stringify(c)}\n`);
    const watched = new Map<string, { ok: boolean; problems: string[] }>();
    let stopped: { reads: number; readErrors: number; readMs: [number, number] } | undefined;
    const onStopped: Array<() => void> = [];
    createInterface({ input: load.stdout! }).on('line', (line) => {
      const e = JSON.parse(line) as { ev: string; deployId?: string; ok?: boolean; problems?: string[] };
      if (e.ev === 'watched') watched.set(e.deployId!, { ok: e.ok!, problems: e.problems! });
      else if (e.ev === 'stopped') {
        stopped = e as unknown as typeof stopped;
        for (const f of onStopped) f();
      }
    });
    send({ cmd: 'start', cookie: product.admin.cookie, readsPerSecond });

    const started = performance.now();
    const deadline = started + seconds * 1000;
    const warmupMs = Math.min(60_000, seconds * 100);
    const samples: Sample[] = [];
    const sampleEveryMs = Math.max(2_000, (seconds * 1000) / 120);
    const sampler = setInterval(() => {
      if (performance.now() - started < warmupMs) return;
      gc();
      gc();
      const mu = process.memoryUsage();
      samples.push({ at: (performance.now() - started) / 1000, rss: mu.rss / MiB, heap: mu.heapUsed / MiB });
    }, sampleEveryMs);
    cleanup.defer('memory sampler', () => clearInterval(sampler));

    let deployments = 0;
    let exact = 0;
    const failures: string[] = [];
    const deployLoop = async (projectId: string) => {
      while (performance.now() < deadline) {
        const id = await product.deploy(projectId);
        deployments++;
        send({ cmd: 'watch', deployId: id, viewers, lines });
        try {
          await product.jobFinished(id, 120_000);
        } catch (err) {
          failures.push(`${id}: ${(err as Error).message}`);
          continue;
        }
        const { rows } = await product.pool.query<{ status: string }>(
          'select status from deployments where id = $1',
          [id],
        );
        const status = rows[0]?.status;
        const linesExact = exactLines(await product.stepOutput(id, 1), lines);
        if (status === 'success' && linesExact) exact++;
        else failures.push(`${id}: ${status}, lines exact: ${linesExact}`);
        product.forget(id);
        const elapsed = Math.round((performance.now() - started) / 1000);
        if (deployments % 10 === 0) log(`soak: ${elapsed}/${seconds} s, ${deployments} deployments`);
      }
    };
    await Promise.all(projects.map(deployLoop));
    clearInterval(sampler);

    // The viewers of the last deployments finish after them; then the reads stop.
    const watchDeadline = performance.now() + 60_000;
    while (watched.size < deployments && performance.now() < watchDeadline) await sleep(100);
    send({ cmd: 'stop' });
    if (!stopped) await new Promise<void>((resolve) => onStopped.push(resolve));
    const load_ = stopped!;

    const viewersExact = [...watched.values()].filter((w) => w.ok).length;
    const viewerProblems = [...watched.entries()].filter(([, w]) => !w.ok);
    const span = samples.length > 0 ? samples.at(-1)!.at - samples[0]!.at : 0;
    const windowS = Math.min(60, span / 6);
    const first = samples.filter((s) => s.at <= samples[0]!.at + windowS);
    const last = samples.filter((s) => s.at >= samples.at(-1)!.at - windowS);
    const mean = (list: Sample[], f: (s: Sample) => number) =>
      list.reduce((n, s) => n + f(s), 0) / list.length;
    const half = samples.filter((s) => s.at >= samples[0]!.at + span / 2);
    const perMinute = (f: (s: Sample) => number) => slope(half.map((s) => [s.at / 60, f(s)]));
    const memoryRow = (figure: string, f: (s: Sample) => number): ResultRow => ({
      benchmark: 'soak',
      figure,
      product: mean(last, f),
      baseline: mean(first, f),
      baselineName: `the same run's first ${fmt(windowS)} s of samples, after ${fmt(warmupMs / 1000)} s warm-up`,
      ratio: mean(first, f) / mean(last, f),
      ratioIs: 'baseline/product',
    });
    const rows: ResultRow[] = [
      memoryRow(`MiB JS heap after GC, last ${fmt(windowS)} s vs first`, (s) => s.heap),
      memoryRow(`MiB RSS, last ${fmt(windowS)} s vs first`, (s) => s.rss),
      { benchmark: 'soak', figure: 'MiB/min JS heap slope, second half', product: perMinute((s) => s.heap) },
      { benchmark: 'soak', figure: 'MiB/min RSS slope, second half', product: perMinute((s) => s.rss) },
      {
        benchmark: 'soak',
        figure: `deployments not exact (of ${deployments})`,
        product: deployments - exact,
      },
      {
        benchmark: 'soak',
        figure: `viewer streams not exact (of ${watched.size})`,
        product: watched.size - viewersExact,
      },
      { benchmark: 'soak', figure: `API reads not 200 (of ${load_.reads})`, product: load_.readErrors },
    ];
    const notes = [
      `soak: ${seconds} s, ${agents} agents × one deployment at a time (${lines} lines at ${rate} lines/s each), ` +
        `${viewers} SSE viewers per deployment, ${readsPerSecond} API reads/s; ${deployments} deployments, ${exact} exact; ` +
        `${watched.size} deployments watched (${watched.size * viewers} streams), ${viewersExact} exact; ` +
        `${load_.reads} reads, ${load_.readErrors} not 200, p50 ${fmt(load_.readMs[0])} p99 ${fmt(load_.readMs[1])} ms.`,
      `soak: memory samples (s: RSS / heap MiB) ${samples
        .filter((_, i) => i % Math.max(1, Math.floor(samples.length / 12)) === 0 || i === samples.length - 1)
        .map((s) => `${fmt(s.at)}: ${fmt(s.rss)} / ${fmt(s.heap)}`)
        .join(', ')}.`,
      'soak: this process holds the coordinator, its pino logger and the deploy loop (the viewers and readers are in lib/soak-load.ts).',
      ...failures.slice(0, 5).map((f) => `soak: deployment problem: ${f}`),
      ...viewerProblems
        .slice(0, 5)
        .map(([id, w]) => `soak: viewer problem on ${id}: ${w.problems.slice(0, 3).join('; ')}`),
    ];
    return { rows, notes };
  },
};
