// Projects (API.md "Projects"): create, list, read, update and delete, never showing a secret
// value, against a real coordinator over HTTP on a fresh database.
import { randomUUID } from 'node:crypto';
import { sign } from '@octokit/webhooks-methods';
import { describe, expect, it } from 'vitest';
import {
  Client,
  coordinatorWithAdmin,
  createProject,
  sampleProject,
  signUp,
} from '../helpers/coordinator.ts';
import {
  SECRET_VALUE,
  PRIVATE_KEY,
  patch,
  del,
  storedSecrets,
  expectNoSecrets,
} from '../helpers/projects.ts';
import { sql } from '../helpers/sql.ts';
import { UUID } from '../helpers/responses.ts';

const api = coordinatorWithAdmin({ REGISTRATION: 'open' });

describe('POST /projects', () => {
  it('answers 201 {success, project, webhook: {url, secret}}', async () => {
    const body = sampleProject();
    const res = await api.admin.post('/projects', body);
    expect(res.status).toBe(201);
    expect(Object.keys(res.json).sort()).toEqual(['project', 'success', 'webhook']);
    expect(res.json.success).toBe(true);
    const project = res.json.project;
    expect(project.id).toMatch(UUID);
    expect(project).toMatchObject({
      name: body.name,
      forge_url: body.forge_url,
      branch_name: 'main',
      commands: ['npm ci', 'npm run build'],
      target: { agents: { labels: ['web'] } },
      env: { NODE_ENV: 'production' },
      secret_keys: ['API_KEY'],
    });
    expect(Object.keys(res.json.webhook).sort()).toEqual(['secret', 'url']);
    expect(res.json.webhook.url).toMatch(new RegExp(`/webhook/${project.id}$`));
    expect(res.json.webhook.url).toMatch(/^https?:\/\//);
    expect(res.json.webhook.secret).toEqual(expect.any(String));
    expect(res.json.webhook.secret.length).toBeGreaterThanOrEqual(16);
  });

  it('never returns a secret value', async () => {
    const res = await createProject(api.admin);
    expectNoSecrets(res);
    expect(res.json.project).not.toHaveProperty('secrets');
  });

  it('uses a given webhook_secret', async () => {
    const res = await createProject(api.admin, { webhook_secret: 'my-own-webhook-secret-123' });
    expect(res.json.webhook.secret).toBe('my-own-webhook-secret-123');
  });

  it('generates a different webhook secret per project', async () => {
    const a = await createProject(api.admin);
    const b = await createProject(api.admin);
    expect(a.json.webhook.secret).not.toBe(b.json.webhook.secret);
  });

  it('defaults branch_name to main', async () => {
    const { branch_name: _omitted, ...body } = sampleProject();
    const res = await api.admin.post('/projects', body);
    expect(res.status).toBe(201);
    expect(res.json.project.branch_name).toBe('main');
  });

  it('accepts a target naming agents', async () => {
    const res = await api.admin.post(
      '/projects',
      sampleProject({ target: { agents: { names: ['web-1', 'web-2'] } } }),
    );
    expect(res.status, res.text).toBe(201);
    expect(res.json.project.target).toEqual({ agents: { names: ['web-1', 'web-2'] } });
  });

  it('refuses a duplicate name with 409', async () => {
    const first = await createProject(api.admin);
    const res = await api.admin.post('/projects', sampleProject({ name: first.json.project.name }));
    expect(res.status).toBe(409);
    expect(res.json.success).toBe(false);
    expect(res.json.error).toEqual(expect.any(String));
  });

  it('records project.create in the audit log with the actor email', async () => {
    const res = await createProject(api.admin);
    const rows = await sql(
      api.coord,
      `select actor_type, actor_name from audit_events where action = 'project.create' and target_id = ?`,
      [res.json.project.id],
    );
    expect(rows).toEqual([{ actor_type: 'user', actor_name: api.adminEmail }]);
  });
});

describe('POST /projects with invalid input', () => {
  const cases: Array<[string, Record<string, unknown>]> = [
    ['a name with spaces', { name: 'bad name' }],
    ['a name starting with a dot', { name: '.hidden' }],
    ['a name with a slash', { name: '../etc' }],
    ['an empty name', { name: '' }],
    ['empty commands', { commands: [] }],
    ['an empty command', { commands: [''] }],
    ['commands not an array', { commands: { first: 'npm ci' } }],
    ['a target that is neither agents nor ssh', { target: { docker: { image: 'x' } } }],
    ['an agents target without labels or names', { target: { agents: {} } }],
    ['empty labels', { target: { agents: { labels: [] } } }],
    ['a bad env key', { env: { '1BAD': 'x' } }],
    ['an env key with a dash', { env: { 'MY-VAR': 'x' } }],
    ['a bad secret key', { secrets: { 'A B': 'x' } }],
    ['a forge_url starting with -', { forge_url: '-oProxyCommand=touch /tmp/pwned' }],
    ['a forge_url with spaces', { forge_url: 'https://x y' }],
    ['a branch with ..', { branch_name: 'main..evil' }],
    ['a branch starting with -', { branch_name: '-delete' }],
    ['a short webhook_secret', { webhook_secret: 'short' }],
    [
      'a bad ssh fingerprint',
      {
        target: {
          ssh: { host: 'h', username: 'u', private_key: PRIVATE_KEY, host_key_fingerprint: 'MD5:aa' },
        },
      },
    ],
  ];
  for (const [name, overrides] of cases) {
    it(`is 400 for ${name}`, async () => {
      const body = sampleProject(overrides);
      const res = await api.admin.post('/projects', body);
      expect(res.status, res.text).toBe(400);
      expect(res.json.success).toBe(false);
      expect(res.json.error).toEqual(expect.any(String));
      const rows = await sql(api.coord, 'select count(*)::int as n from projects where name = ?', [
        body.name,
      ]);
      expect(rows[0].n).toBe(0);
    });
  }

  it('is 400 when a required field is missing', async () => {
    for (const field of ['name', 'forge_url', 'commands', 'target']) {
      const body: Record<string, unknown> = sampleProject();
      delete body[field];
      const res = await api.admin.post('/projects', body);
      expect(res.status, field).toBe(400);
      expect(res.json.success).toBe(false);
    }
  });
});

describe('POST /projects permissions', () => {
  it('is 401 without a session', async () => {
    const res = await new Client(api.coord.url).post('/projects', sampleProject());
    expect(res.status).toBe(401);
    expect(res.json).toEqual({ success: false, error: 'Authentication required' });
  });

  it('is 403 for a non-admin', async () => {
    const { client } = await signUp(api.coord.url);
    const res = await client.post('/projects', sampleProject());
    expect(res.status).toBe(403);
    expect(res.json.success).toBe(false);
  });
});

describe('GET /projects and GET /projects/:id', () => {
  it('lists projects without secret values', async () => {
    const created = await createProject(api.admin);
    const res = await api.admin.get('/projects');
    expect(res.status).toBe(200);
    expect(res.json.success).toBe(true);
    const found = res.json.projects.find((p: { id: string }) => p.id === created.json.project.id);
    expect(found).toMatchObject({ name: created.json.project.name, secret_keys: ['API_KEY'] });
    expectNoSecrets(res, created.json.webhook.secret);
  });

  it('gets one project with the spec fields and no secret values', async () => {
    const created = await createProject(api.admin);
    const res = await api.admin.get(`/projects/${created.json.project.id}`);
    expect(res.status).toBe(200);
    expect(res.json.success).toBe(true);
    for (const key of [
      'id',
      'name',
      'forge_url',
      'branch_name',
      'commands',
      'target',
      'env',
      'secret_keys',
    ]) {
      expect(res.json.project).toHaveProperty(key);
    }
    expect(res.json.project).toEqual(created.json.project);
    expectNoSecrets(res, created.json.webhook.secret);
  });

  it('is 404 Project not found for an unknown or malformed id', async () => {
    for (const id of [randomUUID(), 'abc']) {
      const res = await api.admin.get(`/projects/${id}`);
      expect(res.status).toBe(404);
      expect(res.json).toEqual({ success: false, error: 'Project not found' });
    }
  });

  it('is readable by a non-admin, still without secrets', async () => {
    const created = await createProject(api.admin);
    const { client } = await signUp(api.coord.url);
    const res = await client.get(`/projects/${created.json.project.id}`);
    expect(res.status).toBe(200);
    expectNoSecrets(res, created.json.webhook.secret);
  });

  it('is 401 without a session', async () => {
    const res = await new Client(api.coord.url).get('/projects');
    expect(res.status).toBe(401);
    expect(res.json).toEqual({ success: false, error: 'Authentication required' });
  });
});

describe('PATCH /projects/:id', () => {
  it('updates the given fields and keeps the others', async () => {
    const created = await createProject(api.admin);
    const id = created.json.project.id;
    const res = await patch(api.admin, `/projects/${id}`, {
      branch_name: 'release',
      commands: ['make deploy'],
      env: { NODE_ENV: 'staging', PORT: '8080' },
    });
    expect(res.status, res.text).toBe(200);
    expect(res.json.success).toBe(true);
    expect(res.json.project).toMatchObject({
      id,
      name: created.json.project.name,
      forge_url: created.json.project.forge_url,
      branch_name: 'release',
      commands: ['make deploy'],
      env: { NODE_ENV: 'staging', PORT: '8080' },
      secret_keys: ['API_KEY'],
    });
    expectNoSecrets(res, created.json.webhook.secret);
    const again = await api.admin.get(`/projects/${id}`);
    expect(again.json.project.branch_name).toBe('release');
  });

  it('merges secrets: new keys are added, the others keep their values', async () => {
    const created = await createProject(api.admin, {
      secrets: { API_KEY: SECRET_VALUE, DB_PASSWORD: 'db-pass-value-1' },
    });
    const id = created.json.project.id;
    expect(created.json.project.secret_keys).toEqual(['API_KEY', 'DB_PASSWORD']);
    const res = await patch(api.admin, `/projects/${id}`, {
      secrets: { NEW_TOKEN: 'new-token-value-2', DB_PASSWORD: 'db-pass-value-3' },
    });
    expect(res.status, res.text).toBe(200);
    expect(res.json.project.secret_keys).toEqual(['API_KEY', 'DB_PASSWORD', 'NEW_TOKEN']);
    expectNoSecrets(res, 'db-pass-value-1', 'db-pass-value-3', 'new-token-value-2');
    expect(await storedSecrets(api.coord, id)).toEqual({
      API_KEY: SECRET_VALUE,
      DB_PASSWORD: 'db-pass-value-3',
      NEW_TOKEN: 'new-token-value-2',
    });
    for (const r of [await api.admin.get(`/projects/${id}`), await api.admin.get('/projects')]) {
      expectNoSecrets(r, 'db-pass-value-1', 'db-pass-value-3', 'new-token-value-2');
    }
  });

  it('null deletes a secret key (and its value)', async () => {
    const created = await createProject(api.admin, {
      secrets: { API_KEY: SECRET_VALUE, DB_PASSWORD: 'db-pass-value-1' },
    });
    const id = created.json.project.id;
    const res = await patch(api.admin, `/projects/${id}`, {
      secrets: { NEW_TOKEN: 'new-token-value-2', DB_PASSWORD: null },
    });
    expect(res.status, res.text).toBe(200);
    expect(await storedSecrets(api.coord, id)).toEqual({
      API_KEY: SECRET_VALUE,
      NEW_TOKEN: 'new-token-value-2',
    });
    expect(res.json.project.secret_keys).toEqual(['API_KEY', 'NEW_TOKEN']);
    expect((await api.admin.get(`/projects/${id}`)).json.project.secret_keys).toEqual([
      'API_KEY',
      'NEW_TOKEN',
    ]);
  });

  it('removing every secret with null leaves no keys', async () => {
    const created = await createProject(api.admin);
    const res = await patch(api.admin, `/projects/${created.json.project.id}`, {
      secrets: { API_KEY: null },
    });
    expect(res.status).toBe(200);
    expect(res.json.project.secret_keys).toEqual([]);
    const [row] = await sql(api.coord, 'select secrets_encrypted from projects where id = ?', [
      created.json.project.id,
    ]);
    expect(row.secrets_encrypted).toBeNull();
  });

  it('keeps an empty-string secret as a key (it is not a deletion)', async () => {
    const created = await createProject(api.admin);
    const res = await patch(api.admin, `/projects/${created.json.project.id}`, { secrets: { EMPTY: '' } });
    expect(res.status).toBe(200);
    expect(res.json.project.secret_keys).toEqual(['API_KEY', 'EMPTY']);
  });

  it('refuses invalid fields with 400 and changes nothing', async () => {
    const created = await createProject(api.admin);
    const id = created.json.project.id;
    for (const body of [
      { branch_name: 'a..b' },
      { commands: [] },
      { forge_url: '-x' },
      { target: { x: 1 } },
    ]) {
      const res = await patch(api.admin, `/projects/${id}`, body);
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect(res.json.success).toBe(false);
    }
    expect((await api.admin.get(`/projects/${id}`)).json.project).toEqual(created.json.project);
  });

  it('refuses a bad env key or secret key with 400 and changes nothing', async () => {
    const created = await createProject(api.admin);
    const id = created.json.project.id;
    for (const body of [{ env: { '9': 'x' } }, { env: { 'A-B': 'x' } }, { secrets: { 'bad key': 'x' } }]) {
      const res = await patch(api.admin, `/projects/${id}`, body);
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect(res.json.success).toBe(false);
    }
    expect((await api.admin.get(`/projects/${id}`)).json.project).toEqual(created.json.project);
  });

  it('is 409 when renaming onto an existing name', async () => {
    const a = await createProject(api.admin);
    const b = await createProject(api.admin);
    const res = await patch(api.admin, `/projects/${b.json.project.id}`, { name: a.json.project.name });
    expect(res.status).toBe(409);
    expect(res.json.success).toBe(false);
  });

  it('is 404 for an unknown project', async () => {
    const res = await patch(api.admin, `/projects/${randomUUID()}`, { branch_name: 'x' });
    expect(res.status).toBe(404);
    expect(res.json).toEqual({ success: false, error: 'Project not found' });
  });
});

describe('DELETE /projects/:id', () => {
  it('answers 200 {success: true}, then the project is 404', async () => {
    const created = await createProject(api.admin);
    const id = created.json.project.id;
    const res = await del(api.admin, `/projects/${id}`);
    expect(res.status).toBe(200);
    expect(res.json).toEqual({ success: true });
    const get = await api.admin.get(`/projects/${id}`);
    expect(get.status).toBe(404);
    expect(get.json).toEqual({ success: false, error: 'Project not found' });
    const again = await del(api.admin, `/projects/${id}`);
    expect(again.status).toBe(404);
  });

  it('takes its deployments along, and its webhook then answers 401', async () => {
    const created = await createProject(api.admin);
    const id = created.json.project.id;
    const deploy = await api.admin.post('/deploy', { projectId: id });
    expect(deploy.status).toBe(200);
    expect((await del(api.admin, `/projects/${id}`)).status).toBe(200);
    expect((await api.admin.get(`/deploy/${deploy.json.deployId}`)).status).toBe(404);
    const body = JSON.stringify({
      ref: 'refs/heads/main',
      after: '6113728f27ae82c7b1a177c8d03f9e96e0adf246',
    });
    const hook = await new Client(api.coord.url).request('POST', `/webhook/${id}`, {
      body,
      headers: {
        'content-type': 'application/json',
        'x-github-event': 'push',
        'x-hub-signature-256': await sign(created.json.webhook.secret, body),
      },
    });
    expect(hook.status).toBe(401);
    expect(hook.text).toBe('Unauthorized');
  });

  it('is 403 for a non-admin', async () => {
    const created = await createProject(api.admin);
    const { client } = await signUp(api.coord.url);
    const res = await del(client, `/projects/${created.json.project.id}`);
    expect(res.status).toBe(403);
    expect((await api.admin.get(`/projects/${created.json.project.id}`)).status).toBe(200);
  });
});
