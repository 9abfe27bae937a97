// Read-only queries for the pages' overviews (the dashboard, the sign-in page's first run) that
// no single service owns: each project's latest deployment in one statement, whether any account
// exists yet.
import type { EntityManager } from '@mikro-orm/postgresql';
import { iso, isoOrNull } from '../common/schemas.ts';

export interface LatestDeployment {
  id: string;
  project_id: string;
  status: string;
  commit: string | null;
  branch: string;
  trigger: string;
  started_at: string;
  finished_at: string | null;
}

/** Whether the first (admin) account exists. */
export async function hasUsers(em: EntityManager): Promise<boolean> {
  const [row] = await em.execute<Array<{ any: boolean }>>('select exists(select 1 from users) as any');
  return Boolean(row?.any);
}

/** Each project's most recent deployment, by project id. */
export async function latestDeployments(em: EntityManager): Promise<Map<string, LatestDeployment>> {
  const rows = await em.execute<
    Array<
      Omit<LatestDeployment, 'started_at' | 'finished_at'> & {
        started_at: string | Date;
        finished_at: string | Date | null;
      }
    >
  >(
    `select distinct on (project_id) id, project_id, status, commit, branch, trigger, started_at, finished_at
       from deployments order by project_id, started_at desc, id desc`,
  );
  return new Map(
    rows.map((r) => [
      r.project_id,
      {
        ...r,
        started_at: iso(new Date(r.started_at)),
        finished_at: isoOrNull(r.finished_at === null ? null : new Date(r.finished_at)),
      },
    ]),
  );
}
