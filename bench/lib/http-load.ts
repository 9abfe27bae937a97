// The load generator of deploy-read, in a process of its own so that it does not share the event
// loop of the servers it loads: `node bench/lib/http-load.ts '<json options>'`. It runs one
// autocannon load (`rate` absent: as fast as `connections` keep-alive connections allow; `rate`
// given: that many requests per second in all) and prints one JSON line: LoadResult.
import autocannon from 'autocannon';

export interface LoadOptions {
  url: string;
  connections: number;
  seconds: number;
  /** Requests per second in all (autocannon's overallRate); absent: as fast as possible. */
  rate?: number;
  headers?: Record<string, string>;
}

export interface LoadResult {
  /** 2xx answers per second over the whole run. */
  rps: number;
  requests: number;
  non2xx: number;
  errors: number;
  timeouts: number;
  /** Latency percentiles, ms. */
  p50: number;
  p99: number;
  max: number;
  /** Response bytes per second. */
  bytesPerSecond: number;
}

const raw = process.argv[2];
if (!raw) {
  console.error("usage: http-load.ts '<json options>'");
  process.exit(2);
}
const opts = JSON.parse(raw) as LoadOptions;
const result = await autocannon({
  url: opts.url,
  connections: opts.connections,
  duration: opts.seconds,
  ...(opts.rate ? { overallRate: opts.rate } : {}),
  headers: opts.headers ?? {},
  timeout: 10,
});
const ok = result['2xx'];
const out: LoadResult = {
  rps: ok / result.duration,
  requests: result.requests.total,
  non2xx: result.non2xx,
  errors: result.errors,
  timeouts: result.timeouts,
  p50: result.latency.p50,
  p99: result.latency.p99,
  max: result.latency.max,
  bytesPerSecond: result.throughput.total / result.duration,
};
console.log(JSON.stringify(out));
