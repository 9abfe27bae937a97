// API tokens: created by a user and shown once, stored hashed, listed without values, revoked;
// every JSON endpoint accepts `Authorization: Bearer <token>` within the token's scope.
import { describe, expect, it } from 'vitest';
import { type Client, coordinatorWithAdmin, sampleProject, signUp } from '../helpers/coordinator.ts';
import { expectJsonError } from '../helpers/responses.ts';

const api = coordinatorWithAdmin({ REGISTRATION: 'open' });

async function token(client: Client, scope: string, extra: Record<string, unknown> = {}): Promise<string> {
  const res = await client.post('/tokens', { name: `ci-${scope}`, scope, ...extra });
  expect(res.status).toBe(201);
  return res.json.token as string;
}

function bearer(value: string) {
  return { headers: { authorization: `Bearer ${value}` }, cookie: null };
}

describe('POST /tokens', () => {
  it('creates a named token with a scope, shown once, stored as a hash', async () => {
    const res = await api.admin.post('/tokens', { name: 'github-actions', scope: 'deploy' });
    expect(res.status).toBe(201);
    expect(res.json.api_token).toMatchObject({ name: 'github-actions', scope: 'deploy', expires_at: null });
    expect(res.json.token).toMatch(/^dht_[A-Za-z0-9_-]{40,}$/);
    const rows = await api.coord.orm.em
      .fork()
      .execute<Array<{ token_hash: string }>>('select token_hash from api_tokens where id = ?', [
        res.json.api_token.id,
      ]);
    expect(rows[0]!.token_hash).toMatch(/^[0-9a-f]{64}$/);
    expect(rows[0]!.token_hash).not.toContain(res.json.token);
    const list = await api.admin.get('/tokens');
    expect(list.text).not.toContain(res.json.token);
    expect(list.json.api_tokens.map((t: { name: string }) => t.name)).toContain('github-actions');
  });

  it('refuses a scope above the user’s role, an unknown scope and a past expiry', async () => {
    const { client: viewer } = await signUp(api.coord.url);
    expectJsonError(await viewer.post('/tokens', { name: 'x', scope: 'deploy' }), 403);
    expect((await viewer.post('/tokens', { name: 'x', scope: 'read' })).status).toBe(201);
    expectJsonError(await api.admin.post('/tokens', { name: 'x', scope: 'root' }), 400);
    expectJsonError(
      await api.admin.post('/tokens', { name: 'x', scope: 'read', expires_at: '2001-01-01T00:00:00.000Z' }),
      400,
      'expires_at must be a time in the future',
    );
  });
});

describe('Authorization: Bearer', () => {
  it('a deploy token triggers and reads, recorded as trigger api, but cannot manage', async () => {
    const project = await api.admin.post('/projects', sampleProject());
    const t = await token(api.admin, 'deploy');
    const deployed = await api.admin.post('/deploy', { projectId: project.json.project.id }, bearer(t));
    expect(deployed.status).toBe(200);
    const read = await api.admin.get(`/deploy/${deployed.json.deployId}`, bearer(t));
    expect(read.json.deployment).toMatchObject({ trigger: 'api' });
    expect(read.json.deployment.triggered_by).toContain('token ci-deploy');
    expectJsonError(await api.admin.post('/projects', sampleProject(), bearer(t)), 403);
    const me = await api.admin.get('/me', bearer(t));
    expect(me.json.user).toMatchObject({ email: api.adminEmail, role: 'deployer' });
  });

  it('a read token reads only', async () => {
    const project = await api.admin.post('/projects', sampleProject());
    const t = await token(api.admin, 'read');
    expect((await api.admin.get('/projects', bearer(t))).status).toBe(200);
    expectJsonError(await api.admin.post('/deploy', { projectId: project.json.project.id }, bearer(t)), 403);
  });

  it('an admin token manages', async () => {
    const t = await token(api.admin, 'admin');
    expect((await api.admin.post('/projects', sampleProject(), bearer(t))).status).toBe(201);
  });

  it('a revoked token gets 401 from the next request on', async () => {
    const res = await api.admin.post('/tokens', { name: 'short-lived', scope: 'read' });
    expect((await api.admin.get('/projects', bearer(res.json.token))).status).toBe(200);
    expect((await api.admin.request('DELETE', `/tokens/${res.json.api_token.id}`)).status).toBe(200);
    expectJsonError(
      await api.admin.get('/projects', bearer(res.json.token)),
      401,
      'Invalid, expired or revoked API token',
    );
    const list = await api.admin.get('/tokens');
    expect(list.json.api_tokens.map((x: { id: string }) => x.id)).not.toContain(res.json.api_token.id);
  });

  it('an expired token gets 401', async () => {
    const t = await token(api.admin, 'read', { expires_at: new Date(Date.now() + 1500).toISOString() });
    expect((await api.admin.get('/projects', bearer(t))).status).toBe(200);
    await new Promise((r) => setTimeout(r, 1600));
    expectJsonError(await api.admin.get('/projects', bearer(t)), 401);
  });

  it('a forged or malformed token gets 401 whatever else the request carries, before the body', async () => {
    expectJsonError(await api.admin.get('/projects', bearer('dht_forged')), 401);
    expectJsonError(await api.admin.get('/projects', { headers: { authorization: 'Bearer ' } }), 401);
    // With a valid session cookie too: the bad token still decides.
    expectJsonError(
      await api.admin.get('/projects', { headers: { authorization: 'Bearer dht_forged' } }),
      401,
    );
    expectJsonError(
      await api.admin.request('POST', '/deploy', {
        body: '{not json',
        headers: { authorization: 'Bearer dht_forged', 'content-type': 'application/json' },
        cookie: null,
      }),
      401,
    );
  });

  it('a token narrows with its user: demoting the user demotes the token at once', async () => {
    const { client: user, email } = await signUp(api.coord.url);
    await api.coord.orm.em.fork().execute(`update users set role = 'admin' where email = ?`, [email]);
    const t = await token(user, 'admin');
    expect((await user.post('/projects', sampleProject(), bearer(t))).status).toBe(201);
    await api.coord.orm.em.fork().execute(`update users set role = 'viewer' where email = ?`, [email]);
    expectJsonError(await user.post('/projects', sampleProject(), bearer(t)), 403);
  });

  it('other authorization schemes are left alone (a proxy’s Basic auth does not break sessions)', async () => {
    const res = await api.admin.get('/me', { headers: { authorization: 'Basic dXNlcjpwYXNz' } });
    expect(res.status).toBe(200);
  });
});
