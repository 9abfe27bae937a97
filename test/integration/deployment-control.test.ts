// Controlling deployments without any agent running: cancelling a queued one, the queue timeout,
// supersession, redeploy and rollback rules, and the project policies that drive them.
import { describe, expect, it } from 'vitest';
import { type Client, coordinatorWithAdmin, sampleProject, signUp } from '../helpers/coordinator.ts';
import { expectJsonError } from '../helpers/responses.ts';

const api = coordinatorWithAdmin({ SCHEDULER_INTERVAL_MS: '100', REGISTRATION: 'open' });

async function project(admin: Client, overrides: Record<string, unknown> = {}): Promise<string> {
  const res = await admin.post('/projects', sampleProject(overrides));
  expect(res.status).toBe(201);
  return res.json.project.id;
}

async function deploy(
  client: Client,
  projectId: string,
  body: Record<string, unknown> = {},
): Promise<string> {
  const res = await client.post('/deploy', { projectId, ...body });
  expect(res.status).toBe(200);
  return res.json.deployId;
}

async function until<T>(read: () => Promise<T>, ok: (v: T) => boolean, ms = 5_000): Promise<T> {
  const deadline = Date.now() + ms;
  let value = await read();
  while (!ok(value) && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 50));
    value = await read();
  }
  return value;
}

describe('project policies', () => {
  it('have defaults: one at a time in order, an hour for the deployment and the queue, no releases', async () => {
    const id = await project(api.admin);
    const res = await api.admin.get(`/projects/${id}`);
    expect(res.json.project).toMatchObject({
      timeouts: { command_seconds: null, deployment_seconds: 3600, queue_seconds: 3600 },
      concurrency: 'queue',
      supersede_running: false,
      releases: null,
    });
  });

  it('are set on creation and changed with PATCH, keeping what is not named', async () => {
    const id = await project(api.admin, { timeouts: { command_seconds: 60 }, releases: { keep: 3 } });
    let res = await api.admin.get(`/projects/${id}`);
    expect(res.json.project.timeouts).toEqual({
      command_seconds: 60,
      deployment_seconds: 3600,
      queue_seconds: 3600,
    });
    expect(res.json.project.releases).toEqual({ keep: 3, health_check: null });
    res = await api.admin.request('PATCH', `/projects/${id}`, {
      json: { concurrency: 'supersede', releases: { health_check: 'curl -fsS localhost:8080/health' } },
    });
    expect(res.status).toBe(200);
    expect(res.json.project).toMatchObject({
      concurrency: 'supersede',
      timeouts: { command_seconds: 60 },
      releases: { keep: 3, health_check: 'curl -fsS localhost:8080/health' },
    });
    res = await api.admin.request('PATCH', `/projects/${id}`, { json: { releases: null } });
    expect(res.json.project.releases).toBeNull();
  });

  it.each([
    [{ timeouts: { command_seconds: 0 } }],
    [{ timeouts: { queue_seconds: null } }],
    [{ concurrency: 'parallel' }],
    [{ releases: { keep: 0 } }],
    [{ releases: { keep: 2, extra: true } }],
  ])('refuses %j with 400', async (bad) => {
    const res = await api.admin.post('/projects', sampleProject(bad));
    expectJsonError(res, 400);
  });
});

describe('POST /deploy/:id/cancel', () => {
  it('cancels a queued deployment at once, saying who did', async () => {
    const id = await deploy(api.admin, await project(api.admin));
    const res = await api.admin.post(`/deploy/${id}/cancel`);
    expect(res.status).toBe(200);
    expect(res.json.deployment).toMatchObject({
      id,
      status: 'cancelled',
      reason: `Cancelled by ${api.adminEmail}`,
    });
    expect(res.json.deployment.finished_at).not.toBeNull();
    const detail = await api.admin.get(`/deploy/${id}`);
    expect(detail.json.deployment.status).toBe('cancelled');
  });

  it('answers 409 for a deployment that already ended, 404 for an unknown one', async () => {
    const id = await deploy(api.admin, await project(api.admin));
    await api.admin.post(`/deploy/${id}/cancel`);
    expectJsonError(
      await api.admin.post(`/deploy/${id}/cancel`),
      409,
      'The deployment already ended (cancelled)',
    );
    expectJsonError(
      await api.admin.post('/deploy/00000000-0000-4000-8000-000000000000/cancel'),
      404,
      'Deployment not found',
    );
    expectJsonError(await api.admin.post('/deploy/nope/cancel'), 404, 'Deployment not found');
  });

  it('needs a deployer: a viewer gets 403, no session 401', async () => {
    const id = await deploy(api.admin, await project(api.admin));
    const { client: viewer } = await signUp(api.coord.url);
    expectJsonError(await viewer.post(`/deploy/${id}/cancel`), 403);
    expectJsonError(
      await api.admin.post(`/deploy/${id}/cancel`, undefined, { cookie: null }),
      401,
      'Authentication required',
    );
  });
});

describe('the queue timeout', () => {
  it('fails a deployment that waited too long, with what it waited for', async () => {
    const id = await deploy(api.admin, await project(api.admin, { timeouts: { queue_seconds: 1 } }));
    const detail = await until(
      () => api.admin.get(`/deploy/${id}`),
      (r) => r.json.deployment.status !== 'queued',
    );
    expect(detail.json.deployment.status).toBe('failed');
    expect(detail.json.deployment.reason).toBe(
      'Waited longer than 1 s in the queue: Waiting for an agent with the labels web: none is registered',
    );
  });
});

describe('concurrency: supersede', () => {
  it('cancels older queued deployments of the project when a newer one is triggered', async () => {
    const pid = await project(api.admin, { concurrency: 'supersede' });
    const first = await deploy(api.admin, pid);
    const second = await deploy(api.admin, pid);
    const old = await api.admin.get(`/deploy/${first}`);
    expect(old.json.deployment).toMatchObject({
      status: 'cancelled',
      reason: `Superseded by a newer deployment (${second})`,
    });
    expect((await api.admin.get(`/deploy/${second}`)).json.deployment.status).toBe('queued');
  });

  it('leaves other projects and queue-policy projects alone', async () => {
    const queued = await project(api.admin);
    const a = await deploy(api.admin, queued);
    await deploy(api.admin, queued);
    expect((await api.admin.get(`/deploy/${a}`)).json.deployment.status).toBe('queued');
  });
});

describe('redeploy and rollback', () => {
  it('redeploy queues the same commit and commands again, as trigger redeploy', async () => {
    const pid = await project(api.admin);
    const sha = 'a'.repeat(40);
    const id = await deploy(api.admin, pid, { commit: sha });
    await api.admin.request('PATCH', `/projects/${pid}`, { json: { commands: ['echo changed'] } });
    const res = await api.admin.post(`/deploy/${id}/redeploy`);
    expect(res.status).toBe(200);
    expect(res.json.deployId).not.toBe(id);
    expect(res.json.deployment).toMatchObject({ trigger: 'redeploy', commit: sha, status: 'queued' });
    const rows = await api.coord.orm.em
      .fork()
      .execute<Array<{ snapshot: { commands: string[] } }>>('select snapshot from deployments where id = ?', [
        res.json.deployId,
      ]);
    expect(rows[0]!.snapshot.commands).toEqual(['npm ci', 'npm run build']);
  });

  it('rollback needs a successful deployment built as a release', async () => {
    const plain = await deploy(api.admin, await project(api.admin));
    expectJsonError(
      await api.admin.post(`/deploy/${plain}/rollback`),
      409,
      'Rollback needs releases: that deployment was not built as a release',
    );
    const withReleases = await deploy(api.admin, await project(api.admin, { releases: { keep: 2 } }));
    expectJsonError(
      await api.admin.post(`/deploy/${withReleases}/rollback`),
      409,
      'Only a successful deployment that built a release can be rolled back to',
    );
  });
});
