// Stopping a step's whole process group: SIGTERM, a grace period for a clean exit, then SIGKILL.
// The group, not the child, because deploy commands start grandchildren (`npm` → `node`,
// `cmd &`) that outlive the shell; they are signalled even after the shell itself has exited.
import { readdirSync, readFileSync } from 'node:fs';

export const KILL_GRACE_MS = 10_000;
const POLL_MS = 100;

function signalGroup(pgid: number, signal: NodeJS.Signals | 0): boolean {
  try {
    process.kill(-pgid, signal);
    return true;
  } catch (err) {
    // ESRCH: no process left in the group. EPERM: a member changed user (setuid); not ours to stop.
    if ((err as NodeJS.ErrnoException).code === 'ESRCH') return false;
    return true;
  }
}

/**
 * Whether any live (non-zombie) process remains in the group. A zombie is dead but still answers
 * signal 0 until its parent (maybe an init that never reaps) collects it, so on Linux /proc tells.
 */
export function groupAlive(pgid: number): boolean {
  if (!signalGroup(pgid, 0)) return false;
  if (process.platform !== 'linux') return true;
  try {
    for (const entry of readdirSync('/proc')) {
      if (!/^\d+$/.test(entry)) continue;
      let stat: string;
      try {
        stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      } catch {
        continue; // exited while we looked
      }
      // "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses, so split after the last ")".
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      if (Number(fields[2]) === pgid && fields[0] !== 'Z' && fields[0] !== 'X') return true;
    }
    return false;
  } catch {
    return true;
  }
}

/** SIGTERM to the group, then SIGKILL once `graceMs` has passed with anything still alive. */
export async function stopGroup(pgid: number, graceMs: number = KILL_GRACE_MS): Promise<'gone' | 'killed'> {
  if (!signalGroup(pgid, 'SIGTERM')) return 'gone';
  const deadline = Date.now() + graceMs;
  while (Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, Math.min(POLL_MS, Math.max(1, deadline - Date.now()))));
    if (!groupAlive(pgid)) return 'gone';
  }
  signalGroup(pgid, 'SIGKILL');
  return 'killed';
}

/** For a process about to exit: no waiting, everything in the group gets SIGKILL now. */
export function killGroupNow(pgid: number): void {
  signalGroup(pgid, 'SIGKILL');
}
