// Sessions behind the `connect.sid` cookie (API.md "Accounts"): they live server-side, so logging
// out, deleting or expiring the row ends them for good, and a forged cookie is worth nothing.
import { randomBytes } from 'node:crypto';
import { beforeAll, describe, expect, it } from 'vitest';
import {
  Client,
  coordinatorFor,
  sampleProject,
  signUp,
  startCoordinator,
  uniqueEmail,
} from '../helpers/coordinator.ts';
import { sql } from '../helpers/sql.ts';
import { expectJsonError, sessionCookieHeader } from '../helpers/responses.ts';

const PASSWORD = 'correct horse battery staple';

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
    expectJsonError(await replay.get('/me', { cookie: saved }), 401, 'Authentication required');
    expectJsonError(
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
      expectJsonError(await client.get('/me', { cookie }), 401, 'Authentication required');
    }
    // The genuine one still works.
    expect((await client.get('/me', { cookie: good })).status).toBe(200);
  });

  it('a cookie minted with another root secret is 401', async () => {
    const other = await startCoordinator();
    try {
      const foreign = await signUp(other.url, account.email, PASSWORD);
      const res = await new Client(coord.current.url).get('/me', { cookie: foreign.client.cookie });
      expectJsonError(res, 401, 'Authentication required');
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
    expectJsonError(await client.get('/me'), 401, 'Authentication required');
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
    expectJsonError(await client.get('/me'), 401, 'Authentication required');
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

describe('GET /sessions and DELETE /sessions/:id: a user sees and ends their own sessions', () => {
  const coord = coordinatorFor({ REGISTRATION: 'open' });

  it('lists the live sessions with where they came from, marks the current one, and ends another', async () => {
    const account = await signUp(coord.current.url, uniqueEmail('sessions'), PASSWORD);
    const laptop = new Client(coord.current.url);
    expect((await laptop.post('/login', { email: account.email, password: PASSWORD })).status).toBe(200);
    const listed = await account.client.get('/sessions');
    expect(listed.status, listed.text).toBe(200);
    const sessions = listed.json.sessions as Array<{ id: string; current: boolean; ip: string | null }>;
    expect(sessions).toHaveLength(2);
    expect(sessions.filter((s) => s.current)).toHaveLength(1);
    expect(sessions.every((s) => s.ip === '127.0.0.1')).toBe(true);
    // The listing does not reveal the cookie.
    expect(listed.text).not.toContain(account.client.cookie!.split('=')[1]!.slice(0, 40));

    const other = sessions.find((s) => !s.current)!;
    expect((await account.client.request('DELETE', `/sessions/${other.id}`)).status).toBe(200);
    expectJsonError(await laptop.get('/me'), 401);
    expect((await account.client.get('/me')).status).toBe(200);
    expect((await account.client.get('/sessions')).json.sessions).toHaveLength(1);

    // Someone else's session is not yours to end.
    const stranger = await signUp(coord.current.url, uniqueEmail('stranger'), PASSWORD);
    const mine = (await account.client.get('/sessions')).json.sessions[0].id as string;
    expectJsonError(await stranger.client.request('DELETE', `/sessions/${mine}`), 404);
    expect((await account.client.get('/me')).status).toBe(200);
    expectJsonError(await new Client(coord.current.url).get('/sessions'), 401);
  });
});
