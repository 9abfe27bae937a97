// One URL per resource: GET /deploy/:id answers HTML to browsers and JSON otherwise (Vary: Accept),
// and without a session a browser is sent to the sign-in page while an API client gets 401.
import { beforeAll, describe, expect, it } from 'vitest';
import {
  Client,
  coordinatorFor,
  createProject,
  signUp,
  uniqueEmail,
  BROWSER_ACCEPT,
} from '../helpers/coordinator.ts';
import { expectJsonError } from '../helpers/responses.ts';

const PASSWORD = 'correct horse battery staple';
const AUTH_REQUIRED = 'Authentication required';

describe('content negotiation on GET /deploy/:id', () => {
  const coord = coordinatorFor();
  let admin: Client;
  let project: { id: string; name: string };
  let deployId: string;

  beforeAll(async () => {
    admin = (await signUp(coord.current.url, uniqueEmail('neg'), PASSWORD)).client;
    project = (await createProject(admin)).json.project;
    const res = await admin.post('/deploy', { projectId: project.id });
    expect(res.status, res.text).toBe(200);
    deployId = res.json.deployId;
  });

  it('Accept: text/html → the HTML page naming the project, with Vary: Accept', async () => {
    const res = await admin.get(`/deploy/${deployId}`, { headers: { accept: BROWSER_ACCEPT } });
    expect(res.status, res.text).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/html/);
    expect(res.text).toContain(project.name);
    expect(res.text).toMatch(/<html/i);
    expect(res.headers.get('vary') ?? '').toMatch(/\baccept\b/i);
  });

  it('Accept: application/json → JSON, with Vary: Accept', async () => {
    const res = await admin.get(`/deploy/${deployId}`, { headers: { accept: 'application/json' } });
    expect(res.status, res.text).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^application\/json/);
    expect(res.json.success).toBe(true);
    expect(res.json.deployment.id).toBe(deployId);
    expect(res.json.project).toEqual({
      id: project.id,
      name: project.name,
      forge_url: 'https://github.com/acme/web.git',
      branch_name: 'main',
    });
    expect(res.headers.get('vary') ?? '').toMatch(/\baccept\b/i);
  });

  it('no Accept header → JSON', async () => {
    const res = await admin.get(`/deploy/${deployId}`);
    expect(res.status, res.text).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^application\/json/);
    expect(res.json.deployment.id).toBe(deployId);
  });

  it('Accept: */* (curl) → JSON', async () => {
    const res = await admin.get(`/deploy/${deployId}`, { headers: { accept: '*/*' } });
    expect(res.headers.get('content-type')).toMatch(/^application\/json/);
  });

  it('a browser GET without a session → 302 to /login?next=<the page>', async () => {
    const res = await new Client(coord.current.url).get(`/deploy/${deployId}`, {
      headers: { accept: BROWSER_ACCEPT },
    });
    expect(res.status).toBe(302);
    expect(res.headers.get('location')).toBe(`/login?next=${encodeURIComponent(`/deploy/${deployId}`)}`);
  });

  it('a JSON GET without a session → 401 "Authentication required"', async () => {
    const res = await new Client(coord.current.url).get(`/deploy/${deployId}`, {
      headers: { accept: 'application/json' },
    });
    expectJsonError(res, 401, AUTH_REQUIRED);
  });
});

describe('content negotiation on the audit log (GET /audit, GET /projects/:id/audit)', () => {
  const coord = coordinatorFor();
  let admin: Client;
  let deployer: Client;
  let project: { id: string; name: string };

  beforeAll(async () => {
    admin = (await signUp(coord.current.url, uniqueEmail('audit'), PASSWORD)).client;
    project = (await createProject(admin)).json.project;
    const email = uniqueEmail('deployer');
    const invited = await admin.post('/users/invitations', { email, role: 'deployer' });
    expect(invited.status, invited.text).toBe(201);
    const invitation = new URL(invited.json.url).searchParams.get('invitation');
    deployer = new Client(coord.current.url);
    expect((await deployer.post('/register', { email, password: PASSWORD, invitation })).status).toBe(201);
  });

  it('a browser gets the page; anything else the JSON, at the same URLs', async () => {
    for (const path of ['/audit', `/projects/${project.id}/audit`]) {
      const page = await admin.get(path, { headers: { accept: BROWSER_ACCEPT } });
      expect(page.status, page.text).toBe(200);
      expect(page.headers.get('content-type')).toMatch(/^text\/html/);
      expect(page.text).toContain('Project created');
      expect(page.text).toContain(`href="/projects/${project.id}"`);
      const json = await admin.get(path);
      expect(json.headers.get('content-type')).toMatch(/^application\/json/);
      expect(json.json.audit_events.map((e: { action: string }) => e.action)).toContain('project.create');
    }
  });

  it('GET /audit is for admins: a deployer gets 403, as JSON or as the error page', async () => {
    expectJsonError(await deployer.get('/audit'), 403);
    const page = await deployer.get('/audit', { headers: { accept: BROWSER_ACCEPT } });
    expect(page.status).toBe(403);
    expect(page.headers.get('content-type')).toMatch(/^text\/html/);
    expect(page.text).toContain('Not allowed');
    expect(page.text).not.toContain('Project created');
    // A project's log is for anyone who may read the project.
    const own = await deployer.get(`/projects/${project.id}/audit`, { headers: { accept: BROWSER_ACCEPT } });
    expect(own.status).toBe(200);
    expect(own.text).toContain('Project created');
  });

  it('a bad `before` is refused on the page as in the JSON', async () => {
    expectJsonError(
      await admin.get('/audit?before=yesterday'),
      400,
      'before must be an audit event id or an ISO timestamp',
    );
    const page = await admin.get('/audit?before=yesterday', { headers: { accept: BROWSER_ACCEPT } });
    expect(page.status).toBe(400);
    expect(page.text).toContain('before must be an audit event id or an ISO timestamp');
  });
});
