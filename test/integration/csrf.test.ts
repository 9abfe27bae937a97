// CSRF: cookie-authenticated writes must come from the coordinator's own origin (Origin and
// Sec-Fetch-Site); reads and cookie-carrying clients that send no Origin are not affected.
import { randomUUID } from 'node:crypto';
import { beforeAll, describe, expect, it } from 'vitest';
import type { Client } from '../helpers/coordinator.ts';
import { coordinatorFor, createProject, signUp, uniqueEmail } from '../helpers/coordinator.ts';
import { sql } from '../helpers/sql.ts';
import { expectJsonError } from '../helpers/responses.ts';

const PASSWORD = 'correct horse battery staple';
const CROSS_SITE = 'Cross-site request refused';

describe('CSRF: cookie-authenticated writes from another site are refused', () => {
  const coord = coordinatorFor();
  let admin: Client;
  let projectId: string;

  beforeAll(async () => {
    admin = (await signUp(coord.current.url, uniqueEmail('csrf'), PASSWORD)).client;
    projectId = (await createProject(admin)).json.project.id;
  });

  const deploymentCount = async () =>
    (await sql(coord.current, 'select count(*)::int as n from deployments'))[0].n as number;

  it('POST /deploy with Origin: https://evil.example → 403, nothing triggered', async () => {
    const before = await deploymentCount();
    const res = await admin.post('/deploy', { projectId }, { headers: { origin: 'https://evil.example' } });
    expectJsonError(res, 403, CROSS_SITE);
    expect(await deploymentCount()).toBe(before);
  });

  it('POST /deploy with Sec-Fetch-Site: cross-site → 403', async () => {
    const res = await admin.post('/deploy', { projectId }, { headers: { 'sec-fetch-site': 'cross-site' } });
    expectJsonError(res, 403, CROSS_SITE);
  });

  it('POST /deploy with Sec-Fetch-Site: same-site (a sibling subdomain) → 403', async () => {
    const res = await admin.post('/deploy', { projectId }, { headers: { 'sec-fetch-site': 'same-site' } });
    expectJsonError(res, 403, CROSS_SITE);
  });

  it('an Origin on another port of the same host → 403', async () => {
    const port = Number(new URL(coord.current.url).port);
    const res = await admin.post(
      '/deploy',
      { projectId },
      { headers: { origin: `http://127.0.0.1:${port === 1 ? 2 : port - 1}` } },
    );
    expectJsonError(res, 403, CROSS_SITE);
  });

  it('a cross-site POST /logout is refused and the session survives', async () => {
    const res = await admin.post('/logout', undefined, { headers: { origin: 'https://evil.example' } });
    expectJsonError(res, 403, CROSS_SITE);
    expect((await admin.get('/me')).status).toBe(200);
  });

  it("POST /deploy with Origin equal to the coordinator's own origin passes through (404 for a random uuid)", async () => {
    const res = await admin.post(
      '/deploy',
      { projectId: randomUUID() },
      { headers: { origin: coord.current.url, 'sec-fetch-site': 'same-origin' } },
    );
    expectJsonError(res, 404, 'Project not found');
  });

  it('a plain Node fetch with the cookie and no Origin works', async () => {
    const res = await fetch(`${coord.current.url}/deploy`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', cookie: admin.cookie! },
      body: JSON.stringify({ projectId: randomUUID() }),
    });
    expect(res.status).toBe(404);
    expect(await res.json()).toEqual({ success: false, error: 'Project not found' });
    const ok = await fetch(`${coord.current.url}/deploy`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', cookie: admin.cookie! },
      body: JSON.stringify({ projectId }),
    });
    expect(ok.status).toBe(200);
  });

  it('reads are not subject to the origin check', async () => {
    const res = await admin.get('/projects', { headers: { origin: 'https://evil.example' } });
    expect(res.status, res.text).toBe(200);
  });
});
