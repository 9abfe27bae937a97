// The benchmarks (`npm run bench`; `npm run bench -- output-throughput` for some of them, by name).
//
// Every benchmark runs the product side by side with its baseline in the same run: warm-up rounds,
// then rounds of product and baseline interleaved, reported as medians (and p95 for latency) and
// as a ratio where higher is better. Without DATABASE_URL an embedded PostgreSQL is started
// (.data/bench-postgres, port 54331, like `npm test` does); each benchmark makes its own
// databases on it and drops them. Progress goes to stderr; the table and the machine to stdout.
// Everything started is stopped at the end, on failure, and on SIGINT/SIGTERM.
import { execFileSync } from 'node:child_process';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { type EmbeddedPostgres, startEmbeddedPostgres } from '../coordinator/src/db/embedded-postgres.ts';
import { agentCapacity } from './agent-capacity.ts';
import { deployRead } from './deploy-read.ts';
import { dispatchLatency } from './dispatch-latency.ts';
import { e2eLatency } from './e2e-latency.ts';
import { type Benchmark, type BenchOutcome, Cleanup, fmt, formatTable } from './lib/harness.ts';
import { logIngest } from './log-ingest.ts';
import { logRender } from './log-render.ts';
import { outputThroughput } from './output-throughput.ts';
import { soak } from './soak.ts';
import { wsFanIn } from './ws-fan-in.ts';

const BENCHMARKS: Benchmark[] = [
  dispatchLatency,
  outputThroughput,
  logIngest,
  deployRead,
  wsFanIn,
  agentCapacity,
  e2eLatency,
  logRender,
  soak,
];
const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const EMBEDDED_PORT = 54331;

const cleanup = new Cleanup();
let stopping = false;

async function onSignal(signal: NodeJS.Signals): Promise<void> {
  if (stopping) return;
  stopping = true;
  console.error(`\n${signal}: stopping everything the benchmarks started`);
  await cleanup.run();
  process.exit(128 + (os.constants.signals[signal] ?? 2));
}
process.on('SIGINT', (s) => void onSignal(s));
process.on('SIGTERM', (s) => void onSignal(s));

const log = (message: string) => console.error(`[bench] ${message}`);

async function startDatabase(): Promise<{ url: string; source: string }> {
  if (process.env.DATABASE_URL) return { url: process.env.DATABASE_URL, source: 'DATABASE_URL' };
  const dataDir = path.join(root, '.data', 'bench-postgres');
  const started = Date.now();
  const embedded: EmbeddedPostgres = await startEmbeddedPostgres({
    dataDir,
    port: EMBEDDED_PORT,
    database: 'postgres',
    log: {
      info() {},
      debug() {},
      warn(obj, msg) {
        console.error(`[embedded-postgres] ${msg ?? ''} ${JSON.stringify(obj)}`);
      },
    },
  });
  cleanup.defer('embedded PostgreSQL', () => embedded.stop());
  // This cluster is the benchmarks' own: databases a killed run left behind can go.
  await dropLeftovers(embedded.url);
  log(
    `embedded PostgreSQL on port ${EMBEDDED_PORT} (${path.relative(root, dataDir)}), ready in ${Date.now() - started} ms`,
  );
  return { url: embedded.url, source: `embedded, port ${EMBEDDED_PORT}` };
}

async function dropLeftovers(url: string): Promise<void> {
  const client = new pg.Client({ connectionString: url });
  client.on('error', () => undefined);
  await client.connect();
  try {
    const { rows } = await client.query<{ datname: string }>(
      `select datname from pg_database where datname like 'deckhand\\_test\\_%'`,
    );
    for (const { datname } of rows) {
      await client.query(`drop database if exists ${client.escapeIdentifier(datname)} with (force)`);
    }
    if (rows.length > 0) log(`dropped ${rows.length} database(s) left by an interrupted run`);
  } finally {
    await client.end();
  }
}

async function postgresVersion(url: string): Promise<string> {
  const client = new pg.Client({ connectionString: url });
  client.on('error', () => undefined);
  await client.connect();
  try {
    const { rows } = await client.query<{ server_version: string }>('show server_version');
    return rows[0]?.server_version ?? 'unknown';
  } finally {
    await client.end();
  }
}

function machine(pgVersion: string, pgSource: string): string[][] {
  const cpus = os.cpus();
  let kernel = `${os.type()} ${os.release()}`;
  try {
    kernel = execFileSync('uname', ['-sr'], { encoding: 'utf8' }).trim();
  } catch {
    // uname missing: os.release() will do
  }
  return [
    ['CPU', `${cpus[0]?.model ?? 'unknown'}`],
    ['cores', `${cpus.length} (available parallelism ${os.availableParallelism()})`],
    ['memory', `${(os.totalmem() / 1024 ** 3).toFixed(1)} GiB`],
    ['OS', `${kernel} ${os.arch()}`],
    ['Node.js', process.version],
    ['PostgreSQL', `${pgVersion} (${pgSource})`],
    ['date', new Date().toISOString()],
  ];
}

async function main(): Promise<number> {
  // Names, without options and an option's value (`--duration 60s`, soak's).
  const args = process.argv.slice(2);
  const names = args.filter((a, i) => !a.startsWith('-') && args[i - 1] !== '--duration');
  const unknown = names.filter((n) => !BENCHMARKS.some((b) => b.name === n));
  if (unknown.length > 0) {
    console.error(
      `unknown benchmark ${unknown.join(', ')}; there are: ${BENCHMARKS.map((b) => b.name).join(', ')}`,
    );
    return 2;
  }
  const chosen = names.length > 0 ? BENCHMARKS.filter((b) => names.includes(b.name)) : BENCHMARKS;
  const started = Date.now();
  const db = await startDatabase();
  // The test helpers (createTestDatabase, startCoordinator) make their databases on DATABASE_URL.
  process.env.DATABASE_URL = db.url;
  const pgVersion = await postgresVersion(db.url);

  const outcomes: BenchOutcome[] = [];
  let failed = 0;
  for (const bench of chosen) {
    if (stopping) break;
    log(`${bench.name}: ${bench.description}`);
    const scope = cleanup.child(bench.name);
    const t0 = Date.now();
    try {
      outcomes.push(await bench.run({ cleanup: scope, log }));
      log(`${bench.name}: done in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
    } catch (err) {
      failed++;
      const cause =
        err instanceof Error && err.cause !== undefined ? `\ncaused by: ${String(err.cause)}` : '';
      console.error(
        `[bench] ${bench.name} FAILED: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}${cause}`,
      );
    } finally {
      await scope.run();
    }
  }

  const rows = outcomes.flatMap((o) => o.rows);
  if (rows.length > 0) {
    console.log();
    console.log(
      formatTable(
        ['benchmark', 'figure', 'product', 'baseline', 'ratio', 'ratio is (higher = better)', 'baseline is'],
        rows.map((r) => [
          r.benchmark,
          r.figure,
          fmt(r.product),
          r.baseline === undefined ? '—' : fmt(r.baseline),
          r.ratio === undefined ? '—' : r.ratio.toFixed(3),
          r.ratioIs ?? '—',
          r.baselineName ?? '—',
        ]),
      ),
    );
    console.log();
    for (const note of outcomes.flatMap((o) => o.notes)) console.log(note);
  }
  console.log();
  console.log(formatTable(['machine', ''], machine(pgVersion, db.source)));
  console.log(
    `\n${chosen.length - failed} benchmark(s) done, ${failed} failed, in ${((Date.now() - started) / 1000).toFixed(0)} s`,
  );
  return failed > 0 ? 1 : 0;
}

let code = 1;
try {
  code = await main();
} catch (err) {
  console.error(`[bench] ${err instanceof Error ? (err.stack ?? err.message) : String(err)}`);
} finally {
  await cleanup.run();
}
// Exit explicitly: nothing may keep the process alive after the results.
process.exit(stopping ? 130 : code);
