// Looking at real processes from the fault tests, through /proc (Linux): whether a pid is still a
// live process (a zombie is dead), the members of a process group, the processes working inside a
// folder (every command of a job runs with its cwd in the agent's work folder, and so does
// whatever it starts in the background), and a process's resident memory.
import { readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { readFile } from 'node:fs/promises';

interface ProcStat {
  pid: number;
  state: string;
  ppid: number;
  pgrp: number;
}

function procStat(pid: number | string): ProcStat | undefined {
  let raw: string;
  try {
    raw = readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return undefined;
  }
  // "pid (comm) state ppid pgrp …": comm may hold spaces and parentheses.
  const fields = raw.slice(raw.lastIndexOf(')') + 2).split(' ');
  return { pid: Number(pid), state: fields[0]!, ppid: Number(fields[1]), pgrp: Number(fields[2]) };
}

function allPids(): number[] {
  return readdirSync('/proc')
    .filter((e) => /^\d+$/.test(e))
    .map(Number);
}

const live = (s: ProcStat | undefined): s is ProcStat =>
  s !== undefined && s.state !== 'Z' && s.state !== 'X';

/** The process exists and is not a zombie. */
export function processAlive(pid: number): boolean {
  return live(procStat(pid));
}

/** Live members of the process group `pgid`. */
export function groupMembers(pgid: number): number[] {
  return allPids()
    .map((p) => procStat(p))
    .filter(live)
    .filter((s) => s.pgrp === pgid)
    .map((s) => s.pid);
}

export interface ProcessInfo {
  pid: number;
  cwd: string;
  cmdline: string;
}

/** Live processes whose working directory is `dir` or inside it (also once `dir` was deleted). */
export function processesUnder(...dirs: string[]): ProcessInfo[] {
  const found: ProcessInfo[] = [];
  for (const pid of allPids()) {
    if (pid === process.pid || !live(procStat(pid))) continue;
    let cwd: string;
    try {
      cwd = readlinkSync(`/proc/${pid}/cwd`);
    } catch {
      continue;
    }
    if (!dirs.some((d) => cwd === d || cwd.startsWith(`${d}/`) || cwd === `${d} (deleted)`)) continue;
    let cmdline = '';
    try {
      cmdline = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').join(' ').trim();
    } catch {
      // exited while we looked
    }
    found.push({ pid, cwd, cmdline });
  }
  return found;
}

/** SIGKILL to each pid that is still alive (test cleanup); returns those it had to kill. */
export function killAlive(pids: number[]): number[] {
  const killed: number[] = [];
  for (const pid of pids) {
    if (!processAlive(pid)) continue;
    try {
      process.kill(pid, 'SIGKILL');
      killed.push(pid);
    } catch {
      // gone meanwhile
    }
  }
  return killed;
}

/** Pids written one per line (or space separated) into `file` by a command (`echo $$ >> file`). */
export async function readPids(file: string): Promise<number[]> {
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch {
    return [];
  }
  return text
    .split(/\s+/)
    .filter((s) => /^\d+$/.test(s))
    .map(Number);
}

/** Resident memory of `pid` in bytes (VmRSS), or undefined once it is gone. */
export function rssBytes(pid: number): number | undefined {
  try {
    const m = /^VmRSS:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) * 1024 : undefined;
  } catch {
    return undefined;
  }
}

/** Samples `pid`'s RSS every `everyMs` until stopped: the highest value and how many samples. */
export function sampleRss(pid: number, everyMs = 100) {
  let max = 0;
  let samples = 0;
  const take = () => {
    const rss = rssBytes(pid);
    if (rss === undefined) return;
    samples += 1;
    if (rss > max) max = rss;
  };
  take();
  const timer = setInterval(take, everyMs);
  return {
    stop(): { maxBytes: number; samples: number } {
      clearInterval(timer);
      take();
      return { maxBytes: max, samples };
    },
  };
}
