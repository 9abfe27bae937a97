// Projects and agents (API.md "Projects", "Agents"), health and the OpenAPI document, against a
// real coordinator over HTTP on a fresh database.
import { randomUUID } from 'node:crypto';
import { sign } from '@octokit/webhooks-methods';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { deriveKey, SecretBox } from '../../coordinator/src/modules/common/crypto.ts';
import {
  Client,
  type HttpResponse,
  sampleProject,
  signUp,
  startCoordinator,
  type TestCoordinator,
} from '../helpers/coordinator.ts';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const SECRET_VALUE = 'sk-live-very-secret';
const FINGERPRINT = `SHA256:${'nThbg6kXUpJWGl7E1IGOCspRomTxdCARLviKw6E5SY8'}`;
const PRIVATE_KEY = [
  '-----BEGIN OPENSSH PRIVATE KEY-----',
  'b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW',
  'QyNTUxOQAAACBmYWtlLWtleS1mb3ItdGVzdHMtb25seS1ub3QtcmVhbAAAAJjRk2Vm0ZNl',
  '-----END OPENSSH PRIVATE KEY-----',
].join('\n');
const PRIVATE_KEY_BODY_LINE = 'QyNTUxOQAAACBmYWtlLWtleS1mb3ItdGVzdHMtb25seS1ub3QtcmVhbAAAAJjRk2Vm0ZNl';

let coord: TestCoordinator;
let admin: Client;
let adminEmail: string;

beforeAll(async () => {
  coord = await startCoordinator({ REGISTRATION: 'open' });
  const account = await signUp(coord.url);
  admin = account.client;
  adminEmail = account.email;
});

afterAll(async () => {
  await coord?.close();
});

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- rows of ad-hoc SQL
async function sql(query: string, params: unknown[] = []): Promise<any[]> {
  return coord.orm.em.fork().execute(query, params);
}

/** The project's secrets as stored, decrypted with the coordinator's own key. */
async function storedSecrets(projectId: string): Promise<Record<string, string> | null> {
  const [row] = await sql('select secrets_encrypted from projects where id = ?', [projectId]);
  if (!row.secrets_encrypted) return null;
  const box = new SecretBox(deriveKey(coord.rootSecret, 'secrets-at-rest'));
  return box.decryptJson<Record<string, string>>(row.secrets_encrypted);
}

function patch(client: Client, path: string, json: unknown) {
  return client.request('PATCH', path, { json });
}

function del(client: Client, path: string) {
  return client.request('DELETE', path);
}

async function createProject(overrides: Record<string, unknown> = {}) {
  const res = await admin.post('/projects', sampleProject(overrides));
  expect(res.status, res.text).toBe(201);
  return res;
}

/** No secret value anywhere in the response text. */
function expectNoSecrets(res: HttpResponse, ...secrets: string[]) {
  for (const secret of [SECRET_VALUE, ...secrets]) expect(res.text).not.toContain(secret);
}

describe('POST /projects', () => {
  it('answers 201 {success, project, webhook: {url, secret}}', async () => {
    const body = sampleProject();
    const res = await admin.post('/projects', body);
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
    const res = await createProject();
    expectNoSecrets(res);
    expect(res.json.project).not.toHaveProperty('secrets');
  });

  it('uses a given webhook_secret', async () => {
    const res = await createProject({ webhook_secret: 'my-own-webhook-secret-123' });
    expect(res.json.webhook.secret).toBe('my-own-webhook-secret-123');
  });

  it('generates a different webhook secret per project', async () => {
    const a = await createProject();
    const b = await createProject();
    expect(a.json.webhook.secret).not.toBe(b.json.webhook.secret);
  });

  it('defaults branch_name to main', async () => {
    const { branch_name: _omitted, ...body } = sampleProject();
    const res = await admin.post('/projects', body);
    expect(res.status).toBe(201);
    expect(res.json.project.branch_name).toBe('main');
  });

  it('accepts a target naming agents', async () => {
    const res = await admin.post(
      '/projects',
      sampleProject({ target: { agents: { names: ['web-1', 'web-2'] } } }),
    );
    expect(res.status, res.text).toBe(201);
    expect(res.json.project.target).toEqual({ agents: { names: ['web-1', 'web-2'] } });
  });

  it('refuses a duplicate name with 409', async () => {
    const first = await createProject();
    const res = await admin.post('/projects', sampleProject({ name: first.json.project.name }));
    expect(res.status).toBe(409);
    expect(res.json.success).toBe(false);
    expect(res.json.error).toEqual(expect.any(String));
  });

  it('records project.create in the audit log with the actor email', async () => {
    const res = await createProject();
    const rows = await sql(
      `select actor_type, actor_name from audit_events where action = 'project.create' and target_id = ?`,
      [res.json.project.id],
    );
    expect(rows).toEqual([{ actor_type: 'user', actor_name: adminEmail }]);
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
      const res = await admin.post('/projects', body);
      expect(res.status, res.text).toBe(400);
      expect(res.json.success).toBe(false);
      expect(res.json.error).toEqual(expect.any(String));
      const rows = await sql('select count(*)::int as n from projects where name = ?', [body.name]);
      expect(rows[0].n).toBe(0);
    });
  }

  it('is 400 when a required field is missing', async () => {
    for (const field of ['name', 'forge_url', 'commands', 'target']) {
      const body: Record<string, unknown> = sampleProject();
      delete body[field];
      const res = await admin.post('/projects', body);
      expect(res.status, field).toBe(400);
      expect(res.json.success).toBe(false);
    }
  });
});

describe('POST /projects permissions', () => {
  it('is 401 without a session', async () => {
    const res = await new Client(coord.url).post('/projects', sampleProject());
    expect(res.status).toBe(401);
    expect(res.json).toEqual({ success: false, error: 'Authentication required' });
  });

  it('is 403 for a non-admin', async () => {
    const { client } = await signUp(coord.url);
    const res = await client.post('/projects', sampleProject());
    expect(res.status).toBe(403);
    expect(res.json.success).toBe(false);
  });
});

describe('Project secrets at rest', () => {
  it('are encrypted: the stored columns do not contain the plaintext', async () => {
    const res = await createProject({ webhook_secret: 'plain-webhook-secret-value' });
    const [row] = await sql(
      'select secrets_encrypted, webhook_secret_encrypted, ssh_private_key_encrypted from projects where id = ?',
      [res.json.project.id],
    );
    expect(row.secrets_encrypted).toEqual(expect.any(String));
    expect(row.secrets_encrypted).not.toContain(SECRET_VALUE);
    expect(row.secrets_encrypted).not.toContain(Buffer.from(SECRET_VALUE).toString('base64'));
    expect(row.webhook_secret_encrypted).toEqual(expect.any(String));
    expect(row.webhook_secret_encrypted).not.toContain('plain-webhook-secret-value');
    expect(row.webhook_secret_encrypted).not.toContain(
      Buffer.from('plain-webhook-secret-value').toString('base64'),
    );
    const whole = await sql('select row_to_json(p)::text as t from projects p where id = ?', [
      res.json.project.id,
    ]);
    expect(whole[0].t).not.toContain(SECRET_VALUE);
    expect(whole[0].t).not.toContain('plain-webhook-secret-value');
    // and they are the real values, sealed with the coordinator's key
    expect(await storedSecrets(res.json.project.id)).toEqual({ API_KEY: SECRET_VALUE });
  });

  it('a generated webhook secret is not stored in clear either', async () => {
    const res = await createProject();
    const whole = await sql('select row_to_json(p)::text as t from projects p where id = ?', [
      res.json.project.id,
    ]);
    expect(whole[0].t).not.toContain(res.json.webhook.secret);
  });
});

describe('GET /projects and GET /projects/:id', () => {
  it('lists projects without secret values', async () => {
    const created = await createProject();
    const res = await admin.get('/projects');
    expect(res.status).toBe(200);
    expect(res.json.success).toBe(true);
    const found = res.json.projects.find((p: { id: string }) => p.id === created.json.project.id);
    expect(found).toMatchObject({ name: created.json.project.name, secret_keys: ['API_KEY'] });
    expectNoSecrets(res, created.json.webhook.secret);
  });

  it('gets one project with the spec fields and no secret values', async () => {
    const created = await createProject();
    const res = await admin.get(`/projects/${created.json.project.id}`);
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
      const res = await admin.get(`/projects/${id}`);
      expect(res.status).toBe(404);
      expect(res.json).toEqual({ success: false, error: 'Project not found' });
    }
  });

  it('is readable by a non-admin, still without secrets', async () => {
    const created = await createProject();
    const { client } = await signUp(coord.url);
    const res = await client.get(`/projects/${created.json.project.id}`);
    expect(res.status).toBe(200);
    expectNoSecrets(res, created.json.webhook.secret);
  });

  it('is 401 without a session', async () => {
    const res = await new Client(coord.url).get('/projects');
    expect(res.status).toBe(401);
    expect(res.json).toEqual({ success: false, error: 'Authentication required' });
  });
});

describe('PATCH /projects/:id', () => {
  it('updates the given fields and keeps the others', async () => {
    const created = await createProject();
    const id = created.json.project.id;
    const res = await patch(admin, `/projects/${id}`, {
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
    const again = await admin.get(`/projects/${id}`);
    expect(again.json.project.branch_name).toBe('release');
  });

  it('merges secrets: new keys are added, the others keep their values', async () => {
    const created = await createProject({
      secrets: { API_KEY: SECRET_VALUE, DB_PASSWORD: 'db-pass-value-1' },
    });
    const id = created.json.project.id;
    expect(created.json.project.secret_keys).toEqual(['API_KEY', 'DB_PASSWORD']);
    const res = await patch(admin, `/projects/${id}`, {
      secrets: { NEW_TOKEN: 'new-token-value-2', DB_PASSWORD: 'db-pass-value-3' },
    });
    expect(res.status, res.text).toBe(200);
    expect(res.json.project.secret_keys).toEqual(['API_KEY', 'DB_PASSWORD', 'NEW_TOKEN']);
    expectNoSecrets(res, 'db-pass-value-1', 'db-pass-value-3', 'new-token-value-2');
    expect(await storedSecrets(id)).toEqual({
      API_KEY: SECRET_VALUE,
      DB_PASSWORD: 'db-pass-value-3',
      NEW_TOKEN: 'new-token-value-2',
    });
    for (const r of [await admin.get(`/projects/${id}`), await admin.get('/projects')]) {
      expectNoSecrets(r, 'db-pass-value-1', 'db-pass-value-3', 'new-token-value-2');
    }
  });

  it('null deletes a secret key (and its value)', async () => {
    const created = await createProject({
      secrets: { API_KEY: SECRET_VALUE, DB_PASSWORD: 'db-pass-value-1' },
    });
    const id = created.json.project.id;
    const res = await patch(admin, `/projects/${id}`, {
      secrets: { NEW_TOKEN: 'new-token-value-2', DB_PASSWORD: null },
    });
    expect(res.status, res.text).toBe(200);
    expect(await storedSecrets(id)).toEqual({ API_KEY: SECRET_VALUE, NEW_TOKEN: 'new-token-value-2' });
    expect(res.json.project.secret_keys).toEqual(['API_KEY', 'NEW_TOKEN']);
    expect((await admin.get(`/projects/${id}`)).json.project.secret_keys).toEqual(['API_KEY', 'NEW_TOKEN']);
  });

  it('removing every secret with null leaves no keys', async () => {
    const created = await createProject();
    const res = await patch(admin, `/projects/${created.json.project.id}`, { secrets: { API_KEY: null } });
    expect(res.status).toBe(200);
    expect(res.json.project.secret_keys).toEqual([]);
    const [row] = await sql('select secrets_encrypted from projects where id = ?', [created.json.project.id]);
    expect(row.secrets_encrypted).toBeNull();
  });

  it('keeps an empty-string secret as a key (it is not a deletion)', async () => {
    const created = await createProject();
    const res = await patch(admin, `/projects/${created.json.project.id}`, { secrets: { EMPTY: '' } });
    expect(res.status).toBe(200);
    expect(res.json.project.secret_keys).toEqual(['API_KEY', 'EMPTY']);
  });

  it('refuses invalid fields with 400 and changes nothing', async () => {
    const created = await createProject();
    const id = created.json.project.id;
    for (const body of [
      { branch_name: 'a..b' },
      { commands: [] },
      { forge_url: '-x' },
      { target: { x: 1 } },
    ]) {
      const res = await patch(admin, `/projects/${id}`, body);
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect(res.json.success).toBe(false);
    }
    expect((await admin.get(`/projects/${id}`)).json.project).toEqual(created.json.project);
  });

  it('refuses a bad env key or secret key with 400 and changes nothing', async () => {
    const created = await createProject();
    const id = created.json.project.id;
    for (const body of [{ env: { '9': 'x' } }, { env: { 'A-B': 'x' } }, { secrets: { 'bad key': 'x' } }]) {
      const res = await patch(admin, `/projects/${id}`, body);
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect(res.json.success).toBe(false);
    }
    expect((await admin.get(`/projects/${id}`)).json.project).toEqual(created.json.project);
  });

  it('is 409 when renaming onto an existing name', async () => {
    const a = await createProject();
    const b = await createProject();
    const res = await patch(admin, `/projects/${b.json.project.id}`, { name: a.json.project.name });
    expect(res.status).toBe(409);
    expect(res.json.success).toBe(false);
  });

  it('is 404 for an unknown project', async () => {
    const res = await patch(admin, `/projects/${randomUUID()}`, { branch_name: 'x' });
    expect(res.status).toBe(404);
    expect(res.json).toEqual({ success: false, error: 'Project not found' });
  });
});

describe('DELETE /projects/:id', () => {
  it('answers 200 {success: true}, then the project is 404', async () => {
    const created = await createProject();
    const id = created.json.project.id;
    const res = await del(admin, `/projects/${id}`);
    expect(res.status).toBe(200);
    expect(res.json).toEqual({ success: true });
    const get = await admin.get(`/projects/${id}`);
    expect(get.status).toBe(404);
    expect(get.json).toEqual({ success: false, error: 'Project not found' });
    const again = await del(admin, `/projects/${id}`);
    expect(again.status).toBe(404);
  });

  it('takes its deployments along, and its webhook then answers 401', async () => {
    const created = await createProject();
    const id = created.json.project.id;
    const deploy = await admin.post('/deploy', { projectId: id });
    expect(deploy.status).toBe(200);
    expect((await del(admin, `/projects/${id}`)).status).toBe(200);
    expect((await admin.get(`/deploy/${deploy.json.deployId}`)).status).toBe(404);
    const body = JSON.stringify({
      ref: 'refs/heads/main',
      after: '6113728f27ae82c7b1a177c8d03f9e96e0adf246',
    });
    const hook = await new Client(coord.url).request('POST', `/webhook/${id}`, {
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
    const created = await createProject();
    const { client } = await signUp(coord.url);
    const res = await del(client, `/projects/${created.json.project.id}`);
    expect(res.status).toBe(403);
    expect((await admin.get(`/projects/${created.json.project.id}`)).status).toBe(200);
  });
});

describe('Project webhook secret: GET /projects/:id/webhook and rotation', () => {
  const pushBody = JSON.stringify({
    ref: 'refs/heads/main',
    after: '6113728f27ae82c7b1a177c8d03f9e96e0adf246',
  });
  const hook = async (id: string, secret: string) =>
    new Client(coord.url).request('POST', `/webhook/${id}`, {
      body: pushBody,
      headers: {
        'content-type': 'application/json',
        'x-github-event': 'push',
        'x-github-delivery': randomUUID(),
        'x-hub-signature-256': await sign(secret, pushBody),
      },
    });

  it('gives the url and secret to an admin', async () => {
    const created = await createProject();
    const res = await admin.get(`/projects/${created.json.project.id}/webhook`);
    expect(res.status).toBe(200);
    expect(res.json).toEqual({ success: true, webhook: created.json.webhook });
  });

  it('is 403 for a non-admin', async () => {
    const created = await createProject();
    const { client } = await signUp(coord.url);
    const res = await client.get(`/projects/${created.json.project.id}/webhook`);
    expect(res.status).toBe(403);
    expect(res.text).not.toContain(created.json.webhook.secret);
  });

  it('is 404 for an unknown project', async () => {
    const res = await admin.get(`/projects/${randomUUID()}/webhook`);
    expect(res.status).toBe(404);
    expect(res.json).toEqual({ success: false, error: 'Project not found' });
  });

  it('rotation gives a new secret: the old signature then fails, the new one works', async () => {
    const created = await createProject();
    const id = created.json.project.id;
    const old = created.json.webhook.secret as string;
    const before = await hook(id, old);
    expect([before.status, before.text]).toEqual([200, 'Deployment triggered']);

    const rotated = await admin.post(`/projects/${id}/webhook/rotate`);
    expect(rotated.status).toBe(200);
    expect(rotated.json.success).toBe(true);
    expect(rotated.json.webhook.url).toBe(created.json.webhook.url);
    expect(rotated.json.webhook.secret).not.toBe(old);

    const withOld = await hook(id, old);
    expect([withOld.status, withOld.text]).toEqual([401, 'Unauthorized']);
    const withNew = await hook(id, rotated.json.webhook.secret);
    expect([withNew.status, withNew.text]).toEqual([200, 'Deployment triggered']);
    const shown = await admin.get(`/projects/${id}/webhook`);
    expect(shown.json.webhook.secret).toBe(rotated.json.webhook.secret);
    const project = await admin.get(`/projects/${id}`);
    expect(project.text).not.toContain(rotated.json.webhook.secret);
  });

  it('rotation is 403 for a non-admin and 404 for an unknown project', async () => {
    const created = await createProject();
    const { client } = await signUp(coord.url);
    expect((await client.post(`/projects/${created.json.project.id}/webhook/rotate`)).status).toBe(403);
    expect((await admin.post(`/projects/${randomUUID()}/webhook/rotate`)).status).toBe(404);
  });
});

describe('SSH target', () => {
  const sshTarget = (extra: Record<string, unknown> = {}) => ({
    ssh: {
      host: 'deploy.example.com',
      port: 2222,
      username: 'deploy',
      private_key: PRIVATE_KEY,
      host_key_fingerprint: FINGERPRINT,
      ...extra,
    },
  });

  it('is accepted, and the private key never appears in a response', async () => {
    const res = await admin.post('/projects', sampleProject({ target: sshTarget() }));
    expect(res.status, res.text).toBe(201);
    expect(res.json.project.target).toEqual({
      ssh: { host: 'deploy.example.com', port: 2222, username: 'deploy', host_key_fingerprint: FINGERPRINT },
    });
    expect(res.text).not.toContain(PRIVATE_KEY_BODY_LINE);
    expect(res.text).not.toContain('PRIVATE KEY');
    const id = res.json.project.id;
    for (const r of [await admin.get(`/projects/${id}`), await admin.get('/projects')]) {
      expect(r.status).toBe(200);
      expect(r.text).not.toContain(PRIVATE_KEY_BODY_LINE);
      expect(r.text).not.toContain('PRIVATE KEY');
    }
    const patched = await patch(admin, `/projects/${id}`, { commands: ['./deploy.sh'] });
    expect(patched.status).toBe(200);
    expect(patched.text).not.toContain(PRIVATE_KEY_BODY_LINE);
    const [row] = await sql(
      'select ssh_private_key_encrypted, target::text as target from projects where id = ?',
      [id],
    );
    expect(row.ssh_private_key_encrypted).toEqual(expect.any(String));
    expect(row.ssh_private_key_encrypted).not.toContain(PRIVATE_KEY_BODY_LINE);
    expect(row.target).not.toContain(PRIVATE_KEY_BODY_LINE);
  });

  it('defaults the port to 22 and accepts the fingerprint with a trailing =', async () => {
    const target = sshTarget({ host_key_fingerprint: `${FINGERPRINT}=` });
    delete (target.ssh as Record<string, unknown>).port;
    const res = await admin.post('/projects', sampleProject({ target }));
    expect(res.status, res.text).toBe(201);
    expect(res.json.project.target.ssh.port).toBe(22);
  });

  it('a deployment of it names the SSH host', async () => {
    const res = await admin.post('/projects', sampleProject({ target: sshTarget() }));
    expect(res.status, res.text).toBe(201);
    const deploy = await admin.post('/deploy', { projectId: res.json.project.id });
    expect(deploy.status).toBe(200);
    const detail = await admin.get(`/deploy/${deploy.json.deployId}`);
    expect(detail.json.deployment.hosts).toEqual(['deploy@deploy.example.com:2222']);
    expect(detail.json.deployment.status).toBe('queued');
    expect(detail.text).not.toContain(PRIVATE_KEY_BODY_LINE);
  });

  it('is refused without a private key (400)', async () => {
    const target = sshTarget();
    delete (target.ssh as Record<string, unknown>).private_key;
    const res = await admin.post('/projects', sampleProject({ target }));
    expect(res.status).toBe(400);
    expect(res.json.success).toBe(false);
  });
});

describe('POST /agents', () => {
  it('answers 201 {success, agent: {id, name, labels}, token}', async () => {
    const name = `agent-${randomUUID().slice(0, 8)}`;
    const res = await admin.post('/agents', { name, labels: ['web', 'eu'] });
    expect(res.status).toBe(201);
    expect(Object.keys(res.json).sort()).toEqual(['agent', 'success', 'token']);
    expect(res.json.success).toBe(true);
    expect(Object.keys(res.json.agent).sort()).toEqual(['id', 'labels', 'name']);
    expect(res.json.agent.id).toMatch(UUID);
    expect(res.json.agent.name).toBe(name);
    expect(res.json.agent.labels).toEqual(['web', 'eu']);
    expect(res.json.token).toEqual(expect.any(String));
    expect(res.json.token.length).toBeGreaterThanOrEqual(20);
  });

  it('stores the token hashed', async () => {
    const res = await admin.post('/agents', { name: `agent-${randomUUID().slice(0, 8)}` });
    expect(res.status).toBe(201);
    const token = res.json.token as string;
    const [row] = await sql('select token_hash from agents where id = ?', [res.json.agent.id]);
    expect(row.token_hash).toEqual(expect.any(String));
    expect(row.token_hash).not.toBe(token);
    expect(row.token_hash).not.toContain(token);
    expect(token).not.toContain(row.token_hash);
    const whole = await sql('select row_to_json(a)::text as t from agents a where id = ?', [
      res.json.agent.id,
    ]);
    expect(whole[0].t).not.toContain(token);
  });

  it('gives each agent a different token', async () => {
    const a = await admin.post('/agents', { name: `agent-${randomUUID().slice(0, 8)}` });
    const b = await admin.post('/agents', { name: `agent-${randomUUID().slice(0, 8)}` });
    expect(a.json.token).not.toBe(b.json.token);
  });

  it('defaults labels to []', async () => {
    const res = await admin.post('/agents', { name: `agent-${randomUUID().slice(0, 8)}` });
    expect(res.json.agent.labels).toEqual([]);
  });

  it('refuses a duplicate name with 409', async () => {
    const name = `agent-${randomUUID().slice(0, 8)}`;
    expect((await admin.post('/agents', { name })).status).toBe(201);
    const res = await admin.post('/agents', { name });
    expect(res.status).toBe(409);
    expect(res.json.success).toBe(false);
    expect(res.json.error).toEqual(expect.any(String));
  });

  it('refuses invalid names and labels with 400', async () => {
    for (const body of [{}, { name: '' }, { name: 'bad name' }, { name: 'ok', labels: ['bad label'] }]) {
      const res = await admin.post('/agents', body);
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect(res.json.success).toBe(false);
    }
  });

  it('is 401 without a session and 403 for a non-admin', async () => {
    const anonymous = await new Client(coord.url).post('/agents', { name: 'nope' });
    expect(anonymous.status).toBe(401);
    expect(anonymous.json).toEqual({ success: false, error: 'Authentication required' });
    const { client } = await signUp(coord.url);
    const res = await client.post('/agents', { name: 'nope2' });
    expect(res.status).toBe(403);
  });

  it('records agent.create in the audit log with the actor email', async () => {
    const res = await admin.post('/agents', { name: `agent-${randomUUID().slice(0, 8)}` });
    const rows = await sql(
      `select actor_type, actor_name from audit_events where action = 'agent.create' and target_id = ?`,
      [res.json.agent.id],
    );
    expect(rows).toEqual([{ actor_type: 'user', actor_name: adminEmail }]);
  });
});

describe('GET /agents', () => {
  it('lists agents offline, without their tokens', async () => {
    const name = `agent-${randomUUID().slice(0, 8)}`;
    const created = await admin.post('/agents', { name, labels: ['db'] });
    const res = await admin.get('/agents');
    expect(res.status).toBe(200);
    expect(res.json.success).toBe(true);
    const agent = res.json.agents.find((a: { id: string }) => a.id === created.json.agent.id);
    expect(agent).toEqual({
      id: created.json.agent.id,
      name,
      labels: ['db'],
      online: false,
      version: null,
      last_seen_at: null,
    });
    expect(res.text).not.toContain(created.json.token);
    expect(res.text).not.toContain('token');
  });

  it('is 401 without a session', async () => {
    const res = await new Client(coord.url).get('/agents');
    expect(res.status).toBe(401);
  });
});

describe('DELETE /agents/:id', () => {
  it('answers 200, then the agent is gone', async () => {
    const created = await admin.post('/agents', { name: `agent-${randomUUID().slice(0, 8)}` });
    const id = created.json.agent.id;
    const res = await del(admin, `/agents/${id}`);
    expect(res.status).toBe(200);
    expect(res.json).toEqual({ success: true });
    const list = await admin.get('/agents');
    expect(list.json.agents.map((a: { id: string }) => a.id)).not.toContain(id);
    expect(await sql('select id from agents where id = ?', [id])).toEqual([]);
    const again = await del(admin, `/agents/${id}`);
    expect(again.status).toBe(404);
    expect(again.json.success).toBe(false);
  });

  it('is 404 for a malformed id and 403 for a non-admin', async () => {
    expect((await del(admin, '/agents/abc')).status).toBe(404);
    const created = await admin.post('/agents', { name: `agent-${randomUUID().slice(0, 8)}` });
    const { client } = await signUp(coord.url);
    expect((await del(client, `/agents/${created.json.agent.id}`)).status).toBe(403);
  });
});

describe('Health and OpenAPI', () => {
  it('GET /healthz is 200 without a session', async () => {
    const res = await new Client(coord.url).get('/healthz');
    expect(res.status).toBe(200);
    expect(res.json.success).toBe(true);
  });

  it('GET /readyz is 200 {success: true, ...} without a session', async () => {
    const res = await new Client(coord.url).get('/readyz');
    expect(res.status).toBe(200);
    expect(res.json).toMatchObject({ success: true });
  });

  it('GET /openapi.json is an OpenAPI 3 document with the main paths', async () => {
    const res = await new Client(coord.url).get('/openapi.json');
    expect(res.status).toBe(200);
    expect(String(res.json.openapi)).toMatch(/^3\./);
    for (const path of ['/deploy', '/deploy/{id}', '/projects', '/webhook/{projectId}']) {
      expect(res.json.paths, path).toHaveProperty([path]);
    }
    expect(res.json.paths['/deploy']).toHaveProperty('post');
    expect(res.json.paths['/deploy/{id}']).toHaveProperty('get');
    expect(res.json.paths['/webhook/{projectId}']).toHaveProperty('post');
  });
});
