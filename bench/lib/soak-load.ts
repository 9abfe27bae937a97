// The soak's viewers and readers, in a process of their own (as browsers and scripts would be, so
// the coordinator's process holds only the coordinator): `node bench/lib/soak-load.ts <base url>`.
// Commands, one JSON line each on stdin:
//   {cmd:'start', cookie, readsPerSecond}  starts the API reads: every 1/readsPerSecond s, in turn,
//                GET /deploy/:id (JSON) of the newest deployment watched so far, GET /projects and
//                GET /agents; each answer must be 200
//   {cmd:'watch', deployId, viewers, lines} opens `viewers` event streams (GET /deploy/:id/events)
//                from the start; each reads until the `end` event and checks it saw exactly lines
//                `… line 1` to `… line <lines>`, in order → {ev:'watched', deployId, ok, problems}
//   {cmd:'stop'} → {ev:'stopped', reads, readErrors, readMs: [p50, p99]}, then exits
import { performance } from 'node:perf_hooks';
import { createInterface } from 'node:readline';

const base = process.argv[2]!;
const out = (event: object) => process.stdout.write(`${JSON.stringify(event)}\n`);
let cookie = '';
let newest: string | undefined;
let reads = 0;
let readErrors = 0;
const readMs: number[] = [];
let readTimer: NodeJS.Timeout | undefined;
const LINE = /^\S+ line (\d+)$/;

async function read(turn: number): Promise<void> {
  const paths = [newest ? `/deploy/${newest}` : '/projects', '/projects', '/agents'];
  const started = performance.now();
  try {
    const res = await fetch(base + paths[turn % paths.length]!, {
      headers: { cookie, accept: 'application/json' },
    });
    await res.arrayBuffer();
    if (res.status !== 200) readErrors++;
  } catch {
    readErrors++;
  }
  reads++;
  if (readMs.length < 200_000) readMs.push(performance.now() - started);
}

/** One viewer: the whole event stream of a deployment; the problems it saw (none when exact). */
async function view(deployId: string, lines: number): Promise<string[]> {
  const res = await fetch(`${base}/deploy/${deployId}/events`, {
    headers: { cookie, accept: 'text/event-stream' },
    signal: AbortSignal.timeout(300_000),
  });
  if (res.status !== 200 || !res.body) return [`GET /deploy/${deployId}/events: ${res.status}`];
  const decoder = new TextDecoder();
  let buffered = '';
  const partial = new Map<string, string>();
  let next = 1;
  const problems: string[] = [];
  for await (const bytes of res.body) {
    buffered += decoder.decode(bytes, { stream: true });
    for (let end = buffered.indexOf('\n\n'); end !== -1; end = buffered.indexOf('\n\n')) {
      const block = buffered.slice(0, end);
      buffered = buffered.slice(end + 2);
      const event = /^event: (.*)$/m.exec(block)?.[1];
      const data = /^data: (.*)$/m.exec(block)?.[1];
      if (event === 'end') {
        if (next !== lines + 1) problems.push(`saw ${next - 1} of ${lines} lines`);
        return problems;
      }
      if (event !== 'output' || data === undefined) continue;
      const o = JSON.parse(data) as { entry_id: string; text: string };
      const text = (partial.get(o.entry_id) ?? '') + o.text;
      const cut = text.lastIndexOf('\n');
      partial.set(o.entry_id, text.slice(cut + 1));
      if (cut === -1) continue;
      for (const line of text.slice(0, cut).split('\n')) {
        const m = LINE.exec(line);
        if (!m) continue;
        if (Number(m[1]) !== next) problems.push(`line ${m[1]} where ${next} was due`);
        next = Number(m[1]) + 1;
      }
    }
  }
  problems.push('the stream ended without an end event');
  return problems;
}

for await (const line of createInterface({ input: process.stdin })) {
  const c = JSON.parse(line) as {
    cmd: string;
    cookie?: string;
    readsPerSecond?: number;
    deployId?: string;
    viewers?: number;
    lines?: number;
  };
  if (c.cmd === 'start') {
    cookie = c.cookie!;
    let turn = 0;
    readTimer = setInterval(() => void read(turn++), 1000 / c.readsPerSecond!);
  } else if (c.cmd === 'watch') {
    const { deployId, viewers, lines } = c as { deployId: string; viewers: number; lines: number };
    newest = deployId;
    void Promise.all(Array.from({ length: viewers }, () => view(deployId, lines).catch((e) => [String(e)])))
      .then((all) => all.flat())
      .then((problems) => out({ ev: 'watched', deployId, ok: problems.length === 0, problems }));
  } else if (c.cmd === 'stop') {
    clearInterval(readTimer);
    const sorted = [...readMs].sort((a, b) => a - b);
    const q = (p: number) => sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))] ?? NaN;
    out({ ev: 'stopped', reads, readErrors, readMs: [q(0.5), q(0.99)] });
    process.exit(0);
  }
}
