// GET /deploy/:id (API.md "Deployments"): one deployment with its project, for a queued deployment,
// one that does not exist, and without a session.
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { Client, coordinatorWithAdmin } from '../helpers/coordinator.ts';
import { deploymentTools } from '../helpers/deployments.ts';
import { TIMESTAMP } from '../helpers/responses.ts';

const api = coordinatorWithAdmin();
const { createProject, deploy } = deploymentTools(api);

describe('GET /deploy/:id of a queued deployment', () => {
  it('answers 200 {success, deployment, logs, project} with every deployment field', async () => {
    const project = await createProject({ branch_name: 'main' });
    const id = await deploy(project.id);
    const res = await api.admin.get(`/deploy/${id}`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^application\/json/);
    expect(Object.keys(res.json).sort()).toEqual(['deployment', 'logs', 'project', 'success']);
    expect(res.json.success).toBe(true);
    const d = res.json.deployment;
    expect(d).toMatchObject({
      id,
      proj_id: project.id,
      finished_at: null,
      status: 'queued',
      commit: null,
      branch: 'main',
      trigger: 'manual',
      triggered_by: api.adminEmail,
    });
    expect(d.started_at).toMatch(TIMESTAMP);
    expect(Math.abs(Date.parse(d.started_at) - Date.now())).toBeLessThan(60_000);
    expect(d.reason).toEqual(expect.any(String));
    expect(d.reason.length).toBeGreaterThan(0);
    expect(Array.isArray(d.hosts)).toBe(true);
    for (const key of [
      'id',
      'proj_id',
      'started_at',
      'finished_at',
      'status',
      'commit',
      'branch',
      'trigger',
      'triggered_by',
      'reason',
      'hosts',
    ]) {
      expect(d).toHaveProperty(key);
    }
    expect(res.json.logs).toEqual([]);
  });

  it('embeds the project with exactly id, name, forge_url, branch_name', async () => {
    const project = await createProject({
      forge_url: 'git@github.com:acme/api.git',
      branch_name: 'trunk',
    });
    const id = await deploy(project.id);
    const res = await api.admin.get(`/deploy/${id}`);
    expect(res.json.project).toEqual({
      id: project.id,
      name: project.name,
      forge_url: 'git@github.com:acme/api.git',
      branch_name: 'trunk',
    });
    expect(res.text).not.toContain('sk-live-very-secret');
  });
});

describe('GET /deploy/:id for a deployment that does not exist', () => {
  for (const [name, id] of [
    ['unknown uuid', randomUUID()],
    ['malformed id', 'abc'],
    ['numeric id', '123'],
    ['uuid with junk', `${randomUUID()}x`],
  ] as const) {
    it(`is 404 Deployment not found (${name})`, async () => {
      const res = await api.admin.get(`/deploy/${id}`);
      expect(res.status).toBe(404);
      expect(res.json).toEqual({ success: false, error: 'Deployment not found' });
    });
  }
});

describe('GET /deploy/:id without a session', () => {
  it('is 401 Authentication required', async () => {
    const project = await createProject();
    const id = await deploy(project.id);
    const res = await new Client(api.coord.url).get(`/deploy/${id}`);
    expect(res.status).toBe(401);
    expect(res.json).toEqual({ success: false, error: 'Authentication required' });
  });

  it('is 401 even for an unknown id (nothing about existence leaks)', async () => {
    const res = await new Client(api.coord.url).get(`/deploy/${randomUUID()}`);
    expect(res.status).toBe(401);
    expect(res.json).toEqual({ success: false, error: 'Authentication required' });
  });

  it('is 401 with a forged session cookie', async () => {
    const project = await createProject();
    const id = await deploy(project.id);
    const res = await new Client(api.coord.url).get(`/deploy/${id}`, { cookie: 'connect.sid=forged-value' });
    expect(res.status).toBe(401);
    expect(res.json).toEqual({ success: false, error: 'Authentication required' });
  });
});
