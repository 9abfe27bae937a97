// Pushes from every common forge, each with its own signing scheme; branch patterns; `[skip
// deploy]`; and the per-project delivery record with Deckhand's own "redeliver".
import { createHmac } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { coordinatorWithAdmin, sampleProject, signUp } from '../helpers/coordinator.ts';
import { branchPush, webhookFixture } from '../helpers/github-examples.ts';
import { expectJsonError } from '../helpers/responses.ts';

const api = coordinatorWithAdmin({ REGISTRATION: 'open' });

const hex = (secret: string, body: string) => createHmac('sha256', secret).update(body).digest('hex');

async function project(overrides: Record<string, unknown> = {}) {
  const res = await api.admin.post('/projects', sampleProject(overrides));
  expect(res.status).toBe(201);
  return { id: res.json.project.id as string, secret: res.json.webhook.secret as string };
}

async function send(projectId: string, body: string, headers: Record<string, string>) {
  const res = await fetch(`${api.coord.url}/webhook/${projectId}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body,
  });
  return { status: res.status, text: await res.text() };
}

async function latestDeployment(projectId: string) {
  const res = await api.admin.get(`/deployments?project_id=${projectId}&limit=1`);
  return res.json.deployments[0];
}

describe('Gitea and Forgejo', () => {
  const gitea = webhookFixture('gitea-push.json');

  it('X-Gitea-Signature (HMAC-SHA256 hex, no prefix) deploys the pushed commit', async () => {
    const p = await project({ branch_name: 'develop' });
    const body = JSON.stringify(gitea);
    const res = await send(p.id, body, {
      'x-gitea-event': 'push',
      'x-gitea-delivery': 'gitea-1',
      'x-gitea-signature': hex(p.secret, body),
    });
    expect(res).toEqual({ status: 200, text: 'Deployment triggered' });
    expect(await latestDeployment(p.id)).toMatchObject({
      commit: gitea.after,
      branch: 'develop',
      trigger: 'webhook',
    });
  });

  it('a wrong X-Gitea-Signature is 401 Unauthorized', async () => {
    const p = await project({ branch_name: 'develop' });
    const body = JSON.stringify(gitea);
    const res = await send(p.id, body, { 'x-gitea-event': 'push', 'x-gitea-signature': hex('wrong', body) });
    expect(res).toEqual({ status: 401, text: 'Unauthorized' });
  });

  it('Forgejo’s X-Forgejo-Event with X-Hub-Signature-256 deploys, recorded as forgejo', async () => {
    const forgejo = webhookFixture('forgejo-push.json');
    const p = await project({ branch_name: 'develop' });
    const body = JSON.stringify(forgejo);
    const res = await send(p.id, body, {
      'x-forgejo-event': 'push',
      'x-forgejo-delivery': 'forgejo-1',
      'x-hub-signature-256': `sha256=${hex(p.secret, body)}`,
    });
    expect(res.text).toBe('Deployment triggered');
    expect(await latestDeployment(p.id)).toMatchObject({ commit: forgejo.after, branch: 'develop' });
    const deliveries = await api.admin.get(`/projects/${p.id}/deliveries`);
    expect(deliveries.json.deliveries[0]).toMatchObject({ forge: 'forgejo', decision: 'deployed' });
  });

  it('Gogs’ X-Gogs-Signature deploys (its documented payload has no `after`: the branch head is used)', async () => {
    const gogs = webhookFixture('gogs-push.json');
    const p = await project({ branch_name: 'master' });
    const body = JSON.stringify(gogs);
    const res = await send(p.id, body, { 'x-gogs-event': 'push', 'x-gogs-signature': hex(p.secret, body) });
    expect(res.text).toBe('Deployment triggered');
    expect(await latestDeployment(p.id)).toMatchObject({
      commit: null,
      branch: 'master',
      trigger: 'webhook',
    });
  });
});

describe('GitLab', () => {
  const gitlab = webhookFixture('gitlab-push.json');

  it('X-Gitlab-Token equal to the secret deploys the pushed commit (Push Hook)', async () => {
    const p = await project({ branch_name: 'master' });
    const body = JSON.stringify(gitlab);
    const res = await send(p.id, body, {
      'x-gitlab-event': 'Push Hook',
      'x-gitlab-event-uuid': 'gitlab-1',
      'x-gitlab-token': p.secret,
    });
    expect(res).toEqual({ status: 200, text: 'Deployment triggered' });
    expect(await latestDeployment(p.id)).toMatchObject({ commit: gitlab.checkout_sha, branch: 'master' });
  });

  it.each([
    ['a wrong token', 'nope'],
    ['an empty token', ''],
    ['the secret with a suffix', 'SECRET-x'],
  ])('%s is 401 Unauthorized', async (_name, token) => {
    const p = await project({ branch_name: 'master' });
    const res = await send(p.id, JSON.stringify(gitlab), {
      'x-gitlab-event': 'Push Hook',
      'x-gitlab-token': token.replace('SECRET', p.secret),
    });
    expect(res).toEqual({ status: 401, text: 'Unauthorized' });
  });
});

describe('branch patterns', () => {
  async function push(p: { id: string; secret: string }, branch: string, message = 'change') {
    const body = JSON.stringify({
      ...branchPush,
      ref: `refs/heads/${branch}`,
      head_commit: { ...(branchPush.head_commit as object), message },
    });
    return send(p.id, body, {
      'x-github-event': 'push',
      'x-hub-signature-256': `sha256=${hex(p.secret, body)}`,
    });
  }

  it('deploys branches matching a glob, with the pushed branch, and ignores others', async () => {
    const p = await project({ branch_patterns: ['release/*'] });
    expect((await push(p, 'release/1.2')).text).toBe('Deployment triggered');
    expect(await latestDeployment(p.id)).toMatchObject({ branch: 'release/1.2' });
    expect(await push(p, 'release/1.2/hotfix')).toEqual({
      status: 200,
      text: 'Ignored: branch release/1.2/hotfix is not deployed',
    });
    expect((await push(p, 'main')).text).toBe('Deployment triggered');
  });

  it('** crosses slashes; patterns are validated', async () => {
    const p = await project({ branch_patterns: ['env/**'] });
    expect((await push(p, 'env/eu/prod')).text).toBe('Deployment triggered');
    expectJsonError(
      await api.admin.post('/projects', sampleProject({ branch_patterns: ['bad pattern'] })),
      400,
    );
  });

  it('a commit message with [skip deploy] is ignored, saying so', async () => {
    const p = await project();
    expect(await push(p, 'main', 'docs only [skip deploy]')).toEqual({
      status: 200,
      text: 'Ignored: the commit message says [skip deploy]',
    });
  });
});

describe('the delivery record', () => {
  it('explains every delivery, without secret headers, newest first', async () => {
    const p = await project();
    const body = JSON.stringify({ ...branchPush, ref: 'refs/heads/main' });
    await send(p.id, body, { 'x-github-event': 'push', 'x-hub-signature-256': 'sha256=00' });
    await send(p.id, body, {
      'x-github-event': 'push',
      'x-github-delivery': 'd-1',
      'x-hub-signature-256': `sha256=${hex(p.secret, body)}`,
    });
    const res = await api.admin.get(`/projects/${p.id}/deliveries`);
    const [deployed, rejected] = res.json.deliveries;
    expect(deployed).toMatchObject({
      decision: 'deployed',
      reason: 'Deployment triggered',
      delivery_id: 'd-1',
    });
    expect(deployed.deployment_id).toMatch(/^[0-9a-f-]{36}$/);
    expect(rejected).toMatchObject({ decision: 'rejected', signature_valid: false, status_code: 401 });
    expect(res.text).not.toContain(hex(p.secret, body));
    expect(res.text).not.toContain('x-hub-signature-256');
  });

  it('redeliver runs a verified delivery again as a new delivery (not a duplicate)', async () => {
    const p = await project();
    const body = JSON.stringify({ ...branchPush, ref: 'refs/heads/main' });
    await send(p.id, body, {
      'x-github-event': 'push',
      'x-github-delivery': 'd-2',
      'x-hub-signature-256': `sha256=${hex(p.secret, body)}`,
    });
    const [original] = (await api.admin.get(`/projects/${p.id}/deliveries`)).json.deliveries;
    const again = await api.admin.post(`/projects/${p.id}/deliveries/${original.id}/redeliver`);
    expect(again.status).toBe(200);
    expect(again.json).toMatchObject({ status_code: 200, reason: 'Deployment triggered' });
    expect(again.json.deployment_id).not.toBe(original.deployment_id);
    const [redelivered] = (await api.admin.get(`/projects/${p.id}/deliveries`)).json.deliveries;
    expect(redelivered).toMatchObject({ redelivery_of: original.id, decision: 'deployed' });
  });

  it('refuses to redeliver a rejected delivery; viewers may read but not redeliver', async () => {
    const p = await project();
    await send(p.id, '{}', { 'x-github-event': 'push', 'x-hub-signature-256': 'sha256=00' });
    const [rejected] = (await api.admin.get(`/projects/${p.id}/deliveries`)).json.deliveries;
    expectJsonError(
      await api.admin.post(`/projects/${p.id}/deliveries/${rejected.id}/redeliver`),
      409,
      'Only a verified delivery whose payload was kept can be redelivered',
    );
    const { client: viewer } = await signUp(api.coord.url);
    expect((await viewer.get(`/projects/${p.id}/deliveries`)).status).toBe(200);
    expectJsonError(await viewer.post(`/projects/${p.id}/deliveries/${rejected.id}/redeliver`), 403);
    expectJsonError(
      await api.admin.post(`/projects/${p.id}/deliveries/nope/redeliver`),
      404,
      'Delivery not found',
    );
  });
});
