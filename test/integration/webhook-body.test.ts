// POST /webhook/:projectId (the spec, API.md "Webhook") with bodies it cannot use: empty or not
// JSON, other content types, and sizes over the limit, answered in plain text.
import { randomUUID } from 'node:crypto';
import { sign } from '@octokit/webhooks-methods';
import { beforeAll, describe, expect, it } from 'vitest';
import { coordinatorWithAdmin } from '../helpers/coordinator.ts';
import { PUSHED } from '../helpers/github-examples.ts';
import { expectPlain, pushTo, signAny, signEmpty, webhookTools } from '../helpers/webhooks.ts';

const api = coordinatorWithAdmin();
const { createProject, deliver, githubDelivery, deploymentsOf } = webhookTools(api);
const MiB = 1024 * 1024;

describe('Webhook: a signed delivery without a usable body', () => {
  let project: { id: string; secret: string };
  beforeAll(async () => {
    project = await createProject();
  });

  for (const [name, body] of [
    ['an empty body', ''],
    ['a non-JSON body', 'this is not json'],
    ['null', 'null'],
    ['a JSON string', '"push"'],
    ['a JSON array', '[1,2,3]'],
    ['truncated JSON', JSON.stringify(pushTo('main')).slice(0, 100)],
  ] as const) {
    it(`is 400 No body for ${name}`, async () => {
      const res = await deliver(project.id, body, {
        'content-type': 'application/json',
        'x-github-event': 'push',
        'x-hub-signature-256': await signAny(project.secret, body),
      });
      expectPlain(res, 400, 'No body');
      expect(await deploymentsOf(project.id)).toHaveLength(0);
    });
  }

  it('is 400 No body for a signed empty body with no content type', async () => {
    const res = await deliver(project.id, '', {
      'x-github-event': 'push',
      'x-hub-signature-256': signEmpty(project.secret),
    });
    expectPlain(res, 400, 'No body');
  });
});

describe('Webhook: content types and sizes', () => {
  let project: { id: string; secret: string };
  beforeAll(async () => {
    project = await createProject();
  });

  for (const contentType of [
    'application/json',
    'text/plain',
    'application/octet-stream',
    'application/vnd.github+json; charset=utf-8',
  ]) {
    it(`accepts a JSON body sent as ${contentType}`, async () => {
      const res = await githubDelivery(project, pushTo('main'), { headers: { 'content-type': contentType } });
      expectPlain(res, 200, 'Deployment triggered');
    });
  }

  it('accepts a JSON body with no content type at all', async () => {
    const body = JSON.stringify(pushTo('main'));
    const res = await deliver(project.id, Buffer.from(body), {
      'x-github-event': 'push',
      'x-hub-signature-256': await sign(project.secret, body),
    });
    expectPlain(res, 200, 'Deployment triggered');
  });

  it('accepts application/x-www-form-urlencoded with payload=, signed over the form bytes', async () => {
    const p = await createProject();
    const form = `payload=${encodeURIComponent(JSON.stringify(pushTo('main')))}`;
    const res = await deliver(p.id, form, {
      'content-type': 'application/x-www-form-urlencoded',
      'x-github-event': 'push',
      'x-github-delivery': randomUUID(),
      'x-hub-signature-256': await sign(p.secret, form),
    });
    expectPlain(res, 200, 'Deployment triggered');
    const rows = await deploymentsOf(p.id);
    expect(rows).toHaveLength(1);
    expect(rows[0].commit).toBe(PUSHED);
  });

  it('refuses a form whose signature covers the decoded JSON instead of the form bytes', async () => {
    const json = JSON.stringify(pushTo('main'));
    const form = `payload=${encodeURIComponent(json)}`;
    const res = await deliver(project.id, form, {
      'content-type': 'application/x-www-form-urlencoded',
      'x-github-event': 'push',
      'x-hub-signature-256': await sign(project.secret, json),
    });
    expectPlain(res, 401, 'Unauthorized');
  });

  it('accepts a 20 MiB signed body (not 413)', async () => {
    const p = await createProject();
    const payload = { ...pushTo('main'), padding: 'x'.repeat(20 * MiB) };
    const body = JSON.stringify(payload);
    expect(body.length).toBeGreaterThan(20 * MiB);
    const res = await deliver(p.id, body, {
      'content-type': 'application/json',
      'x-github-event': 'push',
      'x-github-delivery': randomUUID(),
      'x-hub-signature-256': await sign(p.secret, body),
    });
    expectPlain(res, 200, 'Deployment triggered');
    expect(await deploymentsOf(p.id)).toHaveLength(1);
  });

  it('refuses a body over 25 MiB with 413, deploying nothing', async () => {
    const p = await createProject();
    const payload = { ...pushTo('main'), padding: 'x'.repeat(26 * MiB) };
    const body = JSON.stringify(payload);
    let status: number | 'connection closed';
    try {
      const res = await deliver(p.id, body, {
        'content-type': 'application/json',
        'x-github-event': 'push',
        'x-hub-signature-256': await sign(p.secret, body),
      });
      status = res.status;
      expect(res.text).not.toBe('Deployment triggered');
    } catch {
      // The server may answer 413 and close before the upload finishes.
      status = 'connection closed';
    }
    expect([413, 'connection closed']).toContain(status);
    expect(await deploymentsOf(p.id)).toHaveLength(0);
  });
});
