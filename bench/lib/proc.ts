// What the kernel knows about the processes a benchmark runs (Linux /proc): resident memory,
// CPU time, and the whole machine's CPU, so a round can say how much memory each part held and
// how many CPU-seconds each part spent. Every reader returns NaN where /proc cannot tell (another
// OS, a process on another machine, one already gone): the figure is then shown as NaN, not guessed.
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';

const MiB = 1024 * 1024;

let ticksPerSecond: number | undefined;
/** The kernel's clock ticks per second (`getconf CLK_TCK`, 100 nearly everywhere). */
function clockTicks(): number {
  if (ticksPerSecond === undefined) {
    try {
      ticksPerSecond = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
    } catch {
      ticksPerSecond = 100;
    }
  }
  return ticksPerSecond;
}

/** A `kB` field of /proc/<pid>/status (VmRSS, VmHWM …) in MiB. */
export function statusMiB(pid: number, field: 'VmRSS' | 'VmHWM'): number {
  try {
    const status = readFileSync(`/proc/${pid}/status`, 'latin1');
    const m = new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(status);
    return m ? (Number(m[1]) * 1024) / MiB : Number.NaN;
  } catch {
    return Number.NaN;
  }
}

/** User + system CPU seconds the process has used so far (not its children's). */
export function cpuSeconds(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'latin1');
    // Fields after the command name (which may hold spaces), which ends with the last ')'.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(fields[11]) + Number(fields[12])) / clockTicks();
  } catch {
    return Number.NaN;
  }
}

/** CPU-seconds spent by a set of processes between two snapshots; one that appeared in between counts from 0. */
export function cpuBetween(before: Map<number, number>, after: Map<number, number>): number {
  let total = 0;
  for (const [pid, seconds] of after) total += seconds - (before.get(pid) ?? 0);
  return total;
}

export function cpuSnapshot(pids: Iterable<number>): Map<number, number> {
  const out = new Map<number, number>();
  for (const pid of pids) {
    const s = cpuSeconds(pid);
    if (Number.isFinite(s)) out.set(pid, s);
  }
  return out;
}

/** The whole machine's CPU counters (/proc/stat): busy and total seconds summed over all cores. */
export function machineCpu(): { busy: number; total: number } {
  try {
    const line = readFileSync('/proc/stat', 'latin1').split('\n')[0]!;
    const v = line.trim().split(/\s+/).slice(1).map(Number);
    // user nice system idle iowait irq softirq steal (guest time is already in user)
    const idle = (v[3] ?? 0) + (v[4] ?? 0);
    const total = v.slice(0, 8).reduce((a, b) => a + b, 0);
    return { busy: (total - idle) / clockTicks(), total: total / clockTicks() };
  } catch {
    return { busy: Number.NaN, total: Number.NaN };
  }
}

/** Samples resident memory every `intervalMs`: this process (process.memoryUsage().rss) and `pids` (VmRSS). */
export class MemorySampler {
  readonly #pids: number[];
  readonly #timer: NodeJS.Timeout;
  selfMax = 0;
  readonly max = new Map<number, number>();
  samples = 0;

  constructor(pids: number[], intervalMs = 100) {
    this.#pids = pids;
    this.sample();
    this.#timer = setInterval(() => this.sample(), intervalMs);
  }

  sample(): void {
    this.samples++;
    this.selfMax = Math.max(this.selfMax, process.memoryUsage.rss() / MiB);
    for (const pid of this.#pids) {
      const rss = statusMiB(pid, 'VmRSS');
      if (Number.isFinite(rss)) this.max.set(pid, Math.max(this.max.get(pid) ?? 0, rss));
    }
  }

  stop(): void {
    clearInterval(this.#timer);
    this.sample();
  }
}
