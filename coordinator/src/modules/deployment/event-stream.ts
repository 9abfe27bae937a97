// A deployment as a stream of events for viewers (GET /deploy/:id/events): its state, each log
// entry as it starts and ends, and the entries' output as it is stored — read from PostgreSQL,
// so what a viewer sees is exactly what is stored, whichever process stored it.
//
// Resuming: each event's id is a cursor saying how far the viewer got on every host. A host's
// steps are strictly sequential (seq 0, 1, 2 …), so per host two numbers suffice: how many of its
// entries were delivered completely, and how many output bytes of the next one (-1: not even its
// start). A reconnect with Last-Event-ID continues from there without gaps or repeats.
import type { EntityManager } from '@mikro-orm/postgresql';
import { iso, isoOrNull } from '../common/schemas.ts';

export interface StreamEvent {
  event: 'deployment' | 'entry' | 'output' | 'end';
  id: string;
  data: unknown;
}

interface HostCursor {
  done: number;
  offset: number;
}

export class Cursor {
  readonly hosts: HostCursor[];

  constructor(hosts: HostCursor[] = []) {
    this.hosts = hosts;
  }

  static parse(raw: string | undefined): Cursor {
    if (!raw?.startsWith('v1:')) return new Cursor();
    const body = raw.slice(3);
    if (body === '') return new Cursor();
    const hosts: HostCursor[] = [];
    for (const part of body.split(',')) {
      const m = /^(\d{1,6})\.(-1|\d{1,15})$/.exec(part);
      if (!m) return new Cursor();
      hosts.push({ done: Number(m[1]), offset: Number(m[2]) });
    }
    return new Cursor(hosts);
  }

  host(i: number): HostCursor {
    while (this.hosts.length <= i) this.hosts.push({ done: 0, offset: -1 });
    return this.hosts[i]!;
  }

  toString(): string {
    return `v1:${this.hosts.map((h) => `${h.done}.${h.offset}`).join(',')}`;
  }
}

interface DeploymentRow {
  id: string;
  project_id: string;
  status: string;
  reason: string | null;
  commit: string | null;
  branch: string;
  trigger: string;
  triggered_by: string;
  hosts: string[];
  started_at: Date | string;
  finished_at: Date | string | null;
}

interface EntryRow {
  id: string;
  seq: number;
  host: string;
  cmd: string;
  status: string;
  success: boolean;
  exit_code: number | null;
  started_at: Date | string;
  finished_at: Date | string | null;
  compacted: boolean;
  output_bytes: string | number;
}

const FINAL = new Set(['success', 'failed', 'cancelled', 'timed_out']);
const MAX_OUTPUT_EVENT = 64 * 1024;

const time = (v: Date | string) => iso(new Date(v));

/** How many leading bytes of `buf` end on a UTF-8 character boundary (holding back a split character). */
export function completeUtf8Prefix(buf: Buffer): number {
  const n = buf.length;
  for (let back = 1; back <= Math.min(3, n); back++) {
    const byte = buf[n - back]!;
    if ((byte & 0xc0) === 0x80) continue; // continuation byte: look further back
    const need = byte >= 0xf0 ? 4 : byte >= 0xe0 ? 3 : byte >= 0xc0 ? 2 : 1;
    return need > back ? n - back : n;
  }
  return n;
}

function deploymentJson(d: DeploymentRow) {
  return {
    id: d.id,
    proj_id: d.project_id,
    status: d.status,
    reason: d.reason,
    commit: d.commit,
    branch: d.branch,
    trigger: d.trigger,
    triggered_by: d.triggered_by,
    hosts: d.hosts,
    started_at: time(d.started_at),
    finished_at: d.finished_at === null ? null : time(d.finished_at),
  };
}

function entryJson(deploymentId: string, e: EntryRow) {
  return {
    id: e.id,
    deploy_id: deploymentId,
    host: e.host,
    seq: e.seq,
    cmd: e.cmd,
    status: e.status,
    success: e.success,
    exit_code: e.exit_code,
    started_at: time(e.started_at),
    finished_at: isoOrNull(e.finished_at === null ? null : new Date(e.finished_at)),
  };
}

/** Reads what is new for a viewer since its cursor; `lastState` suppresses repeated state events. */
export async function readSince(
  em: EntityManager,
  deploymentId: string,
  cursor: Cursor,
  lastState: string | null,
): Promise<{ events: StreamEvent[]; state: string; ended: boolean } | null> {
  const [d] = await em.execute<DeploymentRow[]>(
    `select id, project_id, status, reason, commit, branch, trigger, triggered_by, hosts, started_at, finished_at
       from deployments where id = ?`,
    [deploymentId],
  );
  if (!d) return null;
  const events: StreamEvent[] = [];
  const state = `${d.status}\u0000${d.reason ?? ''}\u0000${d.commit ?? ''}\u0000${d.hosts.join(',')}`;
  if (state !== lastState)
    events.push({ event: 'deployment', id: cursor.toString(), data: deploymentJson(d) });

  const entries = await em.execute<EntryRow[]>(
    `select id, seq, host, cmd, status, success, exit_code, started_at, finished_at,
            output is not null as compacted, output_bytes
       from log_entries where deployment_id = ? order by host, seq`,
    [deploymentId],
  );
  for (const [i, host] of d.hosts.entries()) {
    const cur = cursor.host(i);
    for (const e of entries.filter((x) => x.host === host && x.seq >= cur.done)) {
      if (e.seq !== cur.done) break;
      if (cur.offset === -1) {
        cur.offset = 0;
        events.push({ event: 'entry', id: cursor.toString(), data: entryJson(deploymentId, e) });
      }
      const finished = e.finished_at !== null;
      const bytes = await readOutput(em, e, cur.offset);
      // A finished entry's output is complete: its last bytes go out even if they end mid-character.
      const usable = finished ? bytes.length : completeUtf8Prefix(bytes);
      for (let at = 0; at < usable;) {
        // Pieces end on character boundaries, so no character is split between two events (a
        // piece that is one invalid run is taken whole).
        const window = bytes.subarray(at, Math.min(usable, at + MAX_OUTPUT_EVENT));
        const end = at + window.length < usable ? completeUtf8Prefix(window) || window.length : window.length;
        const piece = window.subarray(0, end);
        at += piece.length;
        const offset = cur.offset;
        cur.offset += piece.length;
        events.push({
          event: 'output',
          id: cursor.toString(),
          data: { entry_id: e.id, host, seq: e.seq, offset, text: piece.toString('utf8') },
        });
      }
      // Finished and delivered: the entry's final state, then on to the host's next step.
      if (finished && cur.offset >= Number(e.output_bytes)) {
        cur.done += 1;
        cur.offset = -1;
        events.push({ event: 'entry', id: cursor.toString(), data: entryJson(deploymentId, e) });
        continue;
      }
      break;
    }
  }
  const remaining = d.hosts.some((host, i) =>
    entries.some((e) => e.host === host && e.seq >= cursor.host(i).done),
  );
  const ended = FINAL.has(d.status) && !remaining;
  if (ended) events.push({ event: 'end', id: cursor.toString(), data: deploymentJson(d) });
  return { events, state, ended };
}

async function readOutput(em: EntityManager, e: EntryRow, from: number): Promise<Buffer> {
  if (e.compacted) {
    const [row] = await em.execute<Array<{ b: Buffer | null }>>(
      'select substring(output from ?) as b from log_entries where id = ?',
      [from + 1, e.id],
    );
    return row?.b ?? Buffer.alloc(0);
  }
  const chunks = await em.execute<Array<{ offset: string | number; data: Buffer }>>(
    `select "offset", data from log_chunks where log_entry_id = ? and "offset" + length(data) > ? order by "offset"`,
    [e.id, from],
  );
  if (chunks.length === 0) return Buffer.alloc(0);
  const first = Number(chunks[0]!.offset);
  const all = Buffer.concat(chunks.map((c) => c.data));
  return all.subarray(Math.max(0, from - first));
}
