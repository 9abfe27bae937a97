// Accounts (API.md "Accounts"): register, login, logout, me — and the sessions behind the
// `connect.sid` cookie, which live server-side so that logging out ends them for good. Each
// describe runs against its own real coordinator over HTTP on a fresh database.
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  Client,
  type HttpResponse,
  sampleProject,
  signUp,
  startCoordinator,
  type TestCoordinator,
} from '../helpers/coordinator.ts';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const PASSWORD = 'correct horse battery staple';

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

function sessionCookieHeader(res: HttpResponse): string | undefined {
  return res.headers.getSetCookie().find((c) => c.startsWith('connect.sid='));
}

/** The attributes of a Set-Cookie header, lower-cased names → values ('' for flags). */
function cookieAttributes(setCookie: string): Map<string, string> {
  const attrs = new Map<string, string>();
  for (const part of setCookie.split(';').slice(1)) {
    const [name, ...value] = part.trim().split('=');
    attrs.set(name!.toLowerCase(), value.join('='));
  }
  return attrs;
}

function expectError(res: HttpResponse, status: number, error?: string) {
  expect(res.status, res.text).toBe(status);
  expect(res.headers.get('content-type')).toMatch(/^application\/json/);
  if (error !== undefined) {
    expect(res.json).toEqual({ success: false, error });
  } else {
    expect(Object.keys(res.json).sort()).toEqual(['error', 'success']);
    expect(res.json.success).toBe(false);
    expect(typeof res.json.error).toBe('string');
    expect(res.json.error.length).toBeGreaterThan(0);
  }
}

function uniqueEmail(prefix = 'user') {
  return `${prefix}-${randomBytes(4).toString('hex')}@example.com`;
}

describe('POST /register: the first account becomes admin and is signed in', () => {
  const coord = coordinatorFor();
  let first: HttpResponse;
  let client: Client;

  beforeAll(async () => {
    client = new Client(coord.current.url);
    first = await client.post('/register', { email: 'Admin@Example.COM', password: PASSWORD });
  });

  it('answers 201 {success: true, user: {id, email, role: "admin"}}', () => {
    expect(first.status, first.text).toBe(201);
    expect(first.headers.get('content-type')).toMatch(/^application\/json/);
    expect(first.json).toEqual({
      success: true,
      user: { id: expect.stringMatching(UUID), email: 'admin@example.com', role: 'admin' },
    });
  });

  it('stores the email lower-cased', async () => {
    const rows = await sql(coord.current, 'select email, role from users');
    expect(rows).toEqual([{ email: 'admin@example.com', role: 'admin' }]);
  });

  it('sets a connect.sid cookie that is HttpOnly, SameSite=Lax, Path=/ and not Secure over plain http', () => {
    const setCookie = sessionCookieHeader(first);
    expect(setCookie).toBeDefined();
    expect(setCookie!.split(';')[0]).toMatch(/^connect\.sid=[^;\s]{20,}$/);
    const attrs = cookieAttributes(setCookie!);
    expect(attrs.has('httponly')).toBe(true);
    expect(attrs.get('samesite')?.toLowerCase()).toBe('lax');
    expect(attrs.get('path')).toBe('/');
    expect(attrs.has('secure')).toBe(false);
  });

  it('the cookie signs the new admin in: GET /me answers the same user', async () => {
    const me = await client.get('/me');
    expect(me.status, me.text).toBe(200);
    expect(me.json).toEqual({ success: true, user: first.json.user });
  });

  it('a second registration is refused: 403 "Registration is closed"', async () => {
    const res = await new Client(coord.current.url).post('/register', {
      email: uniqueEmail(),
      password: PASSWORD,
    });
    expectError(res, 403, 'Registration is closed');
    expect(sessionCookieHeader(res)).toBeUndefined();
    const rows = await sql(coord.current, 'select count(*)::int as n from users');
    expect(rows[0].n).toBe(1);
  });

  it('the same email in another case is not a second admin either', async () => {
    const res = await new Client(coord.current.url).post('/register', {
      email: 'ADMIN@example.com',
      password: PASSWORD,
    });
    expect(res.status).toBe(403);
    expect(res.json.success).toBe(false);
  });
});

describe('POST /register: invalid input is 400 {success: false, error}', () => {
  const coord = coordinatorFor();
  const post = (body: unknown, headers: Record<string, string> = {}) =>
    new Client(coord.current.url).request('POST', '/register', {
      body: typeof body === 'string' ? body : JSON.stringify(body),
      headers: { 'content-type': 'application/json', ...headers },
    });

  it('an invalid email', async () => {
    const res = await post({ email: 'not-an-email', password: PASSWORD });
    expectError(res, 400);
    expect(res.json.error).toMatch(/email/);
  });

  it('a password shorter than 8 characters', async () => {
    const res = await post({ email: uniqueEmail(), password: 'short' });
    expectError(res, 400);
    expect(res.json.error).toMatch(/password/);
  });

  it('a missing email', async () => {
    const res = await post({ password: PASSWORD });
    expectError(res, 400, 'email is required');
  });

  it('a missing password', async () => {
    const res = await post({ email: uniqueEmail() });
    expectError(res, 400, 'password is required');
  });

  it('an empty body (treated as {})', async () => {
    const res = await post('');
    expectError(res, 400, 'email is required');
  });

  it('malformed JSON', async () => {
    const res = await post('{"email": "a@example.com", "password": ');
    expectError(res, 400, 'Request body is not valid JSON');
  });

  it('a field of the wrong type', async () => {
    const res = await post({ email: uniqueEmail(), password: { value: PASSWORD } });
    expectError(res, 400);
  });

  it('none of them created an account or a session', async () => {
    const users = await sql(coord.current, 'select count(*)::int as n from users');
    const sessions = await sql(coord.current, 'select count(*)::int as n from sessions');
    expect(users[0].n).toBe(0);
    expect(sessions[0].n).toBe(0);
  });
});

describe('POST /register with REGISTRATION=open: later accounts are viewers', () => {
  const coord = coordinatorFor({ REGISTRATION: 'open' });

  it('the first is admin, the second 201 with role viewer', async () => {
    const a = await new Client(coord.current.url).post('/register', {
      email: uniqueEmail(),
      password: PASSWORD,
    });
    expect(a.status, a.text).toBe(201);
    expect(a.json.user.role).toBe('admin');
    const email = uniqueEmail('second');
    const b = await new Client(coord.current.url).post('/register', { email, password: PASSWORD });
    expect(b.status, b.text).toBe(201);
    expect(b.json).toEqual({
      success: true,
      user: { id: expect.stringMatching(UUID), email, role: 'viewer' },
    });
    expect(b.json.user.id).not.toBe(a.json.user.id);
    expect(sessionCookieHeader(b)).toBeDefined();
  });

  it('an email already registered (in any case) is refused with 400', async () => {
    const email = uniqueEmail('dup');
    const a = await new Client(coord.current.url).post('/register', { email, password: PASSWORD });
    expect(a.status).toBe(201);
    const b = await new Client(coord.current.url).post('/register', {
      email: email.toUpperCase(),
      password: PASSWORD,
    });
    expectError(b, 400);
    const rows = await sql(coord.current, 'select count(*)::int as n from users where email = ?', [email]);
    expect(rows[0].n).toBe(1);
  });
});

describe('POST /register behind a TLS-terminating proxy (TRUST_PROXY=true)', () => {
  const coord = coordinatorFor({ TRUST_PROXY: 'true', REGISTRATION: 'open' });

  it('the cookie is Secure when X-Forwarded-Proto is https', async () => {
    const res = await new Client(coord.current.url).post(
      '/register',
      { email: uniqueEmail(), password: PASSWORD },
      { headers: { 'x-forwarded-proto': 'https' } },
    );
    expect(res.status, res.text).toBe(201);
    const attrs = cookieAttributes(sessionCookieHeader(res)!);
    expect(attrs.has('secure')).toBe(true);
    expect(attrs.has('httponly')).toBe(true);
    expect(attrs.get('samesite')?.toLowerCase()).toBe('lax');
  });

  it('and not Secure when the proxy says http', async () => {
    const res = await new Client(coord.current.url).post(
      '/register',
      { email: uniqueEmail(), password: PASSWORD },
      { headers: { 'x-forwarded-proto': 'http' } },
    );
    expect(res.status, res.text).toBe(201);
    expect(cookieAttributes(sessionCookieHeader(res)!).has('secure')).toBe(false);
  });
});

describe('POST /register without TRUST_PROXY ignores X-Forwarded-Proto', () => {
  const coord = coordinatorFor();

  it('the cookie is not Secure: a client cannot claim https', async () => {
    const res = await new Client(coord.current.url).post(
      '/register',
      { email: uniqueEmail(), password: PASSWORD },
      { headers: { 'x-forwarded-proto': 'https' } },
    );
    expect(res.status, res.text).toBe(201);
    expect(cookieAttributes(sessionCookieHeader(res)!).has('secure')).toBe(false);
  });
});

describe('POST /register: the first account needs the setup token when listening beyond loopback', () => {
  const SETUP_TOKEN = 'setup-token-0123456789abcdef';
  const coord = coordinatorFor({ HOST: '0.0.0.0', SETUP_TOKEN });
  const register = (extra: Record<string, unknown>) =>
    new Client(coord.current.url).post('/register', { email: uniqueEmail(), password: PASSWORD, ...extra });

  it('without setup_token: 403, no account', async () => {
    const res = await register({});
    expectError(res, 403);
    expect(res.json.error).toMatch(/^Registration is closed/);
    expect(sessionCookieHeader(res)).toBeUndefined();
  });

  it('with a wrong setup_token: 403', async () => {
    const res = await register({ setup_token: 'wrong-token-0123456789abcdef' });
    expectError(res, 403);
    expect(res.json.error).toMatch(/^Registration is closed/);
  });

  it('with a prefix of the right token: 403', async () => {
    const res = await register({ setup_token: SETUP_TOKEN.slice(0, -1) });
    expectError(res, 403);
  });

  it('the refused attempts created nothing', async () => {
    const rows = await sql(coord.current, 'select count(*)::int as n from users');
    expect(rows[0].n).toBe(0);
  });

  it('with the right setup_token (SETUP_TOKEN): 201 admin', async () => {
    const res = await register({ setup_token: SETUP_TOKEN });
    expect(res.status, res.text).toBe(201);
    expect(res.json.user.role).toBe('admin');
    expect(sessionCookieHeader(res)).toBeDefined();
  });

  it('after the first account, the token opens nothing: 403 "Registration is closed"', async () => {
    const res = await register({ setup_token: SETUP_TOKEN });
    expectError(res, 403, 'Registration is closed');
  });
});

describe('POST /register: concurrent first registrations make exactly one admin (closed registration)', () => {
  const coord = coordinatorFor();

  it('one 201 admin, every other 403', async () => {
    const results = await Promise.all(
      Array.from({ length: 6 }, (_, i) =>
        new Client(coord.current.url).post('/register', {
          email: uniqueEmail(`race${i}`),
          password: PASSWORD,
        }),
      ),
    );
    const statuses = results.map((r) => r.status).sort();
    expect(statuses).toEqual([201, 403, 403, 403, 403, 403]);
    expect(results.find((r) => r.status === 201)!.json.user.role).toBe('admin');
    const rows = await sql(coord.current, 'select role from users');
    expect(rows).toEqual([{ role: 'admin' }]);
  });
});

describe('POST /register: concurrent first registrations make exactly one admin (open registration)', () => {
  const coord = coordinatorFor({ REGISTRATION: 'open' });

  it('all 201, exactly one admin, the rest viewers', async () => {
    const results = await Promise.all(
      Array.from({ length: 6 }, (_, i) =>
        new Client(coord.current.url).post('/register', {
          email: uniqueEmail(`race${i}`),
          password: PASSWORD,
        }),
      ),
    );
    expect(results.map((r) => r.status)).toEqual([201, 201, 201, 201, 201, 201]);
    const roles = results.map((r) => r.json.user.role).sort();
    expect(roles).toEqual(['admin', 'viewer', 'viewer', 'viewer', 'viewer', 'viewer']);
    const rows = await sql(coord.current, "select count(*)::int as n from users where role = 'admin'");
    expect(rows[0].n).toBe(1);
  });
});

describe('POST /login and GET /me', () => {
  const coord = coordinatorFor();
  let account: Awaited<ReturnType<typeof signUp>>;

  beforeAll(async () => {
    account = await signUp(coord.current.url, uniqueEmail('login'), PASSWORD);
  });

  it('the right credentials: 200 {success: true, user} and a session cookie', async () => {
    const client = new Client(coord.current.url);
    const res = await client.post('/login', { email: account.email, password: PASSWORD });
    expect(res.status, res.text).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^application\/json/);
    expect(res.json).toEqual({
      success: true,
      user: { id: account.user.id, email: account.email, role: 'admin' },
    });
    const setCookie = sessionCookieHeader(res);
    expect(setCookie).toBeDefined();
    const attrs = cookieAttributes(setCookie!);
    expect(attrs.has('httponly')).toBe(true);
    expect(attrs.get('samesite')?.toLowerCase()).toBe('lax');
    expect(attrs.get('path')).toBe('/');
  });

  it('the email is matched whatever its case', async () => {
    const res = await new Client(coord.current.url).post('/login', {
      email: account.email.toUpperCase(),
      password: PASSWORD,
    });
    expect(res.status, res.text).toBe(200);
    expect(res.json.user.id).toBe(account.user.id);
  });

  it('a wrong password and an unknown email get the same 401 "Invalid email or password"', async () => {
    const wrong = await new Client(coord.current.url).post('/login', {
      email: account.email,
      password: 'not the password',
    });
    const unknown = await new Client(coord.current.url).post('/login', {
      email: uniqueEmail('nobody'),
      password: PASSWORD,
    });
    expectError(wrong, 401, 'Invalid email or password');
    expectError(unknown, 401, 'Invalid email or password');
    expect(wrong.text).toBe(unknown.text);
    expect(sessionCookieHeader(wrong)).toBeUndefined();
    expect(sessionCookieHeader(unknown)).toBeUndefined();
  });

  it('GET /me with the cookie: 200 {success: true, user}', async () => {
    const client = new Client(coord.current.url);
    await client.post('/login', { email: account.email, password: PASSWORD });
    const me = await client.get('/me');
    expect(me.status, me.text).toBe(200);
    expect(me.json).toEqual({
      success: true,
      user: { id: account.user.id, email: account.email, role: 'admin' },
    });
  });

  it('GET /me without a cookie: 401 "Authentication required"', async () => {
    const me = await new Client(coord.current.url).get('/me');
    expectError(me, 401, 'Authentication required');
  });

  it('GET /me after a failed login is still 401', async () => {
    const client = new Client(coord.current.url);
    await client.post('/login', { email: account.email, password: 'not the password' });
    expectError(await client.get('/me'), 401, 'Authentication required');
  });
});

describe('POST /logout ends that session — only that one — for good', () => {
  const coord = coordinatorFor();
  let project: { id: string };
  let account: Awaited<ReturnType<typeof signUp>>;

  beforeAll(async () => {
    account = await signUp(coord.current.url, uniqueEmail('logout'), PASSWORD);
    const res = await account.client.post('/projects', sampleProject());
    expect(res.status, res.text).toBe(201);
    project = res.json.project;
  });

  it('200 {success: true}; the old cookie replayed by hand is refused everywhere; a second session survives', async () => {
    const first = new Client(coord.current.url);
    const second = new Client(coord.current.url);
    expect((await first.post('/login', { email: account.email, password: PASSWORD })).status).toBe(200);
    expect((await second.post('/login', { email: account.email, password: PASSWORD })).status).toBe(200);
    const saved = first.cookie!;
    expect(saved).toMatch(/^connect\.sid=./);
    expect(saved).not.toBe(second.cookie);

    // Both work before.
    expect((await first.get('/me')).status).toBe(200);
    expect((await first.post('/deploy', { projectId: project.id })).status).toBe(200);

    const out = await first.post('/logout');
    expect(out.status, out.text).toBe(200);
    expect(out.json).toEqual({ success: true });

    // The saved cookie value, sent by hand (what an attacker who copied it would do).
    const replay = new Client(coord.current.url);
    expectError(await replay.get('/me', { cookie: saved }), 401, 'Authentication required');
    expectError(
      await replay.post('/deploy', { projectId: project.id }, { cookie: saved }),
      401,
      'Authentication required',
    );

    // The user's other session is untouched.
    const me = await second.get('/me');
    expect(me.status, me.text).toBe(200);
    expect(me.json.user.id).toBe(account.user.id);
    expect((await second.post('/deploy', { projectId: project.id })).status).toBe(200);
  });

  it('the logout clears the cookie in the browser', async () => {
    const client = new Client(coord.current.url);
    await client.post('/login', { email: account.email, password: PASSWORD });
    const out = await client.post('/logout');
    expect(out.status).toBe(200);
    const setCookie = sessionCookieHeader(out);
    expect(setCookie).toBeDefined();
    expect(setCookie).toMatch(/^connect\.sid=;|Max-Age=0|Expires=Thu, 01 Jan 1970/i);
    expect(client.cookie).toBeNull();
  });

  it('the session row is marked revoked, not left live', async () => {
    const before = await sql(
      coord.current,
      'select count(*)::int as n from sessions where revoked_at is not null',
    );
    const client = new Client(coord.current.url);
    await client.post('/login', { email: account.email, password: PASSWORD });
    await client.post('/logout');
    const after = await sql(
      coord.current,
      'select count(*)::int as n from sessions where revoked_at is not null',
    );
    expect(after[0].n).toBe(before[0].n + 1);
  });

  it('logging out without a session is harmless: 200 {success: true}', async () => {
    const res = await new Client(coord.current.url).post('/logout');
    expect(res.status, res.text).toBe(200);
    expect(res.json).toEqual({ success: true });
  });
});

describe('sessions are server-side', () => {
  const coord = coordinatorFor();
  let account: Awaited<ReturnType<typeof signUp>>;

  beforeAll(async () => {
    account = await signUp(coord.current.url, uniqueEmail('sessions'), PASSWORD);
  });

  it('a forged or garbled cookie is 401', async () => {
    const client = new Client(coord.current.url);
    const good = account.client.cookie!;
    const value = good.slice('connect.sid='.length);
    // Flip one character in the middle of the real value: the cookie no longer decrypts.
    const i = Math.floor(value.length / 2);
    const flipped = value.slice(0, i) + (value[i] === 'A' ? 'B' : 'A') + value.slice(i + 1);
    for (const cookie of [
      'connect.sid=garbage',
      'connect.sid=',
      `connect.sid=${flipped}`,
      `connect.sid=${value.slice(0, -4)}`,
      `connect.sid=${randomBytes(48).toString('base64')}`,
      `connect.sid=${randomBytes(48).toString('base64')};${randomBytes(24).toString('base64')}`,
    ]) {
      expectError(await client.get('/me', { cookie }), 401, 'Authentication required');
    }
    // The genuine one still works.
    expect((await client.get('/me', { cookie: good })).status).toBe(200);
  });

  it('a cookie minted with another root secret is 401', async () => {
    const other = await startCoordinator();
    try {
      const foreign = await signUp(other.url, account.email, PASSWORD);
      const res = await new Client(coord.current.url).get('/me', { cookie: foreign.client.cookie });
      expectError(res, 401, 'Authentication required');
    } finally {
      await other.close();
    }
  });

  it('each sign-in is a row in the sessions table, stored hashed, for the right user', async () => {
    const client = new Client(coord.current.url);
    await client.post(
      '/login',
      { email: account.email, password: PASSWORD },
      { headers: { 'user-agent': 'ua-test/1' } },
    );
    const rows = await sql(
      coord.current,
      'select id, user_id, revoked_at, expires_at, user_agent from sessions where user_id = ? order by created_at',
      [account.user.id],
    );
    expect(rows.length).toBe(2); // the registration's and this login's
    const last = rows.at(-1);
    expect(last.revoked_at).toBeNull();
    expect(new Date(last.expires_at).getTime()).toBeGreaterThan(Date.now());
    expect(last.user_agent).toBe('ua-test/1');
    // The cookie is not the row's key: what the database holds cannot be replayed as a cookie.
    const cookieValue = decodeURIComponent(client.cookie!.slice('connect.sid='.length));
    for (const row of rows) expect(cookieValue).not.toContain(row.id);
  });

  it('deleting the row on the server ends the session even though the cookie is intact', async () => {
    const client = new Client(coord.current.url);
    const login = await client.post('/login', { email: account.email, password: PASSWORD });
    expect(login.status).toBe(200);
    expect((await client.get('/me')).status).toBe(200);
    await sql(
      coord.current,
      'delete from sessions where id = (select id from sessions where user_id = ? order by created_at desc limit 1)',
      [account.user.id],
    );
    expectError(await client.get('/me'), 401, 'Authentication required');
  });

  it('an expired session is refused', async () => {
    const client = new Client(coord.current.url);
    await client.post('/login', { email: account.email, password: PASSWORD });
    expect((await client.get('/me')).status).toBe(200);
    await sql(
      coord.current,
      "update sessions set expires_at = now() - interval '1 second' where id = (select id from sessions where user_id = ? order by created_at desc limit 1)",
      [account.user.id],
    );
    expectError(await client.get('/me'), 401, 'Authentication required');
  });

  it('no response ever carries the password or its hash', async () => {
    const [{ password_hash: hash }] = await sql(
      coord.current,
      'select password_hash from users where id = ?',
      [account.user.id],
    );
    expect(typeof hash).toBe('string');
    const client = new Client(coord.current.url);
    const responses = [
      await client.post('/login', { email: account.email, password: PASSWORD }),
      await client.get('/me'),
      await client.post('/login', { email: account.email, password: `${PASSWORD}x` }),
      await new Client(coord.current.url).post('/register', { email: uniqueEmail(), password: PASSWORD }),
      await new Client(coord.current.url).post('/register', { email: 'bad', password: PASSWORD }),
      await client.get('/openapi.json'),
    ];
    for (const res of responses) {
      expect(res.text).not.toContain(PASSWORD);
      expect(res.text).not.toContain(hash);
      expect(res.text).not.toMatch(/\$argon2/);
      expect(res.text).not.toMatch(/password_?hash/i);
      for (const [, value] of res.headers) expect(value).not.toContain(PASSWORD);
    }
  });
});
