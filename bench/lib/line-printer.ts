// A command that prints timestamped lines at a steady rate, for e2e-latency:
// `node bench/lib/line-printer.ts <lines per second> <lines>`. Line i (from 1) is due at
// start + (i − 1) / rate; each is written when due (a few at once when the timer is late) as
// `<wall-clock ms, µs precision> line <i>`, the time taken just before its write (stdout is a pipe:
// synchronous on Linux). The page that shows it takes its arrival on the same machine clock.
import { performance } from 'node:perf_hooks';

const rate = Number(process.argv[2]);
const total = Number(process.argv[3]);
if (!(rate > 0) || !Number.isSafeInteger(total) || total < 1) {
  console.error('usage: line-printer.ts <lines per second> <lines>');
  process.exit(2);
}
const wallMs = () => performance.timeOrigin + performance.now();
const start = performance.now();
let next = 1;

function tick(): void {
  const now = performance.now();
  let out = '';
  while (next <= total && start + ((next - 1) * 1000) / rate <= now) {
    out += `${wallMs().toFixed(3)} line ${next}\n`;
    next++;
  }
  if (out) process.stdout.write(out);
  if (next > total) return;
  setTimeout(tick, Math.max(0, start + ((next - 1) * 1000) / rate - performance.now()));
}
tick();
