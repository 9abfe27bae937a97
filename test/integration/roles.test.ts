// Roles, end to end over HTTP: a viewer reads; a deployer also triggers; an admin also manages
// projects and agents; without a session every route is 401.
import { randomUUID } from 'node:crypto';
import { beforeAll, describe, expect, it } from 'vitest';
import {
  Client,
  coordinatorFor,
  createProject,
  sampleProject,
  signUp,
  uniqueEmail,
} from '../helpers/coordinator.ts';
import { sql } from '../helpers/sql.ts';
import { expectJsonError } from '../helpers/responses.ts';

const PASSWORD = 'correct horse battery staple';
const AUTH_REQUIRED = 'Authentication required';
const FORBIDDEN = 'You do not have permission to do this';

describe('roles', () => {
  const coord = coordinatorFor({ REGISTRATION: 'open' });
  let admin: Client;
  let viewer: Client;
  let deployer: Client;
  let projectId: string;

  beforeAll(async () => {
    admin = (await signUp(coord.current.url, uniqueEmail('admin'), PASSWORD)).client;
    const v = await signUp(coord.current.url, uniqueEmail('viewer'), PASSWORD);
    expect(v.user.role).toBe('viewer');
    viewer = v.client;
    const d = await signUp(coord.current.url, uniqueEmail('deployer'), PASSWORD);
    await sql(coord.current, "update users set role = 'deployer' where email = ?", [d.email]);
    deployer = d.client;
    projectId = (await createProject(admin)).json.project.id;
  });

  it('GET /me reports each role (a promotion takes effect on the next request)', async () => {
    expect((await admin.get('/me')).json.user.role).toBe('admin');
    expect((await viewer.get('/me')).json.user.role).toBe('viewer');
    expect((await deployer.get('/me')).json.user.role).toBe('deployer');
  });

  it('a viewer reads but gets 403 on POST /deploy, POST /projects, POST /agents', async () => {
    expect((await viewer.get('/projects')).status).toBe(200);
    expect((await viewer.get(`/projects/${projectId}`)).status).toBe(200);
    expectJsonError(await viewer.post('/deploy', { projectId }), 403, FORBIDDEN);
    expectJsonError(await viewer.post('/projects', sampleProject()), 403, FORBIDDEN);
    expectJsonError(await viewer.post('/agents', { name: 'viewer-agent' }), 403, FORBIDDEN);
    const rows = await sql(coord.current, 'select count(*)::int as n from agents');
    expect(rows[0].n).toBe(0);
  });

  it('a deployer can POST /deploy (200) but not POST /projects, POST /agents, PATCH/DELETE a project', async () => {
    const res = await deployer.post('/deploy', { projectId });
    expect(res.status, res.text).toBe(200);
    expect(res.json.success).toBe(true);
    expectJsonError(await deployer.post('/projects', sampleProject()), 403, FORBIDDEN);
    expectJsonError(await deployer.post('/agents', { name: 'deployer-agent' }), 403, FORBIDDEN);
    expectJsonError(
      await deployer.request('PATCH', `/projects/${projectId}`, { json: { branch_name: 'dev' } }),
      403,
      FORBIDDEN,
    );
    expectJsonError(await deployer.request('DELETE', `/projects/${projectId}`), 403, FORBIDDEN);
    expectJsonError(await deployer.get(`/projects/${projectId}/webhook`), 403, FORBIDDEN);
  });

  it('an admin can do all of it', async () => {
    const created = await admin.post('/projects', sampleProject());
    expect(created.status, created.text).toBe(201);
    const agent = await admin.post('/agents', { name: 'admin-agent', labels: ['web'] });
    expect(agent.status, agent.text).toBe(201);
    const deployed = await admin.post('/deploy', { projectId: created.json.project.id });
    expect(deployed.status, deployed.text).toBe(200);
    const patched = await admin.request('PATCH', `/projects/${created.json.project.id}`, {
      json: { branch_name: 'dev' },
    });
    expect(patched.status, patched.text).toBe(200);
    expect((await admin.get(`/projects/${created.json.project.id}/webhook`)).status).toBe(200);
    expect((await admin.request('DELETE', `/agents/${agent.json.agent.id}`)).status).toBe(200);
  });

  it('a demotion takes effect on the next request', async () => {
    const d = await signUp(coord.current.url, uniqueEmail('demoted'), PASSWORD);
    await sql(coord.current, "update users set role = 'deployer' where email = ?", [d.email]);
    expect((await d.client.post('/deploy', { projectId })).status).toBe(200);
    await sql(coord.current, "update users set role = 'viewer' where email = ?", [d.email]);
    expectJsonError(await d.client.post('/deploy', { projectId }), 403, FORBIDDEN);
  });

  it('every route answers 401 "Authentication required" without a session', async () => {
    const agent = await admin.post('/agents', { name: 'some-agent' });
    expect(agent.status, agent.text).toBe(201);
    const agentId = agent.json.agent.id as string;
    const deployId = (await admin.post('/deploy', { projectId })).json.deployId as string;
    const anonymous = new Client(coord.current.url);
    const routes: [string, string, unknown?][] = [
      ['GET', '/me'],
      ['GET', '/projects'],
      ['GET', `/projects/${projectId}`],
      ['POST', '/projects', sampleProject()],
      ['PATCH', `/projects/${projectId}`, { branch_name: 'dev' }],
      ['DELETE', `/projects/${projectId}`],
      ['GET', `/projects/${projectId}/webhook`],
      ['POST', `/projects/${projectId}/webhook/rotate`, {}],
      ['GET', '/agents'],
      ['POST', '/agents', { name: 'anon-agent' }],
      ['DELETE', `/agents/${agentId}`],
      ['GET', '/deployments'],
      ['POST', '/deploy', { projectId }],
      ['GET', `/deploy/${deployId}`],
      ['GET', `/deploy/${randomUUID()}`],
      ['POST', '/email/test', {}],
    ];
    for (const [method, path, json] of routes) {
      const res = await anonymous.request(method, path, json === undefined ? {} : { json });
      expect(res.status, `${method} ${path}: ${res.text}`).toBe(401);
      expect(res.json, `${method} ${path}`).toEqual({ success: false, error: AUTH_REQUIRED });
    }
    // Nothing changed behind the refusals.
    expect((await admin.get(`/projects/${projectId}`)).json.project.branch_name).toBe('main');
    expect((await admin.get('/agents')).json.agents.map((a: { id: string }) => a.id)).toContain(agentId);
  });
});
