// output-throughput: how fast one agent's output gets through the coordinator into PostgreSQL.
//
// Product: one real agent runs `cat <file>` (a fixed file of log-like text, BENCH_OUTPUT_MIB MiB,
// random base64 lines, so PostgreSQL cannot compress it away). A round is measured from the
// coordinator handling the entry's `step.started` to the entry being complete in PostgreSQL
// (`step.finished` handled: status, output_bytes and finished_at written; the output stays in its
// log_chunks rows); afterwards the row is checked (finished_at set, output_bytes = the file's
// size). MB/s = 10^6 bytes/s.
//
// Baseline A (ws relay): a bare `ws` server here and client in a child process on loopback. The
// client runs the same `cat`, sends the same bytes in the protocol's framing (binary step.output
// frames of 256 KiB raw chunks, zero masking key), the server decodes each and answers an ack
// frame; no database.
//
// Baseline B (raw pg): the same bytes in 256 KiB chunks inserted into a table shaped like
// log_chunks (bigserial id, uuid entry id with its foreign key, bigint offset, bytea, timestamp,
// unique (entry, offset)) with multi-row INSERTs through `pg` on one connection, at the batch
// size (rows per INSERT) that was fastest in a sweep before the measured rounds. (COPY, the
// ceiling, is log-ingest's.)
import { randomBytes, randomUUID } from 'node:crypto';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import { MAX_CHUNK_BYTES } from '../protocol/src/index.ts';
import { createTestDatabase } from '../test/helpers/database.ts';
import {
  type Benchmark,
  type BenchOutcome,
  type Cleanup,
  envInt,
  fmt,
  interleave,
  median,
} from './lib/harness.ts';
import { startProduct } from './lib/product.ts';
import { startRelay } from './lib/ws-relay.ts';

const MiB = 1024 * 1024;
const BATCH_SIZES = [1, 4, 16, 64];
const ROUND_TIMEOUT_MS = 180_000;

const mbPerSecond = (bytes: number, ms: number) => bytes / 1e6 / (ms / 1000);

/** `size` bytes of log-like text: lines of 99 random base64 characters and a newline. */
async function writeOutputFile(file: string, size: number): Promise<void> {
  const text = Buffer.from(randomBytes(Math.ceil((size * 3) / 4)).toString('base64'), 'latin1');
  const out = Buffer.alloc(size);
  for (let at = 0; at < size; at += 100) {
    text.copy(out, at, at, Math.min(at + 99, size));
    if (at + 99 < size) out[at + 99] = 0x0a;
  }
  await writeFile(file, out);
}

interface RawPg {
  round(batch: number): Promise<number>;
}

async function startRawPg(cleanup: Cleanup, data: Buffer): Promise<RawPg> {
  const db = await createTestDatabase();
  cleanup.defer('raw pg database', () => db.drop());
  const client = new pg.Client({ connectionString: db.url });
  client.on('error', () => undefined);
  await client.connect();
  cleanup.defer('raw pg connection', () => client.end());
  await client.query(`create table bench_log_entries (id uuid primary key)`);
  await client.query(
    `create table bench_log_chunks (
       id bigserial primary key,
       log_entry_id uuid not null references bench_log_entries (id) on delete cascade,
       "offset" bigint not null,
       data bytea not null,
       created_at timestamptz(3) not null,
       unique (log_entry_id, "offset"))`,
  );
  const chunks: Array<{ offset: number; data: Buffer }> = [];
  for (let at = 0; at < data.length; at += MAX_CHUNK_BYTES) {
    chunks.push({ offset: at, data: data.subarray(at, at + MAX_CHUNK_BYTES) });
  }
  return {
    async round(batch) {
      await client.query('truncate bench_log_chunks, bench_log_entries');
      const entryId = randomUUID();
      await client.query('insert into bench_log_entries (id) values ($1)', [entryId]);
      const start = performance.now();
      for (let i = 0; i < chunks.length; i += batch) {
        const rows = chunks.slice(i, i + batch);
        const values = rows.map((_, j) => `($1, $${2 * j + 2}, $${2 * j + 3}, now())`).join(', ');
        await client.query(
          `insert into bench_log_chunks (log_entry_id, "offset", data, created_at) values ${values}
           on conflict (log_entry_id, "offset") do nothing`,
          [entryId, ...rows.flatMap((c) => [c.offset, c.data])],
        );
      }
      const ms = performance.now() - start;
      return mbPerSecond(data.length, ms);
    },
  };
}

/** Diagnostics of one product round. */
interface ProductRound {
  frames: number;
  bytes: number;
  /** step.started handled → last chunk stored. */
  ingestMs: number;
  /** Time spent inside JobService.outputs() over the round. */
  outputBusyMs: number;
  /** step.started → step.finished arriving on the coordinator's socket: the agent's side of the round. */
  deliveredMs: number;
  /** step.finished arrived on the socket → handled (waiting behind the queued output frames). */
  queuedMs: number;
  /** Handling step.finished: entry completion (status, output_bytes, finished_at). */
  completeMs: number;
}

export const outputThroughput: Benchmark = {
  name: 'output-throughput',
  description:
    'one agent’s output through the coordinator into PostgreSQL, vs a bare ws relay and raw pg INSERTs',
  async run({ cleanup, log }): Promise<BenchOutcome> {
    const size = envInt('BENCH_OUTPUT_MIB', 32) * MiB;
    const warmups = envInt('BENCH_THROUGHPUT_WARMUPS', 1);
    const rounds = envInt('BENCH_THROUGHPUT_ROUNDS', 7);
    const dir = await mkdtemp(path.join(tmpdir(), 'deckhand-bench-output-'));
    cleanup.defer('output file', () => rm(dir, { recursive: true, force: true }));
    const file = path.join(dir, 'output.txt');
    await writeOutputFile(file, size);
    const data = await readFile(file);
    const command = `cat '${file}'`;

    log(
      `output-throughput: ${size / MiB} MiB per round; starting the coordinator, an agent and the baselines`,
    );
    // A per-step output cap (OUTPUT_LIMIT_BYTES, where the coordinator has one) above the size:
    // this measures how fast output is stored, not where it is cut.
    const product = await startProduct(cleanup, 'throughput', { OUTPUT_LIMIT_BYTES: String(size + MiB) });
    const projectId = await product.createProject('throughput', [command]);
    const relay = await startRelay(cleanup);
    const rawPg = await startRawPg(cleanup, data);

    // The raw pg baseline's batch size: the fastest of a sweep (best of two passes each).
    const sweep: string[] = [];
    let best = { batch: BATCH_SIZES[0]!, mbps: 0 };
    for (const batch of BATCH_SIZES) {
      const mbps = Math.max(await rawPg.round(batch), await rawPg.round(batch));
      sweep.push(`${batch}: ${fmt(mbps)}`);
      if (mbps > best.mbps) best = { batch, mbps };
    }
    log(`output-throughput: raw pg sweep (rows per INSERT: MB/s) ${sweep.join(', ')}`);

    const details: ProductRound[] = [];
    const productRound = async (): Promise<number> => {
      const id = await product.deploy(projectId);
      try {
        await product.jobFinished(id, ROUND_TIMEOUT_MS);
      } catch (err) {
        throw new Error(`${(err as Error).message}\n${await product.diagnostics()}`, { cause: err });
      }
      const {
        rows: [entry],
      } = await product.pool.query<{ status: string; done: boolean; output_bytes: string }>(
        `select d.status, e.finished_at is not null as done, e.output_bytes
           from deployments d join log_entries e on e.deployment_id = d.id and e.seq = 1
          where d.id = $1`,
        [id],
      );
      if (entry?.status !== 'success' || !entry.done || Number(entry.output_bytes) !== size) {
        throw new Error(
          `deployment ${id}: ${JSON.stringify(entry)}, expected success with ${size} bytes\n${await product.diagnostics()}`,
        );
      }
      const t = product.trace(id);
      const start = t.marks.get('started:1')!;
      const end = t.marks.get('finished:1')!;
      const frames = t.frames.get(1)!;
      details.push({
        frames: frames.count,
        bytes: frames.bytes,
        ingestMs: frames.lastStored - start,
        outputBusyMs: frames.busyMs,
        deliveredMs:
          (t.arrived.get('step.finished:1') ?? Number.NaN) - (t.arrived.get('step.started:1') ?? Number.NaN),
        queuedMs: t.marks.get('finishing:1')! - (t.arrived.get('step.finished:1') ?? Number.NaN),
        completeMs: end - t.marks.get('finishing:1')!,
      });
      return mbPerSecond(size, end - start);
    };

    const frameBytes = MAX_CHUNK_BYTES;
    const results = await interleave(
      [
        { name: 'product', round: productRound },
        {
          name: 'ws',
          round: async () => {
            const { bytes, ms } = await relay.throughputRound(command, frameBytes);
            if (bytes !== size) throw new Error(`ws relay moved ${bytes} bytes, not ${size}`);
            return mbPerSecond(bytes, ms);
          },
        },
        { name: 'pg', round: () => rawPg.round(best.batch) },
      ],
      { warmups, rounds, log, label: 'output-throughput' },
    );
    const prod = median(results.get('product')!);
    const ws = median(results.get('ws')!);
    const rawPgMbps = median(results.get('pg')!);
    const d = details.slice(-rounds);
    const m = (f: (r: ProductRound) => number) => median(d.map(f));
    const notes = [
      `output-throughput: ${size / MiB} MiB per round, ${rounds} rounds after ${warmups} warm-up(s); ` +
        `MB/s per round: product ${results.get('product')!.map(fmt).join(' ')}; ` +
        `ws ${results.get('ws')!.map(fmt).join(' ')}; pg ${results.get('pg')!.map(fmt).join(' ')}.`,
      `output-throughput: raw pg sweep, rows per INSERT of 256 KiB chunks: MB/s ${sweep.join(', ')} → ${best.batch}.`,
      'output-throughput: product round, medians:',
      `    step.output frames stored        ${fmt(m((r) => r.frames))} (mean ${fmt(m((r) => r.bytes / r.frames) / 1024)} KiB of output each; the protocol allows 256 KiB)`,
      `    step.started → last chunk stored ${fmt(m((r) => r.ingestMs))} ms (${fmt(m((r) => mbPerSecond(r.bytes, r.ingestMs)))} MB/s)`,
      `    inside JobService.outputs()      ${fmt(m((r) => r.outputBusyMs))} ms (${fmt(m((r) => r.outputBusyMs / r.frames))} ms per frame)`,
      `    agent: step.started → step.finished arrived ${fmt(m((r) => r.deliveredMs))} ms (${fmt(m((r) => mbPerSecond(r.bytes, r.deliveredMs)))} MB/s reach the coordinator's socket)`,
      `    step.finished queued in the hub  ${fmt(m((r) => r.queuedMs))} ms (arrived on the socket → handled)`,
      `    entry completion                 ${fmt(m((r) => r.completeMs))} ms (step.finished handled)`,
    ];
    return {
      rows: [
        {
          benchmark: 'output-throughput',
          figure: 'median MB/s',
          product: prod,
          baseline: ws,
          baselineName: 'bare ws relay, 256 KiB binary output frames, ack per frame',
          ratio: prod / ws,
          ratioIs: 'product/baseline',
        },
        {
          benchmark: 'output-throughput',
          figure: 'median MB/s',
          product: prod,
          baseline: rawPgMbps,
          baselineName: `raw pg multi-row INSERT, ${best.batch} × 256 KiB rows per statement`,
          ratio: prod / rawPgMbps,
          ratioIs: 'product/baseline',
        },
      ],
      notes,
    };
  },
};
