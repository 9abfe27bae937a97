// Retention: finished deployments older than RETENTION_DAYS (or the project's retention_days) are
// pruned with their logs; queued/running ones and each project's latest success never are.
import { describe, expect, it } from 'vitest';
import { coordinatorWithAdmin, createProject } from '../helpers/coordinator.ts';
import { patch } from '../helpers/projects.ts';
import { sql } from '../helpers/sql.ts';

const api = coordinatorWithAdmin({ RETENTION_DAYS: '30' });

/** A deployment of the project, then aged: status and finished `daysAgo` days ago, with a log entry and a chunk. */
async function deployment(projectId: string, status: string, daysAgo: number | null): Promise<string> {
  const res = await api.admin.post('/deploy', { projectId, commit: 'a'.repeat(40) });
  expect(res.status, res.text).toBe(200);
  const id = res.json.deployId as string;
  if (daysAgo !== null) {
    await sql(
      api.coord,
      `update deployments set status = ?, started_at = now() - ? * interval '1 day',
              finished_at = now() - ? * interval '1 day' where id = ?`,
      [status, daysAgo, daysAgo, id],
    );
    const [entry] = await sql(
      api.coord,
      `insert into log_entries (id, created_at, deployment_id, seq, host, cmd, status, success, output_bytes, started_at, finished_at)
       values (gen_random_uuid(), now(), ?, 1, 'h', 'echo', ?, false, 3, now(), now()) returning id`,
      [id, status === 'success' ? 'success' : 'failed'],
    );
    await sql(
      api.coord,
      `insert into log_chunks (log_entry_id, "offset", data, created_at) values (?, 0, ?, now())`,
      [entry.id, Buffer.from('hi\n')],
    );
  }
  return id;
}

async function exists(id: string): Promise<boolean> {
  return (await sql(api.coord, 'select 1 from deployments where id = ?', [id])).length === 1;
}

describe('retention', () => {
  it('prunes finished deployments past the setting, with their logs, keeping the latest success and what has not ended', async () => {
    const projectId = (await createProject(api.admin)).json.project.id as string;
    const oldFailed = await deployment(projectId, 'failed', 60);
    const oldSuccess = await deployment(projectId, 'success', 50);
    const latestSuccess = await deployment(projectId, 'success', 40);
    const recent = await deployment(projectId, 'failed', 5);
    const queued = await deployment(projectId, 'queued', null);
    await sql(api.coord, `update deployments set started_at = now() - interval '90 days' where id = ?`, [
      queued,
    ]);

    const pruned = await api.coord.app.services.retention.pruneOnce();
    expect(pruned).toBe(2);
    expect(await exists(oldFailed)).toBe(false);
    expect(await exists(oldSuccess)).toBe(false);
    // The latest success stays even though it is old: it is what runs, and what rollback needs.
    expect(await exists(latestSuccess)).toBe(true);
    expect(await exists(recent)).toBe(true);
    expect(await exists(queued)).toBe(true);
    const [orphans] = await sql(
      api.coord,
      `select count(*)::int as n from log_chunks c where not exists (select 1 from log_entries e where e.id = c.log_entry_id)`,
    );
    expect(orphans.n).toBe(0);
    expect((await api.admin.get(`/deploy/${oldFailed}`)).status).toBe(404);
    // Nothing more to do: a second run prunes nothing.
    expect(await api.coord.app.services.retention.pruneOnce()).toBe(0);
  });

  it('a project may keep its history shorter or longer than the setting', async () => {
    const shortId = (await createProject(api.admin, { retention_days: 3 })).json.project.id as string;
    const longRes = await createProject(api.admin);
    const longId = longRes.json.project.id as string;
    const patched = await patch(api.admin, `/projects/${longId}`, { retention_days: 365 });
    expect(patched.status, patched.text).toBe(200);
    expect(patched.json.project.retention_days).toBe(365);
    const shortOld = await deployment(shortId, 'failed', 10);
    const longOld = await deployment(longId, 'failed', 100);
    await api.coord.app.services.retention.pruneOnce();
    expect(await exists(shortOld)).toBe(false);
    expect(await exists(longOld)).toBe(true);
    expect((await patch(api.admin, `/projects/${longId}`, { retention_days: 0 })).status).toBe(400);
  });
});
