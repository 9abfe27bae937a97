import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { DomainError, UpstreamError } from '../../coordinator/src/modules/common/errors.ts';
import {
  Mailer,
  SmtpNotConfiguredError,
  type SmtpSettings,
  smtpSettingsFromEnv,
} from '../../coordinator/src/modules/mail/mailer.ts';
import { closedPort, startTestSmtpServer, type TestSmtpServer } from '../helpers/smtp-server.ts';

const FROM = 'Deckhand <deckhand@test.local>';
const USER = 'deckhand';
const PASSWORD = 'S3cret-p@ss:word';
const WRONG_PASSWORD = 'Wr0ng-p@ss:word';

const servers: TestSmtpServer[] = [];
async function smtpServer(opts?: Parameters<typeof startTestSmtpServer>[0]): Promise<TestSmtpServer> {
  const server = await startTestSmtpServer(opts);
  servers.push(server);
  return server;
}
afterEach(async () => {
  await Promise.all(servers.splice(0).map((server) => server.close()));
});

/** A real pino logger writing into an array, so whatever the mailer logs can be searched. */
function capturingLogger() {
  const lines: string[] = [];
  const log = pino({ level: 'trace' }, { write: (line: string) => lines.push(line) });
  return { log, lines, text: () => lines.join('\n') };
}

function mailerFor(settings: SmtpSettings | null) {
  const logger = capturingLogger();
  return { mailer: new Mailer(async () => settings, logger.log), logger };
}

async function rejection(promise: Promise<unknown>): Promise<Error> {
  try {
    await promise;
  } catch (err) {
    if (err instanceof Error) return err;
    throw new Error(`rejected with a non-error: ${String(err)}`, { cause: err });
  }
  throw new Error('expected a rejection');
}

describe('Mailer', () => {
  it('delivers a test mail to the recipient with the subject', async () => {
    const server = await smtpServer();
    const { mailer, logger } = mailerFor({ url: server.url, from: FROM });

    await mailer.sendTestMail('alice@example.com');

    const message = await server.waitForMessage();
    expect(message.to).toEqual(['alice@example.com']);
    expect(message.from).toBe('deckhand@test.local');
    expect(message.subject).toBe('Deckhand test email');
    expect(message.raw).toContain('SMTP works');
    expect(message.raw).toMatch(/Sent at \d{4}-\d{2}-\d{2}T/);
    expect(logger.text()).toContain('mail sent');
  });

  it('sends html alongside text with host and port settings', async () => {
    const server = await smtpServer();
    const { mailer } = mailerFor({ host: '127.0.0.1', port: server.port, from: FROM });

    await mailer.send({
      to: 'bob@example.com',
      subject: 'Déploiement réussi',
      text: 'plain',
      html: '<p>rich</p>',
    });

    const message = await server.waitForMessage();
    expect(message.to).toEqual(['bob@example.com']);
    expect(message.subject).toBe('Déploiement réussi');
    expect(message.raw).toContain('text/html');
  });

  it('authenticates with user and password', async () => {
    const server = await smtpServer({ auth: { user: USER, password: PASSWORD } });
    const { mailer, logger } = mailerFor({
      host: '127.0.0.1',
      port: server.port,
      secure: false,
      user: USER,
      password: PASSWORD,
      from: FROM,
    });

    await mailer.sendTestMail('carol@example.com');

    expect((await server.waitForMessage()).to).toEqual(['carol@example.com']);
    expect(logger.text()).not.toContain(PASSWORD);
  });

  it('authenticates with the credentials of an SMTP url', async () => {
    const server = await smtpServer({ auth: { user: USER, password: PASSWORD } });
    expect(server.url).toContain(encodeURIComponent(PASSWORD));
    const { mailer, logger } = mailerFor({ url: server.url, from: FROM });

    await mailer.sendTestMail('dave@example.com');

    expect((await server.waitForMessage()).subject).toBe('Deckhand test email');
    expect(logger.text()).not.toContain(PASSWORD);
    expect(logger.text()).not.toContain(encodeURIComponent(PASSWORD));
  });

  it('reads the settings on every send', async () => {
    const first = await smtpServer();
    const second = await smtpServer();
    let current: SmtpSettings = { url: first.url, from: FROM };
    const mailer = new Mailer(async () => current, capturingLogger().log);

    await mailer.sendTestMail('one@example.com');
    current = { url: second.url, from: FROM };
    await mailer.sendTestMail('two@example.com');

    expect(first.messages.map((m) => m.to)).toEqual([['one@example.com']]);
    expect(second.messages.map((m) => m.to)).toEqual([['two@example.com']]);
  });

  it('refuses to send when SMTP is not configured', async () => {
    const { mailer } = mailerFor(null);

    const err = await rejection(mailer.sendTestMail('alice@example.com'));

    expect(err).toBeInstanceOf(SmtpNotConfiguredError);
    expect(err).toBeInstanceOf(DomainError);
    expect((err as DomainError).statusCode).toBe(400);
    expect(err.message).toBe('SMTP not configured');
  });

  it('reports a refused recipient with the words of the server', async () => {
    const server = await smtpServer({ rejectRecipients: /^nobody@/ });
    const { mailer, logger } = mailerFor({ url: server.url, from: FROM });

    const err = await rejection(mailer.sendTestMail('nobody@example.com'));

    expect(err).toBeInstanceOf(UpstreamError);
    expect((err as UpstreamError).statusCode).toBe(502);
    expect(err.message).toContain('Mailbox unavailable');
    expect(err.message).toContain('550');
    expect(server.messages).toHaveLength(0);
    expect(logger.text()).toContain('Mailbox unavailable');
  });

  it('reports wrong credentials without revealing the password', async () => {
    const server = await smtpServer({ auth: { user: USER, password: PASSWORD } });
    const { mailer, logger } = mailerFor({
      host: '127.0.0.1',
      port: server.port,
      user: USER,
      password: WRONG_PASSWORD,
      from: FROM,
    });

    const err = await rejection(mailer.sendTestMail('alice@example.com'));

    expect(err).toBeInstanceOf(UpstreamError);
    expect((err as UpstreamError).statusCode).toBe(502);
    expect(err.message).toContain('535');
    expect(err.message).not.toContain(WRONG_PASSWORD);
    expect(String(err.stack)).not.toContain(WRONG_PASSWORD);
    expect(logger.text()).not.toContain(WRONG_PASSWORD);
    expect(logger.text()).toContain('mail not sent');
    expect(server.messages).toHaveLength(0);
  });

  it('reports wrong credentials in an SMTP url without revealing the password or the url', async () => {
    const server = await smtpServer({ auth: { user: USER, password: PASSWORD } });
    const url = `smtp://${USER}:${encodeURIComponent(WRONG_PASSWORD)}@127.0.0.1:${server.port}`;
    const { mailer, logger } = mailerFor({ url, from: FROM });

    const err = await rejection(mailer.sendTestMail('alice@example.com'));

    expect((err as UpstreamError).statusCode).toBe(502);
    for (const secret of [WRONG_PASSWORD, encodeURIComponent(WRONG_PASSWORD), url]) {
      expect(err.message).not.toContain(secret);
      expect(logger.text()).not.toContain(secret);
    }
  });

  it('fails fast and readably when the server cannot be reached', async () => {
    const port = await closedPort();
    const { mailer, logger } = mailerFor({
      host: '127.0.0.1',
      port,
      user: USER,
      password: PASSWORD,
      from: FROM,
    });

    const started = Date.now();
    const err = await rejection(mailer.sendTestMail('alice@example.com'));

    expect(Date.now() - started).toBeLessThan(15_000);
    expect(err).toBeInstanceOf(UpstreamError);
    expect((err as UpstreamError).statusCode).toBe(502);
    expect(err.message).toBe(`Could not reach the SMTP server at 127.0.0.1:${port} (ECONNREFUSED)`);
    expect(logger.text()).not.toContain(PASSWORD);
  });

  it('names the host and port of an unreachable SMTP url without its credentials', async () => {
    const port = await closedPort();
    const url = `smtps://${USER}:${encodeURIComponent(PASSWORD)}@127.0.0.1:${port}`;
    const { mailer, logger } = mailerFor({ url, from: FROM });

    const err = await rejection(mailer.sendTestMail('alice@example.com'));

    expect(err.message).toBe(`Could not reach the SMTP server at 127.0.0.1:${port} (ECONNREFUSED)`);
    expect(logger.text()).not.toContain(encodeURIComponent(PASSWORD));
    expect(logger.text()).not.toContain(PASSWORD);
  });

  it('rejects an SMTP url that is not one', async () => {
    const { mailer } = mailerFor({ url: 'http://example.com', from: FROM });

    const err = await rejection(mailer.sendTestMail('alice@example.com'));

    expect((err as DomainError).statusCode).toBe(400);
  });
});

describe('smtpSettingsFromEnv', () => {
  it('is null without SMTP_URL or SMTP_HOST', () => {
    expect(smtpSettingsFromEnv({})).toBeNull();
    expect(
      smtpSettingsFromEnv({ SMTP_USER: 'u', SMTP_PASSWORD: 'p', SMTP_FROM: 'x@y.z', SMTP_PORT: 25 }),
    ).toBeNull();
    expect(smtpSettingsFromEnv({ SMTP_URL: '', SMTP_HOST: ' ' })).toBeNull();
  });

  it('uses SMTP_URL ahead of SMTP_HOST', () => {
    expect(
      smtpSettingsFromEnv({
        SMTP_URL: 'smtp://u:p@mail.example.com:587',
        SMTP_HOST: 'other.example.com',
        SMTP_PORT: 25,
      }),
    ).toEqual({ url: 'smtp://u:p@mail.example.com:587', from: 'Deckhand <deckhand@localhost>' });
  });

  it('takes host, port, security and credentials', () => {
    expect(
      smtpSettingsFromEnv({
        SMTP_HOST: 'mail.example.com',
        SMTP_PORT: 465,
        SMTP_SECURE: true,
        SMTP_USER: 'deckhand',
        SMTP_PASSWORD: 'secret',
        SMTP_FROM: 'Deploys <deploys@example.com>',
      }),
    ).toEqual({
      host: 'mail.example.com',
      port: 465,
      secure: true,
      user: 'deckhand',
      password: 'secret',
      from: 'Deploys <deploys@example.com>',
    });
  });

  it('defaults the sender and leaves unset options out', () => {
    expect(smtpSettingsFromEnv({ SMTP_HOST: 'mail.example.com' })).toEqual({
      host: 'mail.example.com',
      from: 'Deckhand <deckhand@localhost>',
    });
  });
});
