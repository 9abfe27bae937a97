// POST /register (API.md "Accounts"): the first account becomes admin, later ones viewers when
// registration is open; input validation, the setup token, races for the first account, and the
// session cookie it sets. Each describe runs against its own real coordinator over HTTP.
import { beforeAll, describe, expect, it } from 'vitest';
import { Client, coordinatorFor, type HttpResponse, uniqueEmail } from '../helpers/coordinator.ts';
import { sql } from '../helpers/sql.ts';
import { cookieAttributes, expectJsonError, sessionCookieHeader, UUID } from '../helpers/responses.ts';

const PASSWORD = 'correct horse battery staple';

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
    expectJsonError(res, 403, 'Registration is closed');
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
    expectJsonError(res, 400);
    expect(res.json.error).toMatch(/email/);
  });

  it('a password shorter than 8 characters', async () => {
    const res = await post({ email: uniqueEmail(), password: 'short' });
    expectJsonError(res, 400);
    expect(res.json.error).toMatch(/password/);
  });

  it('a missing email', async () => {
    const res = await post({ password: PASSWORD });
    expectJsonError(res, 400, 'email is required');
  });

  it('a missing password', async () => {
    const res = await post({ email: uniqueEmail() });
    expectJsonError(res, 400, 'password is required');
  });

  it('an empty body (treated as {})', async () => {
    const res = await post('');
    expectJsonError(res, 400, 'email is required');
  });

  it('malformed JSON', async () => {
    const res = await post('{"email": "a@example.com", "password": ');
    expectJsonError(res, 400, 'Request body is not valid JSON');
  });

  it('a field of the wrong type', async () => {
    const res = await post({ email: uniqueEmail(), password: { value: PASSWORD } });
    expectJsonError(res, 400);
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
    expectJsonError(b, 400);
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
    expectJsonError(res, 403);
    expect(res.json.error).toMatch(/^Registration is closed/);
    expect(sessionCookieHeader(res)).toBeUndefined();
  });

  it('with a wrong setup_token: 403', async () => {
    const res = await register({ setup_token: 'wrong-token-0123456789abcdef' });
    expectJsonError(res, 403);
    expect(res.json.error).toMatch(/^Registration is closed/);
  });

  it('with a prefix of the right token: 403', async () => {
    const res = await register({ setup_token: SETUP_TOKEN.slice(0, -1) });
    expectJsonError(res, 403);
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
    expectJsonError(res, 403, 'Registration is closed');
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
