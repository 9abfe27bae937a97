// What every benchmark shares: the result shape, the cleanup stack, the round schedule
// (warm-up, then product and baselines interleaved in rotating order) and the statistics.

/**
 * One line of the results table: a product figure beside its baseline, as a ratio; or a product
 * figure alone (memory, latency through the API), where the benchmark has no baseline for it.
 */
export interface ResultRow {
  benchmark: string;
  /** What the figures are, e.g. "median ms", "median MB/s". */
  figure: string;
  product: number;
  baseline?: number;
  /** What the baseline is, e.g. "bare ws relay + bash". */
  baselineName?: string;
  /** product/baseline for throughput, baseline/product for latency: higher is better either way. */
  ratio?: number;
  ratioIs?: 'product/baseline' | 'baseline/product';
}

export interface BenchOutcome {
  rows: ResultRow[];
  /** Diagnostics printed under the table (breakdowns, frame sizes, the chosen batch size). */
  notes: string[];
}

export interface BenchContext {
  /** Everything the benchmark starts is registered here and stopped in reverse order, even on failure. */
  cleanup: Cleanup;
  /** Progress lines (stderr), so that stdout keeps the table. */
  log(message: string): void;
}

export interface Benchmark {
  name: string;
  description: string;
  run(ctx: BenchContext): Promise<BenchOutcome>;
}

const CLEANUP_STEP_TIMEOUT_MS = 30_000;

/**
 * A stack of things to stop; `run()` stops them newest first and never throws. A `run()` while
 * another is under way (Ctrl-C while a benchmark is stopping its own things) joins it, so the
 * steps still run one at a time, in order.
 */
export class Cleanup {
  readonly #steps: Array<{ name: string; fn: () => unknown }> = [];
  #running: Promise<void> | undefined;

  defer(name: string, fn: () => unknown): void {
    this.#steps.push({ name, fn });
  }

  /** A nested stack, stopped with this one if it is still holding something then. */
  child(name: string): Cleanup {
    const child = new Cleanup();
    this.defer(name, () => child.run());
    return child;
  }

  run(): Promise<void> {
    this.#running ??= this.#drain().finally(() => (this.#running = undefined));
    return this.#running;
  }

  async #drain(): Promise<void> {
    for (let step = this.#steps.pop(); step; step = this.#steps.pop()) {
      let timer: NodeJS.Timeout | undefined;
      try {
        await Promise.race([
          Promise.resolve().then(step.fn),
          new Promise((_, reject) => {
            timer = setTimeout(
              () => reject(new Error(`still running after ${CLEANUP_STEP_TIMEOUT_MS} ms`)),
              CLEANUP_STEP_TIMEOUT_MS,
            );
          }),
        ]);
      } catch (err) {
        console.error(`cleanup: ${step.name} failed: ${err instanceof Error ? err.message : String(err)}`);
      } finally {
        clearTimeout(timer);
      }
    }
  }
}

/** A contestant of a benchmark: one measured round returns one number. */
export interface Contestant<T> {
  name: string;
  round(): Promise<T>;
}

/**
 * Runs `warmups` unrecorded rounds of every contestant, then `rounds` recorded ones, the
 * contestants interleaved within each round in an order that rotates from round to round (so
 * neither always runs first, right after the other's load).
 */
export async function interleave<T>(
  contestants: Contestant<T>[],
  opts: { warmups: number; rounds: number; log: (message: string) => void; label: string },
): Promise<Map<string, T[]>> {
  const results = new Map<string, T[]>(contestants.map((c) => [c.name, []]));
  const total = opts.warmups + opts.rounds;
  for (let i = 0; i < total; i++) {
    const warm = i < opts.warmups;
    const shift = i % contestants.length;
    const order = [...contestants.slice(shift), ...contestants.slice(0, shift)];
    for (const c of order) {
      const value = await c.round();
      if (!warm) results.get(c.name)!.push(value);
    }
    opts.log(
      `${opts.label}: ${warm ? `warm-up ${i + 1}/${opts.warmups}` : `round ${i + 1 - opts.warmups}/${opts.rounds}`}`,
    );
  }
  return results;
}

/** The q-quantile (0..1) by linear interpolation between closest ranks. */
export function quantile(values: readonly number[], q: number): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const pos = (sorted.length - 1) * q;
  const lo = Math.floor(pos);
  const hi = Math.ceil(pos);
  return sorted[lo]! + (sorted[hi]! - sorted[lo]!) * (pos - lo);
}

export const median = (values: readonly number[]) => quantile(values, 0.5);
export const p95 = (values: readonly number[]) => quantile(values, 0.95);

/** A number for the table: three significant digits, no exponent. */
export function fmt(value: number): string {
  if (!Number.isFinite(value)) return String(value);
  const abs = Math.abs(value);
  if (abs >= 100) return value.toFixed(0);
  if (abs >= 10) return value.toFixed(1);
  if (abs >= 1) return value.toFixed(2);
  return value.toPrecision(3);
}

export function formatTable(header: string[], rows: string[][]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: string[]) =>
    cells
      .map((c, i) => c.padEnd(widths[i]!))
      .join('  ')
      .trimEnd();
  return [line(header), line(widths.map((w) => '-'.repeat(w))), ...rows.map(line)].join('\n');
}

/** Rejects after `ms` with `what` in the message, unless `promise` settles first. */
export async function withTimeout<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      promise,
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`${what}: no answer within ${ms} ms`)), ms);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** A positive whole number from the environment, or `fallback`. */
export function envInt(name: string, fallback: number): number {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isSafeInteger(value) || value < 0)
    throw new Error(`${name} must be a whole number, not ${raw}`);
  return value;
}
