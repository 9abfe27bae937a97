// A viewer of a deployment's log, in a process of its own (as a browser or `curl` would be), for
// log-ingest's latency rounds: `node bench/lib/log-reader.ts <base url> <poll|sse> <poll ms>`.
// It prints `ready`, then reads one JSON line from stdin: {deployId, cookie, lines}. It then reads
// the deployment through the API until it has seen `lines` lines shaped `<epoch ns> line <i>`, and
// prints one JSON line of results: for each such line, the time (epoch ms, µs precision) at which
// it was first readable in full, and the byte offset of its end in its log entry.
//
//   poll: GET /deploy/:id every <poll ms> (the next request starts that long after the previous
//         one started, or at once if it took longer); a line is readable when an answer holds it.
//   sse:  GET /deploy/:id/events; a line is readable when the read that completed it returns.
import { performance } from 'node:perf_hooks';
import { createInterface } from 'node:readline';

export interface ReaderResult {
  mode: 'poll' | 'sse';
  requests: number;
  /** Mean ms per poll request (answer read and parsed). */
  requestMs: number;
  /** [line number, printed (epoch ms), readable (epoch ms), end offset in the entry]. */
  seen: Array<[number, number, number, number]>;
  error?: string;
}

const LINE = /^(\d{16,20}) line (\d+)$/;
const TIMEOUT_MS = 60_000;
const FINAL = new Set(['success', 'failed', 'cancelled', 'timed_out']);

/** Wall-clock ms with sub-ms precision (performance.now() on the epoch origin). */
const wallMs = () => performance.timeOrigin + performance.now();
/** `date +%s%N` as epoch ms with µs precision. */
const nsToMs = (ns: string) => Number(BigInt(ns) / 1000n) / 1000;
const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

const [baseUrl, mode, pollArg] = process.argv.slice(2);
if (!baseUrl || (mode !== 'poll' && mode !== 'sse')) {
  console.error('usage: log-reader.ts <base url> <poll|sse> [poll ms]');
  process.exit(2);
}
const pollMs = Number(pollArg ?? 5);

const seen = new Map<number, [number, number, number, number]>();
/** Records each complete matching line of `text` (which starts at byte `base` of its entry) not seen yet. */
function scan(text: string, base: number, at: number): void {
  let start = 0;
  for (let nl = text.indexOf('\n'); nl !== -1; nl = text.indexOf('\n', start)) {
    const m = LINE.exec(text.slice(start, nl));
    if (m) {
      const i = Number(m[2]);
      // Lines are ASCII, so string positions are byte offsets.
      if (!seen.has(i)) seen.set(i, [i, nsToMs(m[1]!), at, base + nl + 1]);
    }
    start = nl + 1;
  }
}

async function poll(
  deployId: string,
  cookie: string,
  lines: number,
): Promise<{ requests: number; ms: number }> {
  const deadline = Date.now() + TIMEOUT_MS;
  let requests = 0;
  let busy = 0;
  while (seen.size < lines && Date.now() < deadline) {
    const started = performance.now();
    const res = await fetch(`${baseUrl}/deploy/${deployId}`, {
      headers: { cookie, accept: 'application/json' },
    });
    const body = (await res.json()) as {
      deployment?: { status: string };
      logs?: Array<{ log: string }>;
    };
    const at = wallMs();
    requests++;
    busy += performance.now() - started;
    if (res.status !== 200) throw new Error(`GET /deploy/${deployId}: ${res.status} ${JSON.stringify(body)}`);
    for (const entry of body.logs ?? []) scan(entry.log, 0, at);
    if (FINAL.has(body.deployment?.status ?? '')) break;
    const wait = pollMs - (performance.now() - started);
    if (wait > 0) await sleep(wait);
  }
  return { requests, ms: requests ? busy / requests : Number.NaN };
}

async function sse(deployId: string, cookie: string, lines: number): Promise<void> {
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), TIMEOUT_MS);
  try {
    const res = await fetch(`${baseUrl}/deploy/${deployId}/events`, {
      headers: { cookie, accept: 'text/event-stream' },
      signal: controller.signal,
    });
    if (res.status !== 200 || !res.body) throw new Error(`GET /deploy/${deployId}/events: ${res.status}`);
    const decoder = new TextDecoder();
    let buffered = '';
    // Per entry: the text after its last complete line, and that text's byte offset.
    const partial = new Map<string, { text: string; base: number }>();
    for await (const bytes of res.body) {
      const at = wallMs();
      buffered += decoder.decode(bytes, { stream: true });
      for (let end = buffered.indexOf('\n\n'); end !== -1; end = buffered.indexOf('\n\n')) {
        const block = buffered.slice(0, end);
        buffered = buffered.slice(end + 2);
        const event = /^event: (.*)$/m.exec(block)?.[1];
        const data = /^data: (.*)$/m.exec(block)?.[1];
        if (event === 'end') return;
        if (event !== 'output' || data === undefined) continue;
        const o = JSON.parse(data) as { entry_id: string; offset: number; text: string };
        const p = partial.get(o.entry_id) ?? { text: '', base: o.offset };
        const text = p.text + o.text;
        scan(text, p.base, at);
        const cut = text.lastIndexOf('\n') + 1;
        partial.set(o.entry_id, {
          text: text.slice(cut),
          base: p.base + Buffer.byteLength(text.slice(0, cut)),
        });
        if (seen.size >= lines) return;
      }
    }
  } finally {
    clearTimeout(timer);
    controller.abort();
  }
}

const input = createInterface({ input: process.stdin });
console.log('ready');
const first = await new Promise<string>((resolve) => input.once('line', resolve));
input.close();
const { deployId, cookie, lines } = JSON.parse(first) as { deployId: string; cookie: string; lines: number };
const result: ReaderResult = { mode, requests: 0, requestMs: Number.NaN, seen: [] };
try {
  if (mode === 'poll') {
    const p = await poll(deployId, cookie, lines);
    result.requests = p.requests;
    result.requestMs = p.ms;
  } else {
    await sse(deployId, cookie, lines);
    result.requests = 1;
  }
} catch (err) {
  result.error = err instanceof Error ? err.message : String(err);
}
result.seen = [...seen.values()].sort((a, b) => a[0] - b[0]);
console.log(JSON.stringify(result));
process.exit(0);
