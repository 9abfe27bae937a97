// One URL per resource: GET /deploy/:id answers HTML to browsers and JSON otherwise (Vary: Accept),
// and without a session a browser is sent to the sign-in page while an API client gets 401.
import { beforeAll, describe, expect, it } from 'vitest';
import { Client, coordinatorFor, createProject, signUp, uniqueEmail } from '../helpers/coordinator.ts';
import { expectJsonError } from '../helpers/responses.ts';

const PASSWORD = 'correct horse battery staple';
const AUTH_REQUIRED = 'Authentication required';

describe('content negotiation on GET /deploy/:id', () => {
  const coord = coordinatorFor();
  let admin: Client;
  let project: { id: string; name: string };
  let deployId: string;
  const BROWSER_ACCEPT = 'text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8';

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
