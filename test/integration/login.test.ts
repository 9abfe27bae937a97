// POST /login and GET /me (API.md "Accounts"): the right credentials sign in with a session
// cookie; wrong ones are refused alike, whatever was wrong.
import { beforeAll, describe, expect, it } from 'vitest';
import { Client, coordinatorFor, signUp, uniqueEmail } from '../helpers/coordinator.ts';
import { cookieAttributes, expectJsonError, sessionCookieHeader } from '../helpers/responses.ts';

const PASSWORD = 'correct horse battery staple';

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
    expectJsonError(wrong, 401, 'Invalid email or password');
    expectJsonError(unknown, 401, 'Invalid email or password');
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
    expectJsonError(me, 401, 'Authentication required');
  });

  it('GET /me after a failed login is still 401', async () => {
    const client = new Client(coord.current.url);
    await client.post('/login', { email: account.email, password: 'not the password' });
    expectJsonError(await client.get('/me'), 401, 'Authentication required');
  });
});
