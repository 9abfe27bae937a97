// dispatch-latency: how long from a trigger to the first byte of output stored.
//
// Product: one real agent online, a project whose one command is `echo go`. A round is
// `POST /deploy` (with the commit, as a push webhook gives it) → the first output of that
// deployment stored in PostgreSQL. The benchmark subscribes to the coordinator's deployment events
// (`app.services.events`) and, on each change, asks the database whether the deployment has
// output yet (a `log_chunks` row: output stays there); the time of the first change at which it
// has is the round's figure. The round then waits for the
// deployment to end, so rounds never overlap.
//
// Baseline: a bare `ws` server (here) and client (a child process) on loopback doing the same
// shape of work without a database: the server sends a JSON assign frame, the client spawns
// `bash -c 'echo go'` and sends its first output back as a binary step.output frame (the
// protocol's framing, zero masking key); send → decoded.
import { performance } from 'node:perf_hooks';
import {
  type Benchmark,
  type BenchOutcome,
  envInt,
  fmt,
  interleave,
  median,
  p95,
  withTimeout,
} from './lib/harness.ts';
import { FINAL_STATUSES, startProduct } from './lib/product.ts';
import { startRelay } from './lib/ws-relay.ts';

const COMMAND = 'echo go';
const ROUND_TIMEOUT_MS = 30_000;

// Has this deployment any output stored yet, and what is its status?
const CHECK_SQL = `
  select d.status,
         exists (select 1 from log_chunks c join log_entries e on e.id = c.log_entry_id
                  where e.deployment_id = d.id) as has_output
    from deployments d where d.id = $1`;

/** Milestones of one product round, in ms after the POST /deploy was sent. */
type Breakdown = Record<string, number>;

export const dispatchLatency: Benchmark = {
  name: 'dispatch-latency',
  description: 'POST /deploy → first output stored in PostgreSQL, vs a bare ws assign → output round trip',
  async run({ cleanup, log }): Promise<BenchOutcome> {
    const warmups = envInt('BENCH_LATENCY_WARMUPS', 3);
    const rounds = envInt('BENCH_LATENCY_ROUNDS', 30);
    log('dispatch-latency: starting the coordinator, an agent and the ws relay');
    const product = await startProduct(cleanup, 'latency');
    const projectId = await product.createProject('latency', [COMMAND]);
    const relay = await startRelay(cleanup);
    const events = product.coord.app.services.events;
    const breakdowns: Breakdown[] = [];

    const productRound = async (): Promise<number> => {
      const t0 = performance.now();
      const id = await product.deploy(projectId);
      const answered = performance.now();
      let firstStored: number | undefined;
      let resolveEnd!: (status: string) => void;
      let rejectEnd!: (err: Error) => void;
      const ended = new Promise<string>((resolve, reject) => {
        resolveEnd = resolve;
        rejectEnd = reject;
      });
      const checks = new Set<Promise<void>>();
      const check = (at: number) => {
        const p = product.pool
          .query<{ status: string; has_output: boolean }>(CHECK_SQL, [id])
          .then(({ rows: [row] }) => {
            if (!row) throw new Error(`deployment ${id} is gone`);
            if (row.has_output && (firstStored === undefined || at < firstStored)) firstStored = at;
            if (FINAL_STATUSES.has(row.status)) resolveEnd(row.status);
          })
          .catch((err: Error) => rejectEnd(err));
        checks.add(p);
        void p.finally(() => checks.delete(p));
      };
      const unsubscribe = events.subscribe(id, () => check(performance.now()));
      let status: string;
      try {
        const {
          rows: [row],
        } = await product.pool.query<{ has_output: boolean }>(CHECK_SQL, [id]);
        if (row?.has_output)
          throw new Error('output was stored before the benchmark subscribed: cannot time it');
        status = await withTimeout(ended, ROUND_TIMEOUT_MS, `deployment ${id} to end`);
        await Promise.all(checks);
      } catch (err) {
        throw new Error(`${(err as Error).message}\n${await product.diagnostics()}`, { cause: err });
      } finally {
        unsubscribe();
      }
      if (status !== 'success')
        throw new Error(`deployment ${id} ended ${status}\n${await product.diagnostics()}`);
      if (firstStored === undefined) throw new Error(`deployment ${id} ended without output`);
      const { marks, arrived } = product.trace(id);
      const since = (at: number | undefined) => (at ?? Number.NaN) - t0;
      breakdowns.push({
        'POST /deploy answered': answered - t0,
        'job.assign sent to the agent': since(marks.get('jobSent')),
        'job.accepted arrived': since(arrived.get('job.accepted')),
        'step.started 0 (checkout) arrived': since(arrived.get('step.started:0')),
        'first step.output arrived': since(arrived.get('step.output:0') ?? arrived.get('step.output:1')),
        'first output stored (events + SQL)': firstStored - t0,
        'first output stored (probe)': since(marks.get('firstOutput')),
        'step.finished 0 arrived': since(arrived.get('step.finished:0')),
        'step 0 entry completed': since(marks.get('finished:0')),
        "step.output 1 ('go') arrived": since(arrived.get('step.output:1')),
        "'go' stored": since(marks.get('firstOutput:1')),
        'job.finished handled': since(marks.get('jobFinished')),
      });
      return firstStored - t0;
    };

    const results = await interleave(
      [
        { name: 'product', round: productRound },
        { name: 'baseline', round: () => relay.latencyRound(COMMAND) },
      ],
      { warmups, rounds, log, label: 'dispatch-latency' },
    );
    const prod = results.get('product')!;
    const base = results.get('baseline')!;
    const baselineName = `bare ws relay, assign → bash -c '${COMMAND}' → output frame`;
    const recorded = breakdowns.slice(-rounds);
    const notes = [
      `dispatch-latency: ${rounds} rounds after ${warmups} warm-ups; product min ${fmt(Math.min(...prod))} ms, ` +
        `max ${fmt(Math.max(...prod))} ms; baseline min ${fmt(Math.min(...base))} ms, max ${fmt(Math.max(...base))} ms.`,
      'dispatch-latency: product milestones, median ms after POST /deploy was sent:',
      ...Object.keys(recorded[0] ?? {}).map(
        (k) => `    ${k.padEnd(36)} ${fmt(median(recorded.map((b) => b[k]!)))}`,
      ),
    ];
    return {
      rows: [
        {
          benchmark: 'dispatch-latency',
          figure: 'median ms',
          product: median(prod),
          baseline: median(base),
          baselineName,
          ratio: median(base) / median(prod),
          ratioIs: 'baseline/product',
        },
        {
          benchmark: 'dispatch-latency',
          figure: 'p95 ms',
          product: p95(prod),
          baseline: p95(base),
          baselineName,
          ratio: p95(base) / p95(prod),
          ratioIs: 'baseline/product',
        },
      ],
      notes,
    };
  },
};
