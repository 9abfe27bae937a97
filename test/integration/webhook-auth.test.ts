// POST /webhook/:projectId (the spec, API.md "Webhook") refuses a bad or missing signature and an
// unknown project alike, with a plain-text 401 that reveals nothing.
import { randomUUID } from 'node:crypto';
import { sign } from '@octokit/webhooks-methods';
import { beforeAll, describe, expect, it } from 'vitest';
import { coordinatorWithAdmin } from '../helpers/coordinator.ts';
import { ping } from '../helpers/github-examples.ts';
import { expectPlain, flip, pushTo, webhookTools } from '../helpers/webhooks.ts';

const api = coordinatorWithAdmin();
const { createProject, deliver, deploymentsOf } = webhookTools(api);

describe('Webhook: a bad or missing signature', () => {
  let project: { id: string; secret: string };
  let body: string;
  let good: string;

  beforeAll(async () => {
    project = await createProject();
    body = JSON.stringify(pushTo('main'));
    good = await sign(project.secret, body);
  });

  const cases: Array<[string, () => Promise<Record<string, string>>]> = [
    ['a wrong secret', async () => ({ 'x-hub-signature-256': await sign('not-the-secret-at-all', body) })],
    ['a missing header', async () => ({})],
    ['a garbled header (sha256=zz)', async () => ({ 'x-hub-signature-256': 'sha256=zz' })],
    ['an empty header', async () => ({ 'x-hub-signature-256': '' })],
    ['a bare hex digest', async () => ({ 'x-hub-signature-256': good.slice('sha256='.length) })],
    ['a sha1= prefix', async () => ({ 'x-hub-signature-256': `sha1=${good.slice('sha256='.length)}` })],
    ['a truncated digest', async () => ({ 'x-hub-signature-256': good.slice(0, -2) })],
    ['the digest with a flipped digit', async () => ({ 'x-hub-signature-256': flip(good) })],
    ['only X-Hub-Signature (sha1)', async () => ({ 'x-hub-signature': `sha1=${'0'.repeat(40)}` })],
  ];
  for (const [name, headers] of cases) {
    it(`is 401 Unauthorized for ${name}, and deploys nothing`, async () => {
      const res = await deliver(project.id, body, {
        'content-type': 'application/json',
        'x-github-event': 'push',
        'x-github-delivery': randomUUID(),
        ...(await headers()),
      });
      expectPlain(res, 401, 'Unauthorized');
      expect(await deploymentsOf(project.id)).toHaveLength(0);
    });
  }

  it('is 401 for a signature over different bytes (JSON re-serialised with other whitespace)', async () => {
    const pretty = JSON.stringify(JSON.parse(body), null, 2);
    expect(JSON.parse(pretty)).toEqual(JSON.parse(body));
    const res = await deliver(project.id, pretty, {
      'content-type': 'application/json',
      'x-github-event': 'push',
      'x-hub-signature-256': good,
    });
    expectPlain(res, 401, 'Unauthorized');
    expect(await deploymentsOf(project.id)).toHaveLength(0);
  });

  it('is 401 when the signed body had a trailing newline the delivered one lacks', async () => {
    const res = await deliver(project.id, body, {
      'content-type': 'application/json',
      'x-github-event': 'push',
      'x-hub-signature-256': await sign(project.secret, `${body}\n`),
    });
    expectPlain(res, 401, 'Unauthorized');
  });

  it('checks the signature before parsing: a wrong signature on a non-JSON body is 401, not 400', async () => {
    const res = await deliver(project.id, 'this is not json', {
      'content-type': 'application/json',
      'x-github-event': 'push',
      'x-hub-signature-256': await sign('not-the-secret-at-all', 'this is not json'),
    });
    expectPlain(res, 401, 'Unauthorized');
    const empty = await deliver(project.id, '', { 'content-type': 'application/json' });
    expectPlain(empty, 401, 'Unauthorized');
  });

  it('checks the signature before the event: an unsigned ping is 401', async () => {
    const res = await deliver(project.id, JSON.stringify(ping), {
      'content-type': 'application/json',
      'x-github-event': 'ping',
    });
    expectPlain(res, 401, 'Unauthorized');
  });
});

describe('Webhook: an unknown or malformed project id', () => {
  for (const [name, id] of [
    ['unknown uuid', randomUUID()],
    ['malformed id', 'not-a-uuid'],
    ['numeric id', '42'],
  ] as const) {
    it(`is 401 Unauthorized (${name}), revealing nothing`, async () => {
      const body = JSON.stringify(pushTo('main'));
      const res = await deliver(id, body, {
        'content-type': 'application/json',
        'x-github-event': 'push',
        'x-hub-signature-256': await sign('whatever-secret', body),
      });
      expectPlain(res, 401, 'Unauthorized');
    });
  }
});
