// A project's secrets (API.md "Projects"): encrypted at rest, the webhook secret shown only to
// admins and rotated on demand, and an SSH target's private key never shown at all.
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
  FINGERPRINT,
  PRIVATE_KEY,
  PRIVATE_KEY_BODY_LINE,
  patch,
  storedSecrets,
} from '../helpers/projects.ts';
import { sql } from '../helpers/sql.ts';

const api = coordinatorWithAdmin({ REGISTRATION: 'open' });

describe('Project secrets at rest', () => {
  it('are encrypted: the stored columns do not contain the plaintext', async () => {
    const res = await createProject(api.admin, { webhook_secret: 'plain-webhook-secret-value' });
    const [row] = await sql(
      api.coord,
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
    const whole = await sql(api.coord, 'select row_to_json(p)::text as t from projects p where id = ?', [
      res.json.project.id,
    ]);
    expect(whole[0].t).not.toContain(SECRET_VALUE);
    expect(whole[0].t).not.toContain('plain-webhook-secret-value');
    // and they are the real values, sealed with the coordinator's key
    expect(await storedSecrets(api.coord, res.json.project.id)).toEqual({ API_KEY: SECRET_VALUE });
  });

  it('a generated webhook secret is not stored in clear either', async () => {
    const res = await createProject(api.admin);
    const whole = await sql(api.coord, 'select row_to_json(p)::text as t from projects p where id = ?', [
      res.json.project.id,
    ]);
    expect(whole[0].t).not.toContain(res.json.webhook.secret);
  });
});

describe('Project webhook secret: GET /projects/:id/webhook and rotation', () => {
  const pushBody = JSON.stringify({
    ref: 'refs/heads/main',
    after: '6113728f27ae82c7b1a177c8d03f9e96e0adf246',
  });
  const hook = async (id: string, secret: string) =>
    new Client(api.coord.url).request('POST', `/webhook/${id}`, {
      body: pushBody,
      headers: {
        'content-type': 'application/json',
        'x-github-event': 'push',
        'x-github-delivery': randomUUID(),
        'x-hub-signature-256': await sign(secret, pushBody),
      },
    });

  it('gives the url and secret to an admin', async () => {
    const created = await createProject(api.admin);
    const res = await api.admin.get(`/projects/${created.json.project.id}/webhook`);
    expect(res.status).toBe(200);
    expect(res.json).toEqual({ success: true, webhook: created.json.webhook });
  });

  it('is 403 for a non-admin', async () => {
    const created = await createProject(api.admin);
    const { client } = await signUp(api.coord.url);
    const res = await client.get(`/projects/${created.json.project.id}/webhook`);
    expect(res.status).toBe(403);
    expect(res.text).not.toContain(created.json.webhook.secret);
  });

  it('is 404 for an unknown project', async () => {
    const res = await api.admin.get(`/projects/${randomUUID()}/webhook`);
    expect(res.status).toBe(404);
    expect(res.json).toEqual({ success: false, error: 'Project not found' });
  });

  it('rotation gives a new secret: the old signature then fails, the new one works', async () => {
    const created = await createProject(api.admin);
    const id = created.json.project.id;
    const old = created.json.webhook.secret as string;
    const before = await hook(id, old);
    expect([before.status, before.text]).toEqual([200, 'Deployment triggered']);

    const rotated = await api.admin.post(`/projects/${id}/webhook/rotate`);
    expect(rotated.status).toBe(200);
    expect(rotated.json.success).toBe(true);
    expect(rotated.json.webhook.url).toBe(created.json.webhook.url);
    expect(rotated.json.webhook.secret).not.toBe(old);

    const withOld = await hook(id, old);
    expect([withOld.status, withOld.text]).toEqual([401, 'Unauthorized']);
    const withNew = await hook(id, rotated.json.webhook.secret);
    expect([withNew.status, withNew.text]).toEqual([200, 'Deployment triggered']);
    const shown = await api.admin.get(`/projects/${id}/webhook`);
    expect(shown.json.webhook.secret).toBe(rotated.json.webhook.secret);
    const project = await api.admin.get(`/projects/${id}`);
    expect(project.text).not.toContain(rotated.json.webhook.secret);
  });

  it('rotation is 403 for a non-admin and 404 for an unknown project', async () => {
    const created = await createProject(api.admin);
    const { client } = await signUp(api.coord.url);
    expect((await client.post(`/projects/${created.json.project.id}/webhook/rotate`)).status).toBe(403);
    expect((await api.admin.post(`/projects/${randomUUID()}/webhook/rotate`)).status).toBe(404);
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
    const res = await api.admin.post('/projects', sampleProject({ target: sshTarget() }));
    expect(res.status, res.text).toBe(201);
    expect(res.json.project.target).toEqual({
      ssh: { host: 'deploy.example.com', port: 2222, username: 'deploy', host_key_fingerprint: FINGERPRINT },
    });
    expect(res.text).not.toContain(PRIVATE_KEY_BODY_LINE);
    expect(res.text).not.toContain('PRIVATE KEY');
    const id = res.json.project.id;
    for (const r of [await api.admin.get(`/projects/${id}`), await api.admin.get('/projects')]) {
      expect(r.status).toBe(200);
      expect(r.text).not.toContain(PRIVATE_KEY_BODY_LINE);
      expect(r.text).not.toContain('PRIVATE KEY');
    }
    const patched = await patch(api.admin, `/projects/${id}`, { commands: ['./deploy.sh'] });
    expect(patched.status).toBe(200);
    expect(patched.text).not.toContain(PRIVATE_KEY_BODY_LINE);
    const [row] = await sql(
      api.coord,
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
    const res = await api.admin.post('/projects', sampleProject({ target }));
    expect(res.status, res.text).toBe(201);
    expect(res.json.project.target.ssh.port).toBe(22);
  });

  it('a deployment of it names the SSH host', async () => {
    const res = await api.admin.post('/projects', sampleProject({ target: sshTarget() }));
    expect(res.status, res.text).toBe(201);
    const deploy = await api.admin.post('/deploy', { projectId: res.json.project.id });
    expect(deploy.status).toBe(200);
    const detail = await api.admin.get(`/deploy/${deploy.json.deployId}`);
    expect(detail.json.deployment.hosts).toEqual(['deploy@deploy.example.com:2222']);
    // It runs at once (the host is not reachable from here: it then fails, see test/e2e/ssh-target).
    expect(['queued', 'running', 'failed']).toContain(detail.json.deployment.status);
    expect(detail.text).not.toContain(PRIVATE_KEY_BODY_LINE);
  });

  it('is refused without a private key (400)', async () => {
    const target = sshTarget();
    delete (target.ssh as Record<string, unknown>).private_key;
    const res = await api.admin.post('/projects', sampleProject({ target }));
    expect(res.status).toBe(400);
    expect(res.json.success).toBe(false);
  });
});
