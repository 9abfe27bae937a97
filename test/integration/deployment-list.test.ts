// GET /deployments (API.md "Deployments"): every deployment, newest first, filtered by project.
import { beforeAll, describe, expect, it } from 'vitest';
import { Client, coordinatorWithAdmin } from '../helpers/coordinator.ts';
import { deploymentTools } from '../helpers/deployments.ts';
import { sql } from '../helpers/sql.ts';

const api = coordinatorWithAdmin();
const { createProject, deploy } = deploymentTools(api);

describe('GET /deployments', () => {
  let projectA: string;
  let projectB: string;
  const idsA: string[] = [];
  let idB: string;

  beforeAll(async () => {
    projectA = (await createProject()).id;
    projectB = (await createProject()).id;
    for (let i = 0; i < 5; i++) idsA.push(await deploy(projectA));
    idB = await deploy(projectB);
  });

  it('lists deployments newest first, with the deployment fields', async () => {
    const res = await api.admin.get('/deployments');
    expect(res.status).toBe(200);
    expect(res.json.success).toBe(true);
    const list = res.json.deployments as Array<{ id: string; started_at: string }>;
    expect(list.length).toBeGreaterThanOrEqual(6);
    const times = list.map((d) => Date.parse(d.started_at));
    expect([...times].sort((a, b) => b - a)).toEqual(times);
    expect(list[0]!.id).toBe(idB);
    expect(list[0]).toMatchObject({ proj_id: projectB, status: 'queued', trigger: 'manual' });
  });

  it('filters by project_id', async () => {
    const res = await api.admin.get(`/deployments?project_id=${projectA}`);
    expect(res.status).toBe(200);
    const ids = (res.json.deployments as Array<{ id: string; proj_id: string }>).map((d) => d.id);
    expect(ids).toEqual([...idsA].reverse());
  });

  it('filters by status', async () => {
    await sql(api.coord, `update deployments set status = 'failed', finished_at = now() where id = ?`, [
      idsA[0],
    ]);
    const failed = await api.admin.get(`/deployments?status=failed&project_id=${projectA}`);
    expect(failed.status).toBe(200);
    expect(failed.json.deployments.map((d: { id: string }) => d.id)).toEqual([idsA[0]]);
    expect(failed.json.deployments[0].status).toBe('failed');
    const queued = await api.admin.get(`/deployments?status=queued&project_id=${projectA}`);
    expect(queued.json.deployments.map((d: { id: string }) => d.id)).toEqual(idsA.slice(1).reverse());
  });

  it('honours limit', async () => {
    const res = await api.admin.get(`/deployments?project_id=${projectA}&limit=2`);
    expect(res.status).toBe(200);
    expect(res.json.deployments).toHaveLength(2);
  });

  it('pages with before=<deployment id> without overlap or gaps', async () => {
    const seen: string[] = [];
    let before: string | null = null;
    for (let page = 0; page < 10; page++) {
      const query: string = `/deployments?project_id=${projectA}&limit=2${before ? `&before=${before}` : ''}`;
      const res = await api.admin.get(query);
      expect(res.status).toBe(200);
      const ids = (res.json.deployments as Array<{ id: string }>).map((d) => d.id);
      if (ids.length === 0) break;
      seen.push(...ids);
      before = ids.at(-1)!;
    }
    expect(seen).toEqual([...idsA].reverse());
    expect(new Set(seen).size).toBe(seen.length);
  });

  it('pages correctly when several deployments share the same started_at', async () => {
    const project = (await createProject()).id;
    const ids: string[] = [];
    for (let i = 0; i < 4; i++) ids.push(await deploy(project));
    await sql(
      api.coord,
      `update deployments set started_at = '2031-06-01T00:00:00.000Z' where project_id = ?`,
      [project],
    );
    const all = (await api.admin.get(`/deployments?project_id=${project}`)).json.deployments.map(
      (d: { id: string }) => d.id,
    );
    expect([...all].sort()).toEqual([...ids].sort());
    const seen: string[] = [];
    let before: string | null = null;
    for (let page = 0; page < 10; page++) {
      const query: string = `/deployments?project_id=${project}&limit=1${before ? `&before=${before}` : ''}`;
      const ids2 = (await api.admin.get(query)).json.deployments.map((d: { id: string }) => d.id) as string[];
      if (ids2.length === 0) break;
      seen.push(...ids2);
      before = ids2.at(-1)!;
    }
    expect(seen).toEqual(all);
  });

  for (const status of ['bogus', 'SUCCESS', '']) {
    it(`refuses status=${JSON.stringify(status)} with 400`, async () => {
      const res = await api.admin.get(`/deployments?status=${encodeURIComponent(status)}`);
      expect(res.status).toBe(400);
      expect(res.json.success).toBe(false);
      expect(res.json.error).toEqual(expect.any(String));
    });
  }

  for (const query of ['limit=0', 'limit=abc', 'limit=100000', 'project_id=abc']) {
    it(`refuses ${query} with 400`, async () => {
      const res = await api.admin.get(`/deployments?${query}`);
      expect(res.status).toBe(400);
      expect(res.json.success).toBe(false);
    });
  }

  it('is 401 without a session', async () => {
    const res = await new Client(api.coord.url).get('/deployments');
    expect(res.status).toBe(401);
    expect(res.json).toEqual({ success: false, error: 'Authentication required' });
  });
});
