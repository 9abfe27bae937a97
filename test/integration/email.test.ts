// POST /email/test (the spec, API.md "Mail") against a real coordinator over HTTP and a real SMTP
// server. The main coordinator gets its SMTP settings from the environment (SMTP_URL), as in
// production; a second one, whose settings the tests switch, covers "not configured" and an
// unreachable server.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { SmtpSettings } from '../../coordinator/src/modules/mail/mailer.ts';
import { Client, signUp, startCoordinator, type TestCoordinator } from '../helpers/coordinator.ts';
import { closedPort, startTestSmtpServer, type TestSmtpServer } from '../helpers/smtp-server.ts';

let smtp: TestSmtpServer;
let coord: TestCoordinator;
let admin: Client;
let adminEmail: string;

/** The second coordinator and the settings it reads on every send. */
let switchable: TestCoordinator;
let switchableAdmin: Client;
let settings: SmtpSettings | null = null;

beforeAll(async () => {
  smtp = await startTestSmtpServer({ rejectRecipients: /^rejected@/ });
  coord = await startCoordinator({
    REGISTRATION: 'open',
    SMTP_URL: smtp.url,
    SMTP_FROM: 'Deckhand <deckhand@test.local>',
  });
  const account = await signUp(coord.url, 'admin@example.com');
  admin = account.client;
  adminEmail = account.email;

  switchable = await startCoordinator({}, { smtpSettings: async () => settings });
  switchableAdmin = (await signUp(switchable.url, 'root@example.com')).client;
});

afterAll(async () => {
  await coord?.close();
  await switchable?.close();
  await smtp?.close();
});

/** Lets a message that should not have been sent arrive, if it was going to. */
async function settle(): Promise<void> {
  await new Promise((resolve) => setTimeout(resolve, 200));
}

describe('POST /email/test with a session and no body', () => {
  it("answers 200 {success: true, message: 'Test email sent'} and mails the user's address", async () => {
    const before = smtp.messages.length;
    const res = await admin.post('/email/test');
    expect(res.status, res.text).toBe(200);
    expect(res.json).toEqual({ success: true, message: 'Test email sent' });
    const message = await smtp.waitForMessage();
    expect(message.to).toEqual([adminEmail]);
    expect(message.from).toBe('deckhand@test.local');
    expect(message.subject).toEqual(expect.any(String));
    expect(message.subject.length).toBeGreaterThan(0);
    expect(message.raw).toMatch(/^to: .*admin@example\.com/im);
    await settle();
    expect(smtp.messages.length).toBe(before + 1);
  });

  it('treats an empty JSON body as {}', async () => {
    const res = await admin.request('POST', '/email/test', {
      body: '',
      headers: { 'content-type': 'application/json' },
    });
    expect(res.status, res.text).toBe(200);
    expect(res.json).toEqual({ success: true, message: 'Test email sent' });
    expect((await smtp.waitForMessage()).to).toEqual([adminEmail]);
  });

  it('sends to the signed-in user, whoever that is', async () => {
    const { client, email } = await signUp(coord.url, 'second-user@example.com');
    const res = await client.post('/email/test', {});
    expect(res.status, res.text).toBe(200);
    expect(res.json).toEqual({ success: true, message: 'Test email sent' });
    expect((await smtp.waitForMessage()).to).toEqual([email]);
  });
});

describe('POST /email/test {to} from an admin', () => {
  it('goes to that address', async () => {
    const res = await admin.post('/email/test', { to: 'ops@example.org' });
    expect(res.status, res.text).toBe(200);
    expect(res.json).toEqual({ success: true, message: 'Test email sent' });
    expect((await smtp.waitForMessage()).to).toEqual(['ops@example.org']);
  });

  it('refuses an address that is not one with 400', async () => {
    const before = smtp.messages.length;
    const res = await admin.post('/email/test', { to: 'not an address' });
    expect(res.status).toBe(400);
    expect(res.json.success).toBe(false);
    expect(res.json.error).toEqual(expect.any(String));
    await settle();
    expect(smtp.messages.length).toBe(before);
  });
});

describe('POST /email/test {to: other} from a non-admin', () => {
  it('is 403 and sends nothing', async () => {
    const { client, user } = await signUp(coord.url, 'viewer-user@example.com');
    expect(user.role).not.toBe('admin');
    const before = smtp.messages.length;
    const res = await client.post('/email/test', { to: 'stranger@example.net' });
    expect(res.status).toBe(403);
    expect(res.json.success).toBe(false);
    expect(res.json.error).toEqual(expect.any(String));
    await settle();
    expect(smtp.messages.length).toBe(before);
  });

  it('may still name their own address', async () => {
    const { client, email } = await signUp(coord.url, 'own-address@example.com');
    const res = await client.post('/email/test', { to: email });
    expect(res.status, res.text).toBe(200);
    expect((await smtp.waitForMessage()).to).toEqual([email]);
  });
});

describe('POST /email/test without a session', () => {
  it('is 401 Authentication required and sends nothing', async () => {
    const before = smtp.messages.length;
    const anonymous = new Client(coord.url);
    for (const body of [undefined, {}, { to: 'someone@example.com' }]) {
      const res = await anonymous.post('/email/test', body);
      expect(res.status).toBe(401);
      expect(res.json).toEqual({ success: false, error: 'Authentication required' });
    }
    await settle();
    expect(smtp.messages.length).toBe(before);
  });
});

describe('POST /email/test when the SMTP server refuses the recipient', () => {
  it("is 502 with the server's words", async () => {
    const res = await admin.post('/email/test', { to: 'rejected@example.com' });
    expect(res.status).toBe(502);
    expect(res.json.success).toBe(false);
    expect(res.json.error).toContain('550');
    expect(res.json.error).toContain('Mailbox unavailable');
  });
});

describe('POST /email/test without SMTP settings', () => {
  it('is 400 SMTP not configured', async () => {
    settings = null;
    const res = await switchableAdmin.post('/email/test');
    expect(res.status).toBe(400);
    expect(res.json).toEqual({ success: false, error: 'SMTP not configured' });
  });
});

describe('POST /email/test when the SMTP server is unreachable', () => {
  it('is 502 {success: false, error} naming the server', async () => {
    const port = await closedPort();
    settings = { url: `smtp://127.0.0.1:${port}`, from: 'Deckhand <deckhand@test.local>' };
    const res = await switchableAdmin.post('/email/test');
    expect(res.status).toBe(502);
    expect(res.json.success).toBe(false);
    expect(res.json.error).toEqual(expect.any(String));
    expect(res.json.error).toContain(`127.0.0.1:${port}`);
  });

  it('never shows the SMTP password in the error', async () => {
    const port = await closedPort();
    settings = { url: `smtp://mailer:Sup3r-S3cret-pw@127.0.0.1:${port}`, from: 'Deckhand <d@test.local>' };
    const res = await switchableAdmin.post('/email/test');
    expect(res.status).toBe(502);
    expect(res.text).not.toContain('Sup3r-S3cret-pw');
  });

  it('works again once the settings point at a live server', async () => {
    settings = { url: smtp.url, from: 'Deckhand <d@test.local>' };
    const res = await switchableAdmin.post('/email/test', { to: 'switched@example.com' });
    expect(res.status, res.text).toBe(200);
    expect(res.json).toEqual({ success: true, message: 'Test email sent' });
    expect((await smtp.waitForMessage()).to).toEqual(['switched@example.com']);
  });
});
