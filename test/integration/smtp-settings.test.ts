// SMTP settings stored by an admin (encrypted at rest, password write-only) and used for mail
// when the environment names no server; when it does, the environment wins. Real SMTP servers.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Client } from '../helpers/coordinator.ts';
import { signUp, startCoordinator, type TestCoordinator } from '../helpers/coordinator.ts';
import { del } from '../helpers/projects.ts';
import { expectJsonError } from '../helpers/responses.ts';
import { startTestSmtpServer, type TestSmtpServer } from '../helpers/smtp-server.ts';
import { sql } from '../helpers/sql.ts';

const PASSWORD = 'smtp-pass-4f9a1c';
let stored: TestSmtpServer;
let fromEnv: TestSmtpServer;
let plain: TestCoordinator;
let withEnv: TestCoordinator;
let admin: Client;
let envAdmin: Client;

beforeAll(async () => {
  stored = await startTestSmtpServer({ auth: { user: 'mailer', password: PASSWORD } });
  fromEnv = await startTestSmtpServer();
  plain = await startCoordinator({ REGISTRATION: 'open' });
  withEnv = await startCoordinator({ SMTP_URL: fromEnv.url, SMTP_FROM: 'Env <env@test.local>' });
  admin = (await signUp(plain.url, 'admin@example.com')).client;
  envAdmin = (await signUp(withEnv.url, 'root@example.com')).client;
});

afterAll(async () => {
  await plain?.close();
  await withEnv?.close();
  await stored?.close();
  await fromEnv?.close();
});

const body = () => ({
  host: '127.0.0.1',
  port: stored.port,
  user: 'mailer',
  password: PASSWORD,
  from: 'Deckhand <deploys@test.local>',
});

describe('stored SMTP settings', () => {
  it('are used for mail when the environment names no server; the password is never shown or kept in clear', async () => {
    expect((await admin.get('/settings/smtp')).json.smtp).toEqual({
      source: 'none',
      settings: null,
      stored: false,
    });
    expectJsonError(await admin.post('/email/test'), 400);

    const saved = await admin.request('PUT', '/settings/smtp', { json: body() });
    expect(saved.status, saved.text).toBe(200);
    expect(saved.json.smtp).toEqual({
      source: 'stored',
      stored: true,
      settings: {
        host: '127.0.0.1',
        port: stored.port,
        secure: false,
        user: 'mailer',
        from: 'Deckhand <deploys@test.local>',
        has_password: true,
      },
    });
    expect(saved.text).not.toContain(PASSWORD);
    const [row] = await sql(plain, `select value_encrypted from settings where key = 'smtp'`);
    expect(row.value_encrypted).not.toContain(PASSWORD);
    expect(row.value_encrypted).not.toContain('mailer');

    const sent = await admin.post('/email/test');
    expect(sent.status, sent.text).toBe(200);
    const message = await stored.waitForMessage();
    expect(message.to).toEqual(['admin@example.com']);
    expect(message.from).toBe('deploys@test.local');

    // Changing the sender keeps the stored password (omitted = unchanged).
    const { password: _omitted, ...withoutPassword } = body();
    const changed = await admin.request('PUT', '/settings/smtp', {
      json: { ...withoutPassword, from: 'ops@test.local' },
    });
    expect(changed.json.smtp.settings.has_password).toBe(true);
    expect((await admin.post('/email/test')).status).toBe(200);
    expect((await stored.waitForMessage()).from).toBe('ops@test.local');
  });

  it('a wrong stored password makes the test mail fail with what the server said (502)', async () => {
    await admin.request('PUT', '/settings/smtp', { json: { ...body(), password: 'wrong' } });
    const res = await admin.post('/email/test');
    expectJsonError(res, 502);
    expect(res.text).not.toContain('wrong');
  });

  it('can be removed, and are for admins only', async () => {
    const { client: viewer } = await signUp(plain.url, 'viewer@example.com');
    expectJsonError(await viewer.get('/settings/smtp'), 403);
    expectJsonError(await viewer.request('PUT', '/settings/smtp', { json: body() }), 403);
    expectJsonError(
      await admin.request('PUT', '/settings/smtp', { json: { ...body(), host: 'bad host' } }),
      400,
    );
    const removed = await del(admin, '/settings/smtp');
    expect(removed.json.smtp).toEqual({ source: 'none', settings: null, stored: false });
    expectJsonError(await admin.post('/email/test'), 400);
  });
});

describe('with SMTP in the environment', () => {
  it('the environment wins over stored settings', async () => {
    expect((await envAdmin.request('PUT', '/settings/smtp', { json: body() })).status).toBe(200);
    const described = (await envAdmin.get('/settings/smtp')).json.smtp;
    expect(described).toMatchObject({ source: 'environment', stored: true });
    expect(described.settings).toMatchObject({
      host: '127.0.0.1',
      port: fromEnv.port,
      from: 'Env <env@test.local>',
    });
    expect((await envAdmin.post('/email/test')).status).toBe(200);
    expect((await fromEnv.waitForMessage()).to).toEqual(['root@example.com']);
    expect(stored.messages.filter((m) => m.to.includes('root@example.com'))).toEqual([]);
  });
});
