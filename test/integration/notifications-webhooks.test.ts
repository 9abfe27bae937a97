// Outgoing webhooks per project: signed in the style of the Standard Webhooks specification,
// received by a real HTTP server that verifies the signature on its own (below, written from the
// specification, not from Deckhand's code), retried with backoff, every attempt recorded.
import { createHmac, timingSafeEqual } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  type Client,
  createProject,
  signUp,
  startCoordinator,
  type TestCoordinator,
} from '../helpers/coordinator.ts';
import { startHttpReceiver, type HttpReceiver, type ReceivedRequest } from '../helpers/http-receiver.ts';
import { endDeployment, eventually, FAST_NOTIFY, markRunning, noticed } from '../helpers/notifications.ts';
import { del } from '../helpers/projects.ts';
import { expectJsonError } from '../helpers/responses.ts';
import { closedPort } from '../helpers/smtp-server.ts';

const PUBLIC_URL = 'https://deploy.example.com';
let coord: TestCoordinator;
let admin: Client;
let viewer: Client;
let receiver: HttpReceiver;

beforeAll(async () => {
  receiver = await startHttpReceiver();
  coord = await startCoordinator({ ...FAST_NOTIFY, REGISTRATION: 'open', PUBLIC_URL });
  ({ client: admin } = await signUp(coord.url));
  ({ client: viewer } = await signUp(coord.url));
});

afterAll(async () => {
  await coord?.close();
  await receiver?.close();
});

/**
 * Standard Webhooks verification, from the specification: the signed content is
 * `${webhook-id}.${webhook-timestamp}.${body}`, the key is the base64 secret after `whsec_`, and
 * `webhook-signature` holds space-separated `v1,<base64 HMAC-SHA256>` entries, one of which must
 * match; the timestamp must be recent.
 */
function verifyStandardWebhook(secret: string, request: ReceivedRequest): boolean {
  const id = request.headers['webhook-id'];
  const timestamp = request.headers['webhook-timestamp'];
  const signatures = request.headers['webhook-signature'];
  if (typeof id !== 'string' || typeof timestamp !== 'string' || typeof signatures !== 'string') return false;
  if (Math.abs(Date.now() / 1000 - Number(timestamp)) > 5 * 60) return false;
  const key = Buffer.from(secret.slice('whsec_'.length), 'base64');
  const expected = createHmac('sha256', key).update(`${id}.${timestamp}.${request.body}`).digest();
  return signatures.split(' ').some((entry) => {
    const [version, value] = entry.split(',');
    if (version !== 'v1' || !value) return false;
    const given = Buffer.from(value, 'base64');
    return given.length === expected.length && timingSafeEqual(given, expected);
  });
}

async function newProject() {
  return (await createProject(admin)).json.project as { id: string; name: string };
}

async function deploy(projectId: string): Promise<string> {
  const res = await admin.post('/deploy', { projectId, commit: 'a1b2c3d4e5f60718293a4b5c6d7e8f9012345678' });
  expect(res.status, res.text).toBe(200);
  return res.json.deployId;
}

async function addHook(projectId: string, body: Record<string, unknown>) {
  const res = await admin.post(`/projects/${projectId}/hooks`, body);
  expect(res.status, res.text).toBe(201);
  return res.json as { hook: { id: string; url: string; events: string[] }; secret: string };
}

function requestsTo(path: string) {
  return receiver.requests.filter((r) => r.url === path);
}

describe('managing outgoing webhooks', () => {
  it('an admin adds one; the secret (whsec_) is shown once; viewers list them without it', async () => {
    const p = await newProject();
    const created = await addHook(p.id, { url: `${receiver.url}/manage` });
    expect(created.secret).toMatch(/^whsec_[A-Za-z0-9+/]{32}$/);
    expect(created.hook).toMatchObject({
      url: `${receiver.url}/manage`,
      events: ['deployment.started', 'deployment.finished'],
    });
    const listed = await viewer.get(`/projects/${p.id}/hooks`);
    expect(listed.status).toBe(200);
    expect(listed.json.hooks).toEqual([created.hook]);
    expect(listed.text).not.toContain(created.secret);
    expect(listed.text).not.toContain(created.secret.slice('whsec_'.length));
    expectJsonError(await viewer.post(`/projects/${p.id}/hooks`, { url: `${receiver.url}/x` }), 403);
    expectJsonError(await viewer.request('DELETE', `/projects/${p.id}/hooks/${created.hook.id}`), 403);
    expect((await del(admin, `/projects/${p.id}/hooks/${created.hook.id}`)).status).toBe(200);
    expect((await admin.get(`/projects/${p.id}/hooks`)).json.hooks).toEqual([]);
    expectJsonError(await del(admin, `/projects/${p.id}/hooks/${created.hook.id}`), 404, 'Webhook not found');
  });

  it.each([
    ['ftp://example.com/hook'],
    ['file:///etc/passwd'],
    ['http://user:secret@example.com/hook'],
    ['not a url'],
    ['javascript:alert(1)'],
  ])('refuses %s', async (url) => {
    const p = await newProject();
    expectJsonError(await admin.post(`/projects/${p.id}/hooks`, { url }), 400);
    expectJsonError(
      await admin.post(`/projects/${p.id}/hooks`, { url: 'https://ok.example', events: ['nope'] }),
      400,
    );
  });
});

describe('delivery', () => {
  it('signs each event, retries after a 500, and records every attempt', async () => {
    const p = await newProject();
    const { hook, secret } = await addHook(p.id, { url: `${receiver.url}/signed` });
    let finishedTries = 0;
    receiver.respond = (req) => {
      if (req.url !== '/signed') return { status: 200 };
      const type = JSON.parse(req.body).type as string;
      if (type === 'deployment.finished' && ++finishedTries === 1) return { status: 500, body: 'boom' };
      return { status: 204 };
    };
    const id = await deploy(p.id);
    await markRunning(coord, id);
    await eventually(async () => requestsTo('/signed').length >= 1);
    await endDeployment(coord, id, 'failed', 'Command failed on web-1: make (exit 2)');
    await eventually(async () => requestsTo('/signed').length >= 3);

    const [started, firstTry, retry] = requestsTo('/signed');
    for (const request of [started!, firstTry!, retry!]) {
      expect(request.method).toBe('POST');
      expect(request.headers['content-type']).toBe('application/json');
      expect(verifyStandardWebhook(secret, request)).toBe(true);
      // any other secret fails: the check above can fail
      expect(verifyStandardWebhook(`whsec_${Buffer.alloc(24).toString('base64')}`, request)).toBe(false);
    }
    expect(verifyStandardWebhook(secret, { ...retry!, body: retry!.body.replace('failed', 'success') })).toBe(
      false,
    );

    const startedBody = JSON.parse(started!.body);
    expect(startedBody).toMatchObject({
      type: 'deployment.started',
      data: { project: { id: p.id, name: p.name }, deployment: { id, status: 'running' } },
    });
    const body = JSON.parse(retry!.body);
    expect(body).toEqual({
      type: 'deployment.finished',
      timestamp: expect.stringMatching(/Z$/),
      data: {
        project: { id: p.id, name: p.name },
        deployment: {
          id,
          status: 'failed',
          reason: 'Command failed on web-1: make (exit 2)',
          commit: 'a1b2c3d4e5f60718293a4b5c6d7e8f9012345678',
          branch: 'main',
          trigger: 'manual',
          triggered_by: expect.any(String),
          started_at: expect.stringMatching(/Z$/),
          finished_at: expect.stringMatching(/Z$/),
          duration_seconds: expect.any(Number),
          url: `${PUBLIC_URL}/deploy/${id}`,
        },
      },
    });
    // A retry is the same message: same id, same body; only its timestamp and signature are new.
    expect(retry!.headers['webhook-id']).toBe(firstTry!.headers['webhook-id']);
    expect(retry!.body).toBe(firstTry!.body);
    expect(started!.headers['webhook-id']).not.toBe(firstTry!.headers['webhook-id']);
    expect(retry!.at - firstTry!.at).toBeGreaterThanOrEqual(150); // NOTIFY_RETRY_BASE_MS=200, minus clock slack

    const deliveries = await eventually(async () => {
      const res = await viewer.get(`/projects/${p.id}/hooks/${hook.id}/deliveries`);
      const list = res.json.deliveries;
      return list.length === 2 && list[0].state === 'delivered' ? list : null;
    });
    expect(deliveries[0]).toMatchObject({
      channel: 'webhook',
      hook_id: hook.id,
      event: 'deployment.finished',
      deployment_id: id,
      deployment_status: 'failed',
      attempts: 2,
      last_error: null,
      next_attempt_at: null,
    });
    expect(deliveries[0].id).toBe(firstTry!.headers['webhook-id']);
    expect(deliveries[0].attempt_log).toEqual([
      expect.objectContaining({ success: false, status_code: 500, error: 'HTTP 500: boom' }),
      expect.objectContaining({ success: true, status_code: 204, error: null }),
    ]);
    expect(deliveries[1]).toMatchObject({ event: 'deployment.started', state: 'delivered', attempts: 1 });
  });

  it('only the events a hook asked for', async () => {
    const p = await newProject();
    await addHook(p.id, { url: `${receiver.url}/finished-only`, events: ['deployment.finished'] });
    const id = await deploy(p.id);
    await markRunning(coord, id);
    await eventually(async () => (await noticed(coord, id)) === 'running');
    await endDeployment(coord, id, 'success', null);
    await eventually(async () => requestsTo('/finished-only').length >= 1);
    await new Promise((r) => setTimeout(r, 300));
    expect(requestsTo('/finished-only').map((r) => JSON.parse(r.body).type)).toEqual(['deployment.finished']);
  });

  it('a receiver that cannot be reached: retried until the attempts run out, the deployment unchanged', async () => {
    const p = await newProject();
    const { hook } = await addHook(p.id, { url: `http://127.0.0.1:${await closedPort()}/gone` });
    const id = await deploy(p.id);
    await endDeployment(coord, id, 'success', null);
    const [delivery] = await eventually(async () => {
      const list = (await admin.get(`/projects/${p.id}/hooks/${hook.id}/deliveries`)).json.deliveries;
      return list[0]?.state === 'failed' ? list : null;
    });
    expect(delivery.attempts).toBe(3);
    expect(delivery.last_error).toBe('Could not connect (ECONNREFUSED)');
    expect(delivery.attempt_log.map((a: { status_code: number | null }) => a.status_code)).toEqual([
      null,
      null,
      null,
    ]);
    expect((await admin.get(`/deploy/${id}`)).json.deployment.status).toBe('success');
    // and the project's notification record shows it too
    const all = (await viewer.get(`/projects/${p.id}/notifications`)).json.notifications;
    expect(all).toEqual([expect.objectContaining({ id: delivery.id, state: 'failed' })]);
  });

  it('deployments that ended before the hook existed are not sent', async () => {
    const p = await newProject();
    const id = await deploy(p.id);
    await endDeployment(coord, id, 'success', null);
    await new Promise((r) => setTimeout(r, 200));
    await addHook(p.id, { url: `${receiver.url}/late` });
    await eventually(async () => (await noticed(coord, id)) === 'success');
    await new Promise((r) => setTimeout(r, 300));
    expect(requestsTo('/late')).toEqual([]);
  });
});
