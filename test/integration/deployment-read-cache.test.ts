// GET /deploy/:id keeps a finished deployment's logs (coordinator/src/modules/deployment/
// finished-logs.ts): read from PostgreSQL once the deployment has ended, then served from memory,
// while its own row and its project's are still read every time.
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { coordinatorWithAdmin } from '../helpers/coordinator.ts';
import { deploymentTools } from '../helpers/deployments.ts';
import { sql } from '../helpers/sql.ts';

const api = coordinatorWithAdmin();
const { createProject, deploy } = deploymentTools(api);

async function entryWithOutput(deployId: string, finished: boolean, output: string): Promise<string> {
  const id = randomUUID();
  await sql(
    api.coord,
    `insert into log_entries (id, created_at, deployment_id, seq, host, cmd, status, success, exit_code, started_at, finished_at)
     values (?, now(), ?, 1, 'web-1', 'make', ?, ?, ?, now(), ?)`,
    [
      id,
      deployId,
      finished ? 'success' : 'running',
      finished,
      finished ? 0 : null,
      finished ? new Date() : null,
    ],
  );
  await appendOutput(id, 0, output);
  return id;
}

const appendOutput = (entryId: string, offset: number, text: string) =>
  sql(
    api.coord,
    `insert into log_chunks (log_entry_id, "offset", data, created_at) values (?, ?, ?, now())`,
    [entryId, offset, Buffer.from(text)],
  );

const finish = (deployId: string) =>
  sql(
    api.coord,
    `update deployments set status = 'success', finished_at = now(), reason = null where id = ?`,
    [deployId],
  );

const logOf = async (deployId: string) => {
  const res = await api.admin.get(`/deploy/${deployId}`);
  expect(res.status).toBe(200);
  return res.json.logs[0].log as string;
};

describe('GET /deploy/:id of a deployment still running', () => {
  it('reads its output afresh on every request', async () => {
    const deployId = await deploy((await createProject()).id);
    const entry = await entryWithOutput(deployId, false, 'one\n');
    expect(await logOf(deployId)).toBe('one\n');
    await appendOutput(entry, 4, 'two\n');
    expect(await logOf(deployId)).toBe('one\ntwo\n');
  });

  it('reads afresh a deployment marked finished while one of its entries is still open', async () => {
    const deployId = await deploy((await createProject()).id);
    const entry = await entryWithOutput(deployId, false, 'one\n');
    await finish(deployId);
    expect(await logOf(deployId)).toBe('one\n');
    await appendOutput(entry, 4, 'two\n');
    expect(await logOf(deployId)).toBe('one\ntwo\n');
  });
});

describe('GET /deploy/:id of a finished deployment', () => {
  it('serves the logs it read once the deployment ended, the same JSON as before', async () => {
    const deployId = await deploy((await createProject()).id);
    const entry = await entryWithOutput(deployId, true, 'built\n');
    await finish(deployId);
    const first = await api.admin.get(`/deploy/${deployId}`);
    expect(first.json.deployment.status).toBe('success');
    expect(first.json.logs[0].log).toBe('built\n');
    // Never done by the product (an ended entry takes no more output): shows the logs are kept.
    await appendOutput(entry, 6, 'written behind its back\n');
    const second = await api.admin.get(`/deploy/${deployId}`);
    expect(second.headers.get('content-type')).toMatch(/^application\/json/);
    expect(second.json).toEqual(first.json);
  });

  it('still shows its project as it is now', async () => {
    const project = await createProject();
    const deployId = await deploy(project.id);
    await entryWithOutput(deployId, true, 'built\n');
    await finish(deployId);
    expect((await api.admin.get(`/deploy/${deployId}`)).json.project.name).toBe(project.name);
    const renamed = await api.admin.request('PATCH', `/projects/${project.id}`, {
      json: { name: `${project.name}-renamed` },
    });
    expect(renamed.status).toBe(200);
    expect((await api.admin.get(`/deploy/${deployId}`)).json.project.name).toBe(`${project.name}-renamed`);
  });

  it('is 404 once the deployment is deleted, though its logs were kept', async () => {
    const deployId = await deploy((await createProject()).id);
    await entryWithOutput(deployId, true, 'built\n');
    await finish(deployId);
    expect(await logOf(deployId)).toBe('built\n');
    await sql(api.coord, 'delete from deployments where id = ?', [deployId]);
    const res = await api.admin.get(`/deploy/${deployId}`);
    expect(res.status).toBe(404);
    expect(res.json).toEqual({ success: false, error: 'Deployment not found' });
  });
});
