// The rate limit on POST /login and POST /register (spec "Limits"): 40 requests per minute per
// client IP, which X-Forwarded-For decides only behind a trusted proxy. Each describe runs against
// its own real coordinator over HTTP on a fresh database.
import { describe, expect, it } from 'vitest';
import { Client, coordinatorFor, type HttpResponse, signUp, uniqueEmail } from '../helpers/coordinator.ts';
import { expectJsonError } from '../helpers/responses.ts';

const PASSWORD = 'correct horse battery staple';

function expectRateLimited(res: HttpResponse) {
  expectJsonError(res, 429);
  expect(res.json.error).toMatch(/try again/i);
}

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
