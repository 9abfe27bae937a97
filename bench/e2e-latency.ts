// e2e-latency: from a line printed on a real agent to that line in a real browser page, at 10, 100
// and 1,000 lines a second (issue #8, item 4; aim: p99 under 250 ms at 1,000 lines/s, no line
// lost or reordered).
//
// Product: a real coordinator and agent (lib/product.ts); the project's command waits for a go
// file, then runs lib/line-printer.ts, which prints `<wall-clock ms> line <i>` at the rate. Headless
// Chromium (test/helpers/browser.ts: Debian's chromium, fresh profile) opens the deployment's page
// /deploy/:id signed in as the admin; once its EventSource is open the go file is made. The page
// follows GET /deploy/:id/events and renders as it does for a person (ANSI renderer, once per
// animation frame). Baseline: lib/sse-relay.ts — the same printer run by a bare ws client process,
// each read of its output sent at once over a WebSocket to a relay that writes it to an event
// stream, appended by a minimal page in the same browser; no database. In both, lib/page-lines.ts
// records inside the page when each line was added to the document (one machine clock: the
// printer's and the page's wall clock) and the order the page showed them in.
//
// Per rate: BENCH_E2E_ROUNDS (2) rounds of each, interleaved, after BENCH_E2E_WARMUPS (1) at the
// first rate; a round prints rate × BENCH_E2E_SECONDS (5) lines. p50 and p99 over every line of
// the rate's rounds; ratio baseline/product.
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { launchBrowser } from '../test/helpers/browser.ts';
import {
  type Benchmark,
  type BenchOutcome,
  envInt,
  fmt,
  interleave,
  quantile,
  type ResultRow,
} from './lib/harness.ts';
import { checkLines, type PageLine, pageLines, recordLines, sseOpen } from './lib/page-lines.ts';
import { type DeploymentTrace, startProduct } from './lib/product.ts';
import { startSseRelay } from './lib/sse-relay.ts';

const RATES = [10, 100, 1000];
const PRINTER = fileURLToPath(new URL('./lib/line-printer.ts', import.meta.url));

interface Round {
  latencies: number[];
  lost: number;
  disordered: number;
  /** Product only, per line: printed → its frame on the coordinator's socket → stored → in the page. */
  parts?: Array<[agent: number, store: number, page: number]>;
}

/**
 * Splits each line's latency at its frame's arrival on the coordinator's socket and its storage
 * (the probes' chunk trace, lib/product.ts), finding the chunk that holds the line's newline from
 * the stored output.
 */
function splitLatencies(seen: PageLine[], output: string, trace: DeploymentTrace): Round['parts'] {
  const ends = new Map<number, number>();
  let at = 0;
  for (const line of output.split('\n')) {
    at += line.length + 1; // ASCII: characters are bytes
    const m = /^\S+ line (\d+)$/.exec(line);
    if (m) ends.set(Number(m[1]), at);
  }
  const chunks = trace.chunks.filter((c) => c.step === 1).sort((a, b) => a.offset - b.offset);
  const wall = (t: number) => performance.timeOrigin + t;
  const parts: NonNullable<Round['parts']> = [];
  for (const [i, printed, shown] of seen) {
    const end = ends.get(i);
    const chunk = chunks.find((c) => end !== undefined && c.offset < end && end <= c.offset + c.bytes);
    if (!chunk || !Number.isFinite(chunk.arrived)) continue;
    parts.push([wall(chunk.arrived) - printed, chunk.stored - chunk.arrived, shown - wall(chunk.stored)]);
  }
  return parts;
}

export const e2eLatency: Benchmark = {
  name: 'e2e-latency',
  description:
    'a line printed on a real agent to the deployment page in headless Chromium, at 10/100/1000 lines/s, vs a raw ws→SSE relay',
  async run({ cleanup, log }): Promise<BenchOutcome> {
    const seconds = envInt('BENCH_E2E_SECONDS', 5);
    const warmups = envInt('BENCH_E2E_WARMUPS', 1);
    const rounds = envInt('BENCH_E2E_ROUNDS', 2);
    const dir = await mkdtemp(path.join(tmpdir(), 'deckhand-bench-e2e-'));
    cleanup.defer('go files', () => rm(dir, { recursive: true, force: true }));

    log('e2e-latency: starting the coordinator, an agent, the raw relay and Chromium');
    const product = await startProduct(cleanup, 'e2e');
    const relay = await startSseRelay(cleanup);
    const browser = await launchBrowser();
    cleanup.defer('Chromium', () => browser.close());
    const [name, value] = product.admin.cookie!.split(/=(.*)/s) as [string, string];
    await browser.context.addCookies([{ name, value, url: product.coord.url }]);

    const printer = (rate: number, lines: number) => `'${process.execPath}' '${PRINTER}' ${rate} ${lines}`;
    const projects = new Map<number, { id: string; go: string }>();
    for (const rate of RATES) {
      const go = path.join(dir, `go-${rate}`);
      const id = await product.createProject(`e2e-${rate}`, [
        `while [ ! -e '${go}' ]; do sleep 0.01; done; rm -f '${go}'; ${printer(rate, rate * seconds)}`,
      ]);
      projects.set(rate, { id, go });
    }

    const lines = (rate: number) => rate * seconds;
    const timeout = (rate: number) => seconds * 1000 + 30_000 + lines(rate) * 2;
    const measure = (seen: PageLine[], count: number): Round => ({
      latencies: seen.map(([, printed, shown]) => shown - printed),
      ...checkLines(seen, count),
    });

    const productRound = async (rate: number): Promise<Round> => {
      const { id: projectId, go } = projects.get(rate)!;
      const id = await product.deploy(projectId);
      const page = await browser.newPage();
      try {
        await recordLines(page);
        await page.goto(`${product.coord.url}/deploy/${id}`);
        await sseOpen(page, 15_000);
        await writeFile(go, '');
        const seen = await pageLines(page, lines(rate), timeout(rate));
        await product.jobFinished(id, timeout(rate));
        const parts = splitLatencies(seen, await product.stepOutput(id, 1), product.trace(id));
        product.forget(id);
        return { ...measure(seen, lines(rate)), parts };
      } catch (err) {
        throw new Error(`${(err as Error).message}\n${await product.diagnostics()}`, { cause: err });
      } finally {
        await page.close();
      }
    };
    const relayRound = async (rate: number): Promise<Round> => {
      const page = await browser.newPage();
      try {
        await recordLines(page);
        await page.goto(relay.url);
        await sseOpen(page, 15_000);
        await relay.run(printer(rate, lines(rate)), timeout(rate));
        return measure(await pageLines(page, lines(rate), timeout(rate)), lines(rate));
      } finally {
        await page.close();
      }
    };

    const rows: ResultRow[] = [];
    const notes: string[] = [];
    let lostProduct = 0;
    let lostRelay = 0;
    for (const [k, rate] of RATES.entries()) {
      const results = await interleave<Round>(
        [
          { name: 'product', round: () => productRound(rate) },
          { name: 'relay', round: () => relayRound(rate) },
        ],
        { warmups: k === 0 ? warmups : 0, rounds, log, label: `e2e-latency ${rate} lines/s` },
      );
      const all = (who: string) => results.get(who)!.flatMap((r) => r.latencies);
      const sum = (who: string, f: (r: Round) => number) => results.get(who)!.reduce((n, r) => n + f(r), 0);
      const p = all('product');
      const b = all('relay');
      for (const q of [0.5, 0.99]) {
        const pv = quantile(p, q);
        const bv = quantile(b, q);
        rows.push({
          benchmark: 'e2e-latency',
          figure: `p${Math.round(q * 100)} ms printed → in the page, ${rate} lines/s`,
          product: pv,
          baseline: bv,
          baselineName: 'raw ws → SSE relay, minimal page, no database',
          ratio: bv / pv,
          ratioIs: 'baseline/product',
        });
      }
      const lp = sum('product', (r) => r.lost);
      const dp = sum('product', (r) => r.disordered);
      const lb = sum('relay', (r) => r.lost);
      const db = sum('relay', (r) => r.disordered);
      lostProduct += lp + dp;
      lostRelay += lb + db;
      const parts = results.get('product')!.flatMap((r) => r.parts ?? []);
      // Means (they add up to the mean latency; the parts' medians need not) and p99s.
      const part = (k: number) => {
        const values = parts.map((x) => x[k]!);
        return `${fmt(values.reduce((a, b) => a + b, 0) / values.length)} / ${fmt(quantile(values, 0.99))}`;
      };
      notes.push(
        `e2e-latency: ${rate} lines/s, product split (mean / p99 ms, ${parts.length} lines; mean total ${fmt(p.reduce((a, b) => a + b, 0) / p.length)} ms): printed → frame on the coordinator's socket ${part(0)}, → stored ${part(1)}, → in the page ${part(2)}.`,
      );
      notes.push(
        `e2e-latency: ${rate} lines/s, ${rounds} round(s) of ${lines(rate)} lines each: ` +
          `product p50 ${fmt(quantile(p, 0.5))} p99 ${fmt(quantile(p, 0.99))} max ${fmt(Math.max(...p))} ms, ` +
          `${lp} lost, ${dp} out of order; relay p50 ${fmt(quantile(b, 0.5))} p99 ${fmt(quantile(b, 0.99))} ` +
          `max ${fmt(Math.max(...b))} ms, ${lb} lost, ${db} out of order.`,
      );
    }
    rows.push({
      benchmark: 'e2e-latency',
      figure: 'lines lost or out of order, all rounds',
      product: lostProduct,
      baseline: lostRelay,
      baselineName: 'raw ws → SSE relay',
    });
    notes.push(
      'e2e-latency: the product page renders output once per animation frame and the agent flushes its output every 100 ms (or 256 KiB); the relay sends every read at once and the minimal page appends every event at once.',
    );
    if (browser.errors.length > 0) notes.push(`e2e-latency: page errors: ${browser.errors.join('; ')}`);
    return { rows, notes };
  },
};
