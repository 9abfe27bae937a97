// Deployments that end, for the notification suites. The notification worker reads deployment
// states from the database whatever code path wrote them, so these write them the way the job
// service does at the end of a deployment: the state, its reason and end time, and the log
// entries with their output.
import { randomUUID } from 'node:crypto';
import type { Client, TestCoordinator } from './coordinator.ts';
import { sql } from './sql.ts';

export interface EntrySpec {
  cmd: string;
  status: 'success' | 'failed' | 'cancelled' | 'timed_out' | 'skipped';
  exitCode?: number | null;
  output?: string | Buffer | null;
  host?: string;
}

/** Marks a (queued) deployment running, as the scheduler does when it starts it. */
export async function markRunning(coord: TestCoordinator, deployId: string, commit?: string): Promise<void> {
  await sql(
    coord,
    `update deployments set status = 'running', reason = null, commit = coalesce(?, commit) where id = ?`,
    [commit ?? null, deployId],
  );
}

/** Ends a deployment with `status`, `reason` and these log entries, in order. */
export async function endDeployment(
  coord: TestCoordinator,
  deployId: string,
  status: 'success' | 'failed' | 'cancelled' | 'timed_out',
  reason: string | null,
  entries: EntrySpec[] = [],
): Promise<void> {
  let seq = 0;
  const base = Date.now() - 60_000;
  for (const e of entries) {
    const output = e.output === undefined || e.output === null ? null : Buffer.from(e.output);
    await sql(
      coord,
      `insert into log_entries
         (id, created_at, deployment_id, seq, host, cmd, status, success, exit_code, started_at, finished_at,
          output, output_bytes)
       values (?, now(), ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
      [
        randomUUID(),
        deployId,
        seq,
        e.host ?? 'web-1',
        e.cmd,
        e.status,
        e.status === 'success',
        e.exitCode ?? (e.status === 'success' ? 0 : e.status === 'failed' ? 1 : null),
        new Date(base + seq * 1000).toISOString(),
        new Date(base + seq * 1000 + 500).toISOString(),
        output,
        output?.length ?? 0,
      ],
    );
    seq++;
  }
  await sql(coord, `update deployments set status = ?, reason = ?, finished_at = now() where id = ?`, [
    status,
    reason,
    deployId,
  ]);
}

/** Polls `probe` until it returns something truthy. */
export async function eventually<T>(
  probe: () => Promise<T | null | undefined | false>,
  timeoutMs = 10_000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: T | null | undefined | false;
  while (Date.now() < deadline) {
    last = await probe();
    if (last) return last;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`condition not met within ${timeoutMs} ms (last: ${JSON.stringify(last)})`);
}

/** The deployment state the notification worker has noticed, or null. */
export async function noticed(coord: TestCoordinator, deployId: string): Promise<string | null> {
  const [row] = await sql(coord, 'select status from deployment_notices where deployment_id = ?', [deployId]);
  return row?.status ?? null;
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- the notification record JSON
export async function notificationsOf(client: Client, projectId: string, channel?: string): Promise<any[]> {
  const res = await client.get(`/projects/${projectId}/notifications${channel ? `?channel=${channel}` : ''}`);
  if (res.status !== 200) throw new Error(`GET notifications: ${res.status} ${res.text}`);
  return res.json.notifications;
}

/** Environment for a coordinator whose notifications run fast: polled every 100 ms, retried soon. */
export const FAST_NOTIFY = {
  NOTIFY_INTERVAL_MS: '100',
  NOTIFY_RETRY_BASE_MS: '200',
  NOTIFY_RETRY_ATTEMPTS: '3',
};
