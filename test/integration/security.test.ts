// The coordinator's security rules, end to end over HTTP: the rate limit on /login and /register
// (spec "Limits"), roles, credentials checked before the body, same-origin checks on
// cookie-authenticated writes, logs free of secrets, Fastify's defaults answered in the API's
// own error shape (API.md "Conventions"), and one URL per resource (HTML or JSON by Accept).
import { createHmac, randomBytes, randomUUID } from 'node:crypto';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type App, buildApp } from '../../coordinator/src/app.ts';
import { loadConfig } from '../../coordinator/src/config.ts';
import { migrate, openDatabase } from '../../coordinator/src/db/orm.ts';
import { loggerOptions } from '../../coordinator/src/plugins/logger.ts';
import {
  Client,
  type HttpResponse,
  sampleProject,
  signUp,
  startCoordinator,
  type TestCoordinator,
} from '../helpers/coordinator.ts';
import { createTestDatabase } from '../helpers/database.ts';

const PASSWORD = 'correct horse battery staple';
const AUTH_REQUIRED = { success: false, error: 'Authentication required' };
const FORBIDDEN = { success: false, error: 'You do not have permission to do this' };
const CROSS_SITE = { success: false, error: 'Cross-site request refused' };
const ONE_MIB = 1024 * 1024;

/** One coordinator for the describe that calls this (beforeAll/afterAll), started with `env`. */
function coordinatorFor(env: Record<string, string> = {}) {
  const ref: { current: TestCoordinator } = { current: undefined as unknown as TestCoordinator };
  beforeAll(async () => {
    ref.current = await startCoordinator(env);
  });
  afterAll(async () => {
    await ref.current?.close();
  });
  return ref;
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- rows of ad-hoc SQL
async function sql(coord: TestCoordinator, query: string, params: unknown[] = []): Promise<any[]> {
  return coord.orm.em.fork().execute(query, params);
}

function uniqueEmail(prefix = 'user') {
  return `${prefix}-${randomBytes(4).toString('hex')}@example.com`;
}

function expectJsonError(res: HttpResponse, status: number, body?: { success: boolean; error: string }) {
  expect(res.status, res.text).toBe(status);
  expect(res.headers.get('content-type')).toMatch(/^application\/json/);
  if (body) {
    expect(res.json).toEqual(body);
  } else {
    expect(Object.keys(res.json).sort()).toEqual(['error', 'success']);
    expect(res.json.success).toBe(false);
    expect(typeof res.json.error).toBe('string');
  }
}

function expectRateLimited(res: HttpResponse) {
  expectJsonError(res, 429);
  expect(res.json.error).toMatch(/try again/i);
}

/** Creates a project as `admin` and returns it. */
async function createProject(admin: Client, overrides: Record<string, unknown> = {}) {
  const res = await admin.post('/projects', sampleProject(overrides));
  expect(res.status, res.text).toBe(201);
  return res.json as {
    project: { id: string; name: string };
    webhook: { url: string; secret: string };
  };
}

// ---------------------------------------------------------------------------------------------
// Rate limit: 40 requests per minute per client IP on /login and /register.

describe('rate limit: the 41st POST /login within a minute from one IP is 429', () => {
  const coord = coordinatorFor();

  it('40 answered 200/401, then 429 {success: false, error: "... try again ..."}', async () => {
    const account = await signUp(coord.current.url, uniqueEmail('rl'), PASSWORD); // not a /login request
    const statuses: number[] = [];
    for (let i = 0; i < 40; i++) {
      const password = i % 8 === 0 ? PASSWORD : 'wrong password';
      const res = await new Client(coord.current.url).post('/login', { email: account.email, password });
      statuses.push(res.status);
    }
    expect(statuses.filter((s) => s === 200)).toHaveLength(5);
    expect(statuses.filter((s) => s === 401)).toHaveLength(35);
    const limited = await new Client(coord.current.url).post('/login', {
      email: account.email,
      password: PASSWORD,
    });
    expectRateLimited(limited);
    expect(limited.headers.getSetCookie().some((c) => c.startsWith('connect.sid='))).toBe(false);
  });

  it('other routes are not limited', async () => {
    for (let i = 0; i < 5; i++) {
      expect((await new Client(coord.current.url).get('/me')).status).toBe(401);
    }
  });
});

describe('rate limit: POST /register is limited likewise', () => {
  const coord = coordinatorFor();

  it('40 answered (201 once, then 403 / 400), then 429', async () => {
    const statuses: number[] = [];
    for (let i = 0; i < 40; i++) {
      const email = i % 5 === 4 ? 'not-an-email' : uniqueEmail('reg');
      const res = await new Client(coord.current.url).post('/register', { email, password: PASSWORD });
      statuses.push(res.status);
    }
    expect(statuses[0]).toBe(201);
    expect(statuses.filter((s) => s === 429)).toEqual([]);
    expect(statuses.filter((s) => s === 403)).toHaveLength(31);
    expect(statuses.filter((s) => s === 400)).toHaveLength(8);
    expectRateLimited(
      await new Client(coord.current.url).post('/register', {
        email: uniqueEmail('reg'),
        password: PASSWORD,
      }),
    );
  });
});

describe('rate limit: a spoofed X-Forwarded-For does not escape it when TRUST_PROXY is unset', () => {
  const coord = coordinatorFor();

  it('a different X-Forwarded-For on every request still counts as one client', async () => {
    const login = (i: number) =>
      new Client(coord.current.url).post(
        '/login',
        { email: 'nobody@example.com', password: PASSWORD },
        { headers: { 'x-forwarded-for': `198.51.100.${i}`, 'x-real-ip': `198.51.100.${i}` } },
      );
    for (let i = 1; i <= 40; i++) {
      const res = await login(i);
      expect(res.status, `request ${i}`).toBe(401);
    }
    expectRateLimited(await login(41));
  });
});

describe('rate limit: with TRUST_PROXY=true, X-Forwarded-For decides the client IP', () => {
  const coord = coordinatorFor({ TRUST_PROXY: 'true' });
  const login = (ip: string) =>
    new Client(coord.current.url).post(
      '/login',
      { email: 'nobody@example.com', password: PASSWORD },
      { headers: { 'x-forwarded-for': ip } },
    );

  it('one forwarded address is limited after 40; another forwarded address is a fresh bucket', async () => {
    for (let i = 1; i <= 40; i++) {
      expect((await login('203.0.113.7')).status, `request ${i}`).toBe(401);
    }
    expectRateLimited(await login('203.0.113.7'));
    expect((await login('203.0.113.8')).status).toBe(401);
    expectRateLimited(await login('203.0.113.7'));
  });
});

describe('rate limit: LOGIN_RATE_LIMIT is a setting (LOGIN_RATE_LIMIT=5)', () => {
  const coord = coordinatorFor({ LOGIN_RATE_LIMIT: '5' });

  it('the 6th POST /login is 429', async () => {
    for (let i = 1; i <= 5; i++) {
      const res = await new Client(coord.current.url).post('/login', {
        email: 'nobody@example.com',
        password: PASSWORD,
      });
      expect(res.status, `request ${i}`).toBe(401);
    }
    expectRateLimited(
      await new Client(coord.current.url).post('/login', { email: 'nobody@example.com', password: PASSWORD }),
    );
  });

  it('and the 6th POST /register too', async () => {
    for (let i = 1; i <= 5; i++) {
      const res = await new Client(coord.current.url).post('/register', { email: 'bad', password: PASSWORD });
      expect(res.status, `request ${i}`).toBe(400);
    }
    expectRateLimited(
      await new Client(coord.current.url).post('/register', { email: 'bad', password: PASSWORD }),
    );
  });
});

// ---------------------------------------------------------------------------------------------
// Roles: viewer reads; deployer also triggers; admin also manages projects and agents.

describe('roles', () => {
  const coord = coordinatorFor({ REGISTRATION: 'open' });
  let admin: Client;
  let viewer: Client;
  let deployer: Client;
  let projectId: string;

  beforeAll(async () => {
    admin = (await signUp(coord.current.url, uniqueEmail('admin'), PASSWORD)).client;
    const v = await signUp(coord.current.url, uniqueEmail('viewer'), PASSWORD);
    expect(v.user.role).toBe('viewer');
    viewer = v.client;
    const d = await signUp(coord.current.url, uniqueEmail('deployer'), PASSWORD);
    await sql(coord.current, "update users set role = 'deployer' where email = ?", [d.email]);
    deployer = d.client;
    projectId = (await createProject(admin)).project.id;
  });

  it('GET /me reports each role (a promotion takes effect on the next request)', async () => {
    expect((await admin.get('/me')).json.user.role).toBe('admin');
    expect((await viewer.get('/me')).json.user.role).toBe('viewer');
    expect((await deployer.get('/me')).json.user.role).toBe('deployer');
  });

  it('a viewer reads but gets 403 on POST /deploy, POST /projects, POST /agents', async () => {
    expect((await viewer.get('/projects')).status).toBe(200);
    expect((await viewer.get(`/projects/${projectId}`)).status).toBe(200);
    expectJsonError(await viewer.post('/deploy', { projectId }), 403, FORBIDDEN);
    expectJsonError(await viewer.post('/projects', sampleProject()), 403, FORBIDDEN);
    expectJsonError(await viewer.post('/agents', { name: 'viewer-agent' }), 403, FORBIDDEN);
    const rows = await sql(coord.current, 'select count(*)::int as n from agents');
    expect(rows[0].n).toBe(0);
  });

  it('a deployer can POST /deploy (200) but not POST /projects, POST /agents, PATCH/DELETE a project', async () => {
    const res = await deployer.post('/deploy', { projectId });
    expect(res.status, res.text).toBe(200);
    expect(res.json.success).toBe(true);
    expectJsonError(await deployer.post('/projects', sampleProject()), 403, FORBIDDEN);
    expectJsonError(await deployer.post('/agents', { name: 'deployer-agent' }), 403, FORBIDDEN);
    expectJsonError(
      await deployer.request('PATCH', `/projects/${projectId}`, { json: { branch_name: 'dev' } }),
      403,
      FORBIDDEN,
    );
    expectJsonError(await deployer.request('DELETE', `/projects/${projectId}`), 403, FORBIDDEN);
    expectJsonError(await deployer.get(`/projects/${projectId}/webhook`), 403, FORBIDDEN);
  });

  it('an admin can do all of it', async () => {
    const created = await admin.post('/projects', sampleProject());
    expect(created.status, created.text).toBe(201);
    const agent = await admin.post('/agents', { name: 'admin-agent', labels: ['web'] });
    expect(agent.status, agent.text).toBe(201);
    const deployed = await admin.post('/deploy', { projectId: created.json.project.id });
    expect(deployed.status, deployed.text).toBe(200);
    const patched = await admin.request('PATCH', `/projects/${created.json.project.id}`, {
      json: { branch_name: 'dev' },
    });
    expect(patched.status, patched.text).toBe(200);
    expect((await admin.get(`/projects/${created.json.project.id}/webhook`)).status).toBe(200);
    expect((await admin.request('DELETE', `/agents/${agent.json.agent.id}`)).status).toBe(200);
  });

  it('a demotion takes effect on the next request', async () => {
    const d = await signUp(coord.current.url, uniqueEmail('demoted'), PASSWORD);
    await sql(coord.current, "update users set role = 'deployer' where email = ?", [d.email]);
    expect((await d.client.post('/deploy', { projectId })).status).toBe(200);
    await sql(coord.current, "update users set role = 'viewer' where email = ?", [d.email]);
    expectJsonError(await d.client.post('/deploy', { projectId }), 403, FORBIDDEN);
  });

  it('every route answers 401 "Authentication required" without a session', async () => {
    const agent = await admin.post('/agents', { name: 'some-agent' });
    expect(agent.status, agent.text).toBe(201);
    const agentId = agent.json.agent.id as string;
    const deployId = (await admin.post('/deploy', { projectId })).json.deployId as string;
    const anonymous = new Client(coord.current.url);
    const routes: [string, string, unknown?][] = [
      ['GET', '/me'],
      ['GET', '/projects'],
      ['GET', `/projects/${projectId}`],
      ['POST', '/projects', sampleProject()],
      ['PATCH', `/projects/${projectId}`, { branch_name: 'dev' }],
      ['DELETE', `/projects/${projectId}`],
      ['GET', `/projects/${projectId}/webhook`],
      ['POST', `/projects/${projectId}/webhook/rotate`, {}],
      ['GET', '/agents'],
      ['POST', '/agents', { name: 'anon-agent' }],
      ['DELETE', `/agents/${agentId}`],
      ['GET', '/deployments'],
      ['POST', '/deploy', { projectId }],
      ['GET', `/deploy/${deployId}`],
      ['GET', `/deploy/${randomUUID()}`],
      ['POST', '/email/test', {}],
    ];
    for (const [method, path, json] of routes) {
      const res = await anonymous.request(method, path, json === undefined ? {} : { json });
      expect(res.status, `${method} ${path}: ${res.text}`).toBe(401);
      expect(res.json, `${method} ${path}`).toEqual(AUTH_REQUIRED);
    }
    // Nothing changed behind the refusals.
    expect((await admin.get(`/projects/${projectId}`)).json.project.branch_name).toBe('main');
    expect((await admin.get('/agents')).json.agents.map((a: { id: string }) => a.id)).toContain(agentId);
  });
});

// ---------------------------------------------------------------------------------------------
// Credentials are checked before the body: no session is 401 whatever the body holds.

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

// ---------------------------------------------------------------------------------------------
// CSRF: cookie-authenticated writes must come from the coordinator's own origin.

describe('CSRF: cookie-authenticated writes from another site are refused', () => {
  const coord = coordinatorFor();
  let admin: Client;
  let projectId: string;

  beforeAll(async () => {
    admin = (await signUp(coord.current.url, uniqueEmail('csrf'), PASSWORD)).client;
    projectId = (await createProject(admin)).project.id;
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
    expectJsonError(res, 404, { success: false, error: 'Project not found' });
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

// ---------------------------------------------------------------------------------------------
// Logs never carry secrets, even at trace level.

describe('logs never contain secrets', () => {
  const lines: string[] = [];
  let app: App;
  let url: string;
  let close: () => Promise<void>;

  beforeAll(async () => {
    const db = await createTestDatabase();
    const rootSecret = randomBytes(32).toString('base64url');
    const config = loadConfig({
      HOST: '127.0.0.1',
      PORT: '0',
      LOG_LEVEL: 'trace',
      DATABASE_URL: db.url,
      DECKHAND_SECRET: rootSecret,
    });
    const orm = await openDatabase({ url: db.url, poolMax: 5 });
    await migrate(orm);
    const logger = pino(
      { ...loggerOptions('trace'), level: 'trace' },
      { write: (line: string) => lines.push(line) },
    );
    app = await buildApp({ config, orm, rootSecret, logger });
    await app.listen({ host: '127.0.0.1', port: 0 });
    const address = app.server.address();
    url = `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`;
    close = async () => {
      await app.close();
      await orm.close();
      await db.drop();
    };
  });

  afterAll(async () => {
    await close?.();
  });

  it('register, login, a project with secrets, a signed webhook: none of the secrets is logged', async () => {
    const password = `pw-${randomBytes(12).toString('hex')}`;
    const wrongPassword = `wrong-${randomBytes(12).toString('hex')}`;
    const projectSecret = `sk-live-${randomBytes(12).toString('hex')}`;
    const webhookSecret = `whsec-${randomBytes(16).toString('hex')}`;
    const email = uniqueEmail('logs');

    const admin = new Client(url);
    const reg = await admin.post('/register', { email, password });
    expect(reg.status, reg.text).toBe(201);
    const registerCookie = admin.cookie!;
    expect((await new Client(url).post('/login', { email, password: wrongPassword })).status).toBe(401);
    const login = await admin.post('/login', { email, password });
    expect(login.status, login.text).toBe(200);
    const loginCookie = admin.cookie!;

    const created = await admin.post(
      '/projects',
      sampleProject({ secrets: { API_KEY: projectSecret }, webhook_secret: webhookSecret }),
    );
    expect(created.status, created.text).toBe(201);
    expect(created.json.webhook.secret).toBe(webhookSecret);
    const projectId = created.json.project.id as string;
    // A request that fails validation with a secret in the body is logged as refused, not echoed.
    const invalid = await admin.post('/projects', {
      ...sampleProject({ secrets: { API_KEY: projectSecret }, webhook_secret: webhookSecret }),
      name: '',
    });
    expect(invalid.status).toBe(400);
    expect((await admin.get(`/projects/${projectId}/webhook`)).json.webhook.secret).toBe(webhookSecret);

    const body = Buffer.from(
      JSON.stringify({
        ref: 'refs/heads/main',
        after: randomBytes(20).toString('hex'),
        repository: { full_name: 'acme/web' },
      }),
    );
    const signature = `sha256=${createHmac('sha256', webhookSecret).update(body).digest('hex')}`;
    const hook = await fetch(`${url}/webhook/${projectId}`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        'x-github-event': 'push',
        'x-github-delivery': randomUUID(),
        'x-hub-signature-256': signature,
      },
      body,
    });
    expect(hook.status).toBe(200);
    expect(await hook.text()).toBe('Deployment triggered');
    const badSignature = `sha256=${createHmac('sha256', 'not-the-secret').update(body).digest('hex')}`;
    const refused = await fetch(`${url}/webhook/${projectId}`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        'x-github-event': 'push',
        'x-hub-signature-256': badSignature,
      },
      body,
    });
    expect(refused.status).toBe(401);

    const rotated = await admin.post(`/projects/${projectId}/webhook/rotate`, {});
    expect(rotated.status, rotated.text).toBe(200);
    const rotatedSecret = rotated.json.webhook.secret as string;
    expect((await admin.post('/logout')).status).toBe(200);

    const log = lines.join('');
    // The capture works: requests, refusals and the webhook decision are all there.
    expect(log).toContain('incoming request');
    expect(log).toContain('request refused');
    expect(log).toContain('webhook delivery');
    expect(log).toContain(projectId);

    const cookieValue = (cookie: string) => cookie.slice('connect.sid='.length);
    const secrets = {
      password,
      wrongPassword,
      registerCookie: cookieValue(registerCookie),
      loginCookie: cookieValue(loginCookie),
      decodedLoginCookie: decodeURIComponent(cookieValue(loginCookie)),
      projectSecret,
      webhookSecret,
      rotatedSecret,
      signature,
      signatureHex: signature.slice('sha256='.length),
      badSignatureHex: badSignature.slice('sha256='.length),
    };
    for (const [name, value] of Object.entries(secrets)) {
      expect(log.includes(value), `${name} appears in the log`).toBe(false);
    }
  });
});

// ---------------------------------------------------------------------------------------------
// Fastify's defaults answered in the API's shape.

describe("Fastify's defaults don't leak", () => {
  const coord = coordinatorFor();
  let admin: Client;

  beforeAll(async () => {
    admin = (await signUp(coord.current.url, uniqueEmail('defaults'), PASSWORD)).client;
  });

  it('an unknown route: 404 {success: false, error}', async () => {
    const res = await new Client(coord.current.url).get('/no/such/route?token=abc');
    expectJsonError(res, 404, { success: false, error: 'No route for GET /no/such/route' });
    const post = await admin.post('/no-such-route', {});
    expectJsonError(post, 404, { success: false, error: 'No route for POST /no-such-route' });
  });

  it('POST /deploy with text/plain and a session: 415 JSON', async () => {
    const res = await admin.request('POST', '/deploy', {
      body: JSON.stringify({ projectId: randomUUID() }),
      headers: { 'content-type': 'text/plain' },
    });
    expectJsonError(res, 415, { success: false, error: 'Unsupported content type: send application/json' });
  });

  it('POST /deploy with a body over 1 MiB and a session: 413 JSON', async () => {
    const res = await admin.request('POST', '/deploy', {
      body: JSON.stringify({ projectId: randomUUID(), pad: 'x'.repeat(ONE_MIB + 1024) }),
      headers: { 'content-type': 'application/json' },
    });
    expectJsonError(res, 413, { success: false, error: 'Request body is too large' });
  });

  it('POST /deploy with malformed JSON and a session: 400 JSON', async () => {
    const res = await admin.request('POST', '/deploy', {
      body: '{"projectId": ',
      headers: { 'content-type': 'application/json' },
    });
    expectJsonError(res, 400, { success: false, error: 'Request body is not valid JSON' });
  });

  it('POST /email/test with an empty application/json body is {} (400 "SMTP not configured" here)', async () => {
    const res = await admin.request('POST', '/email/test', {
      body: '',
      headers: { 'content-type': 'application/json' },
    });
    expectJsonError(res, 400, { success: false, error: 'SMTP not configured' });
    const noType = await admin.request('POST', '/email/test');
    expectJsonError(noType, 400, { success: false, error: 'SMTP not configured' });
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

// ---------------------------------------------------------------------------------------------
// One URL per resource: HTML for browsers, JSON otherwise.

describe('content negotiation on GET /deploy/:id', () => {
  const coord = coordinatorFor();
  let admin: Client;
  let project: { id: string; name: string };
  let deployId: string;
  const BROWSER_ACCEPT = 'text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8';

  beforeAll(async () => {
    admin = (await signUp(coord.current.url, uniqueEmail('neg'), PASSWORD)).client;
    project = (await createProject(admin)).project;
    const res = await admin.post('/deploy', { projectId: project.id });
    expect(res.status, res.text).toBe(200);
    deployId = res.json.deployId;
  });

  it('Accept: text/html → the HTML page naming the project, with Vary: Accept', async () => {
    const res = await admin.get(`/deploy/${deployId}`, { headers: { accept: BROWSER_ACCEPT } });
    expect(res.status, res.text).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/html/);
    expect(res.text).toContain(project.name);
    expect(res.text).toMatch(/<html/i);
    expect(res.headers.get('vary') ?? '').toMatch(/\baccept\b/i);
  });

  it('Accept: application/json → JSON, with Vary: Accept', async () => {
    const res = await admin.get(`/deploy/${deployId}`, { headers: { accept: 'application/json' } });
    expect(res.status, res.text).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^application\/json/);
    expect(res.json.success).toBe(true);
    expect(res.json.deployment.id).toBe(deployId);
    expect(res.json.project).toEqual({
      id: project.id,
      name: project.name,
      forge_url: 'https://github.com/acme/web.git',
      branch_name: 'main',
    });
    expect(res.headers.get('vary') ?? '').toMatch(/\baccept\b/i);
  });

  it('no Accept header → JSON', async () => {
    const res = await admin.get(`/deploy/${deployId}`);
    expect(res.status, res.text).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^application\/json/);
    expect(res.json.deployment.id).toBe(deployId);
  });

  it('Accept: */* (curl) → JSON', async () => {
    const res = await admin.get(`/deploy/${deployId}`, { headers: { accept: '*/*' } });
    expect(res.headers.get('content-type')).toMatch(/^application\/json/);
  });

  it('a browser GET without a session → 302 to /login?next=<the page>', async () => {
    const res = await new Client(coord.current.url).get(`/deploy/${deployId}`, {
      headers: { accept: BROWSER_ACCEPT },
    });
    expect(res.status).toBe(302);
    expect(res.headers.get('location')).toBe(`/login?next=${encodeURIComponent(`/deploy/${deployId}`)}`);
  });

  it('a JSON GET without a session → 401 "Authentication required"', async () => {
    const res = await new Client(coord.current.url).get(`/deploy/${deployId}`, {
      headers: { accept: 'application/json' },
    });
    expectJsonError(res, 401, AUTH_REQUIRED);
  });
});

// ---------------------------------------------------------------------------------------------
// The sign-in page the redirect above leads to: `next` only ever sends the user back into the
// coordinator, and it can never inject markup or script into the page.

describe('the sign-in page after the redirect: /login?next=...', () => {
  const coord = coordinatorFor();

  /** Where the page's script sends the browser after signing in, resolved as a browser would. */
  async function redirectTarget(page: 'login' | 'register', next: string): Promise<URL> {
    const res = await fetch(`${coord.current.url}/${page}?next=${encodeURIComponent(next)}`, {
      headers: { accept: 'text/html' },
    });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/html/);
    const html = await res.text();
    // The form carries the target in an (HTML-escaped) data attribute the script navigates to.
    const match = /data-next="([^"]*)"/.exec(html);
    expect(match, 'the sign-in form names where to go after signing in').not.toBeNull();
    const unescaped = match![1]!
      .replace(/&lt;/g, '<')
      .replace(/&gt;/g, '>')
      .replace(/&quot;/g, '"')
      .replace(/&#39;/g, "'")
      .replace(/&amp;/g, '&');
    return new URL(unescaped, coord.current.url);
  }

  it('a path on the coordinator is kept', async () => {
    const target = await redirectTarget('login', '/deploy/abc?x=1');
    expect(target.href).toBe(`${coord.current.url}/deploy/abc?x=1`);
  });

  for (const next of [
    'https://evil.example/',
    '//evil.example/',
    '/\\evil.example/',
    '/\t/evil.example/',
    '/\n/evil.example/',
    '\\\\evil.example/',
  ]) {
    it(`next=${JSON.stringify(next)} cannot send the user to another origin`, async () => {
      for (const page of ['login', 'register'] as const) {
        const target = await redirectTarget(page, next);
        expect(target.origin, `${page}: ${target.href}`).toBe(new URL(coord.current.url).origin);
      }
    });
  }

  it('next cannot break out of the script: no markup from the query string reaches the page', async () => {
    const payload = '/</script><script>window.pwned=1</script>';
    const scriptEnds = (html: string) => html.match(/<\/script/gi)?.length ?? 0;
    for (const page of ['login', 'register'] as const) {
      const plain = await (await fetch(`${coord.current.url}/${page}?next=%2F`)).text();
      const res = await fetch(`${coord.current.url}/${page}?next=${encodeURIComponent(payload)}`, {
        headers: { accept: 'text/html' },
      });
      expect(res.status).toBe(200);
      const html = await res.text();
      expect(html, page).not.toContain('<script>window.pwned=1</script>');
      // The page's own script tags only, whatever next held.
      expect(scriptEnds(html), page).toBe(scriptEnds(plain));
    }
  });

  it('next cannot open an HTML comment or a nested script either', async () => {
    const res = await fetch(`${coord.current.url}/login?next=${encodeURIComponent('/<!--<script>')}`, {
      headers: { accept: 'text/html' },
    });
    const html = await res.text();
    expect(html).not.toContain('<!--<script>');
  });
});
