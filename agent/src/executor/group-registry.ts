// The process groups of running steps, also written down on disk (<work-dir>/.deckhand/groups/
// <pgid>, holding the leader's start time). An agent killed with SIGKILL or crashed cannot kill
// its steps' groups on the way out; the next agent process started on the same work folder finds
// them here and kills what is left before it connects, so a lost job's command never keeps
// running beside the next deployment. The start time guards against a reused pid.
import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';

/** The process's start time in clock ticks since boot (/proc/<pid>/stat field 22), if known. */
function startTime(pid: number): string | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // The command name (field 2) may contain spaces: count fields after its closing parenthesis.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return fields[19] ?? null;
  } catch {
    return null;
  }
}

export class GroupRegistry extends Set<number> {
  readonly #dir: string;

  constructor(workDir: string) {
    super();
    this.#dir = path.join(workDir, '.deckhand', 'groups');
    mkdirSync(this.#dir, { recursive: true, mode: 0o700 });
  }

  override add(pgid: number): this {
    super.add(pgid);
    try {
      writeFileSync(path.join(this.#dir, String(pgid)), startTime(pgid) ?? '');
    } catch {
      // Best effort: the in-memory set still lets a normal exit kill the group.
    }
    return this;
  }

  override delete(pgid: number): boolean {
    rmSync(path.join(this.#dir, String(pgid)), { force: true });
    return super.delete(pgid);
  }

  /** Kills the groups a previous agent process left running; returns the pgids killed. */
  killLeftovers(): number[] {
    const killed: number[] = [];
    for (const name of readdirSync(this.#dir)) {
      const pgid = Number(name);
      const file = path.join(this.#dir, name);
      const recorded = readFileSync(file, 'utf8').trim();
      rmSync(file, { force: true });
      if (!Number.isInteger(pgid) || pgid <= 1) continue;
      const now = startTime(pgid);
      // The leader may be gone while its group lives on; kill the group then too, unless the pid
      // now belongs to a different process (a different start time).
      if (now !== null && recorded !== '' && now !== recorded) continue;
      try {
        process.kill(-pgid, 'SIGKILL');
        killed.push(pgid);
      } catch {
        // Nothing left in that group.
      }
    }
    return killed;
  }
}
