// Requests the API refuses before reaching a route: credentials are checked before the body (no
// session is 401 whatever the body holds), and Fastify's defaults (unknown route, content type,
// size, malformed JSON, HEAD/OPTIONS) are answered in the API's own error shape (API.md "Conventions").
import { randomUUID } from 'node:crypto';
import { beforeAll, describe, expect, it } from 'vitest';
import { Client, coordinatorFor, signUp, uniqueEmail } from '../helpers/coordinator.ts';
import { expectJsonError } from '../helpers/responses.ts';

const PASSWORD = 'correct horse battery staple';
const AUTH_REQUIRED = 'Authentication required';
const ONE_MIB = 1024 * 1024;

describe('credentials before body', () => {
  const coord = coordinatorFor();
  const anonymous = () => new Client(coord.current.url);

  it('POST /deploy with malformed JSON and no session: 401', async () => {
    const res = await anonymous().request('POST', '/deploy', {
      body: '{"projectId": ',
      headers: { 'content-type': 'application/json' },
    });
    expectJsonError(res, 401, AUTH_REQUIRED);
  });

  it('POST /deploy with a wrong content type and no session: 401', async () => {
    const res = await anonymous().request('POST', '/deploy', {
      body: 'projectId=abc',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
    });
    expectJsonError(res, 401, AUTH_REQUIRED);
    const plain = await anonymous().request('POST', '/deploy', {
      body: 'hello',
      headers: { 'content-type': 'text/plain' },
    });
    expectJsonError(plain, 401, AUTH_REQUIRED);
  });

  it('POST /deploy with a body over 1 MiB and no session: 401', async () => {
    const big = JSON.stringify({ projectId: randomUUID(), pad: 'x'.repeat(ONE_MIB + 1024) });
    const res = await anonymous().request('POST', '/deploy', {
      body: big,
      headers: { 'content-type': 'application/json' },
    });
    expectJsonError(res, 401, AUTH_REQUIRED);
  });

  it('POST /deploy with an invalid body and no session: 401', async () => {
    expectJsonError(await anonymous().post('/deploy', { projectId: 'nope' }), 401, AUTH_REQUIRED);
    expectJsonError(await anonymous().post('/deploy', {}), 401, AUTH_REQUIRED);
  });
});

describe("Fastify's defaults don't leak", () => {
  const coord = coordinatorFor();
  let admin: Client;

  beforeAll(async () => {
    admin = (await signUp(coord.current.url, uniqueEmail('defaults'), PASSWORD)).client;
  });

  it('an unknown route: 404 {success: false, error}', async () => {
    const res = await new Client(coord.current.url).get('/no/such/route?token=abc');
    expectJsonError(res, 404, 'No route for GET /no/such/route');
    const post = await admin.post('/no-such-route', {});
    expectJsonError(post, 404, 'No route for POST /no-such-route');
  });

  it('POST /deploy with text/plain and a session: 415 JSON', async () => {
    const res = await admin.request('POST', '/deploy', {
      body: JSON.stringify({ projectId: randomUUID() }),
      headers: { 'content-type': 'text/plain' },
    });
    expectJsonError(res, 415, 'Unsupported content type: send application/json');
  });

  it('POST /deploy with a body over 1 MiB and a session: 413 JSON', async () => {
    const res = await admin.request('POST', '/deploy', {
      body: JSON.stringify({ projectId: randomUUID(), pad: 'x'.repeat(ONE_MIB + 1024) }),
      headers: { 'content-type': 'application/json' },
    });
    expectJsonError(res, 413, 'Request body is too large');
  });

  it('POST /deploy with malformed JSON and a session: 400 JSON', async () => {
    const res = await admin.request('POST', '/deploy', {
      body: '{"projectId": ',
      headers: { 'content-type': 'application/json' },
    });
    expectJsonError(res, 400, 'Request body is not valid JSON');
  });

  it('POST /email/test with an empty application/json body is {} (400 "SMTP not configured" here)', async () => {
    const res = await admin.request('POST', '/email/test', {
      body: '',
      headers: { 'content-type': 'application/json' },
    });
    expectJsonError(res, 400, 'SMTP not configured');
    const noType = await admin.request('POST', '/email/test');
    expectJsonError(noType, 400, 'SMTP not configured');
  });

  it('HEAD and OPTIONS do not crash the coordinator', async () => {
    const head = await fetch(`${coord.current.url}/me`, {
      method: 'HEAD',
      headers: { cookie: admin.cookie! },
    });
    expect(head.status).toBe(200);
    const anonHead = await fetch(`${coord.current.url}/projects`, { method: 'HEAD' });
    expect(anonHead.status).toBe(401);
    for (const path of ['/deploy', '/me', '/projects', '/no-such-route']) {
      const res = await fetch(`${coord.current.url}${path}`, {
        method: 'OPTIONS',
        headers: {
          cookie: admin.cookie!,
          origin: 'https://evil.example',
          'access-control-request-method': 'POST',
        },
      });
      expect(res.status, `OPTIONS ${path}`).toBeLessThan(500);
      expect(res.headers.get('access-control-allow-origin'), `OPTIONS ${path}`).toBeNull();
      await res.arrayBuffer();
    }
    expect((await admin.get('/me')).status).toBe(200);
  });
});
