// Mail over SMTP with nodemailer. The settings are read on every send (an admin may change them at
// runtime), and a transport is built for that one send. Failures become an UpstreamError carrying
// what the SMTP server said, or a readable sentence when it could not be reached; neither that
// message nor anything logged ever contains the SMTP password or a url with credentials.

import { createTransport } from 'nodemailer';
import { BadRequestError, DomainError, UpstreamError } from '../common/errors.ts';

export interface SmtpSettings {
  /** SMTP_URL, e.g. `smtp://user:pass@host:587` or `smtps://host`; takes precedence over host/port. */
  url?: string;
  host?: string;
  port?: number;
  /** Implicit TLS (port 465); otherwise STARTTLS is used when the server offers it. */
  secure?: boolean;
  user?: string;
  password?: string;
  /** The From header, e.g. `Deckhand <deckhand@example.com>`. */
  from: string;
}

export interface MailMessage {
  to: string;
  subject: string;
  text: string;
  html?: string;
}

/** The part of a pino (or Fastify) logger the mailer uses. */
export interface MailerLogger {
  info(obj: object, msg?: string): void;
  warn(obj: object, msg?: string): void;
}

export class SmtpNotConfiguredError extends DomainError {
  constructor() {
    super(400, 'SMTP not configured');
  }
}

export const DEFAULT_MAIL_FROM = 'Deckhand <deckhand@localhost>';

/** How long to wait for the TCP connection, the server greeting and any reply. */
const TIMEOUT_MS = 10_000;

/** Secrets shorter than this are not scrubbed from messages: that would mangle ordinary text. */
const MIN_SECRET_LENGTH = 4;

export interface SmtpEnv {
  SMTP_URL?: string;
  SMTP_HOST?: string;
  SMTP_PORT?: number;
  SMTP_SECURE?: boolean;
  SMTP_USER?: string;
  SMTP_PASSWORD?: string;
  SMTP_FROM?: string;
}

/** SMTP settings from the environment, or null when neither SMTP_URL nor SMTP_HOST is set. */
export function smtpSettingsFromEnv(env: SmtpEnv): SmtpSettings | null {
  const url = nonEmpty(env.SMTP_URL);
  const host = nonEmpty(env.SMTP_HOST);
  const from = nonEmpty(env.SMTP_FROM) ?? DEFAULT_MAIL_FROM;
  if (url) return { url, from };
  if (!host) return null;
  const settings: SmtpSettings = { host, from };
  if (env.SMTP_PORT !== undefined) settings.port = env.SMTP_PORT;
  if (env.SMTP_SECURE !== undefined) settings.secure = env.SMTP_SECURE;
  const user = nonEmpty(env.SMTP_USER);
  if (user) {
    settings.user = user;
    settings.password = env.SMTP_PASSWORD ?? '';
  }
  return settings;
}

export class Mailer {
  readonly #getSettings: () => Promise<SmtpSettings | null>;
  readonly #log: MailerLogger;

  constructor(getSettings: () => Promise<SmtpSettings | null>, log: MailerLogger) {
    this.#getSettings = getSettings;
    this.#log = log;
  }

  /**
   * Sends one message with the current settings.
   * @throws SmtpNotConfiguredError (400) when no SMTP server is configured
   * @throws UpstreamError (502) when the server refuses the message or cannot be reached
   */
  async send(msg: MailMessage): Promise<void> {
    const settings = await this.#getSettings();
    if (!settings) throw new SmtpNotConfiguredError();
    const target = resolveTarget(settings);
    const transport = createTransport({
      ...target.options,
      connectionTimeout: TIMEOUT_MS,
      greetingTimeout: TIMEOUT_MS,
      socketTimeout: TIMEOUT_MS,
      dnsTimeout: TIMEOUT_MS,
      // nodemailer's own logging stays off: its transaction log is no place for credentials
      logger: false,
      debug: false,
    });
    const logContext = { to: msg.to, subject: msg.subject, smtp: target.address };
    try {
      const info = await transport.sendMail({
        from: settings.from,
        to: msg.to,
        subject: msg.subject,
        text: msg.text,
        ...(msg.html === undefined ? {} : { html: msg.html }),
      });
      this.#log.info({ ...logContext, messageId: info.messageId }, 'mail sent');
    } catch (err) {
      const failure = describeFailure(err, target);
      this.#log.warn(
        { ...logContext, code: failure.code, responseCode: failure.responseCode, error: failure.message },
        'mail not sent',
      );
      if (failure.badRequest) throw new BadRequestError(failure.message);
      throw new UpstreamError(failure.message);
    } finally {
      transport.close();
    }
  }

  /** Sends a short message that proves the SMTP settings work. */
  sendTestMail(to: string): Promise<void> {
    const sentAt = new Date().toISOString();
    return this.send({
      to,
      subject: 'Deckhand test email',
      text:
        'This is a test email from Deckhand.\n\n' +
        'If you are reading it, sending mail over SMTP works.\n\n' +
        `Sent at ${sentAt}.\n`,
    });
  }
}

interface SmtpTarget {
  /** Connection options for nodemailer, credentials included. */
  options: {
    url?: string;
    host?: string;
    port?: number;
    secure?: boolean;
    auth?: { user: string; pass: string };
  };
  /** `host:port`, safe to show and log. */
  address: string;
  /** Strings that must not leave this module: the password in its plain and encoded forms, the url. */
  secrets: string[];
}

function resolveTarget(settings: SmtpSettings): SmtpTarget {
  const secrets: string[] = [];
  const addSecret = (value: string | undefined) => {
    if (value && value.length >= MIN_SECRET_LENGTH && !secrets.includes(value)) secrets.push(value);
  };
  const addPassword = (user: string, password: string) => {
    addSecret(password);
    addSecret(encodeURIComponent(password));
    addSecret(Buffer.from(password).toString('base64')); // AUTH LOGIN
    addSecret(Buffer.from(`\0${user}\0${password}`).toString('base64')); // AUTH PLAIN
  };

  const url = nonEmpty(settings.url);
  if (url) {
    let parsed: URL;
    try {
      parsed = new URL(url);
    } catch {
      throw new BadRequestError('The SMTP URL is not a valid URL');
    }
    if (parsed.protocol !== 'smtp:' && parsed.protocol !== 'smtps:') {
      throw new BadRequestError('The SMTP URL must start with smtp:// or smtps://');
    }
    addSecret(url);
    const secure = parsed.protocol === 'smtps:';
    const port = Number(parsed.port) || (secure ? 465 : 587);
    const options: SmtpTarget['options'] = { url };
    if (parsed.password) addPassword(safeDecode(parsed.username), safeDecode(parsed.password));
    else if (!parsed.username && settings.user) {
      // a url without credentials may take them from the user/password settings
      options.auth = { user: settings.user, pass: settings.password ?? '' };
      addPassword(settings.user, settings.password ?? '');
    }
    return { options, address: `${parsed.hostname}:${port}`, secrets };
  }

  const host = nonEmpty(settings.host);
  if (!host) throw new SmtpNotConfiguredError();
  const port = settings.port ?? (settings.secure ? 465 : 587);
  const options: SmtpTarget['options'] = { host, port, secure: settings.secure ?? port === 465 };
  if (settings.user) {
    options.auth = { user: settings.user, pass: settings.password ?? '' };
    addPassword(settings.user, settings.password ?? '');
  }
  return { options, address: `${host}:${port}`, secrets };
}

interface Failure {
  message: string;
  code?: string;
  responseCode?: number;
  /** The message itself was unusable (no or malformed recipients): the caller's mistake. */
  badRequest: boolean;
}

const UNREACHABLE_CODES = new Set(['ECONNECTION', 'ESOCKET', 'EDNS', 'ETIMEDOUT', 'ETLS', 'EPROXY']);

function describeFailure(err: unknown, target: SmtpTarget): Failure {
  const e = (typeof err === 'object' && err !== null ? err : {}) as {
    code?: unknown;
    originalCode?: unknown;
    timeoutType?: unknown;
    response?: unknown;
    responseCode?: unknown;
    message?: unknown;
  };
  const code = typeof e.code === 'string' ? e.code : undefined;
  const responseCode = typeof e.responseCode === 'number' ? e.responseCode : undefined;
  const scrub = (text: string) => redact(text.replace(/\s+/g, ' ').trim(), target.secrets);

  if (typeof e.response === 'string' && e.response.trim()) {
    // what the server said, e.g. "550 5.1.1 Mailbox unavailable"
    return { message: scrub(e.response), code, responseCode, badRequest: false };
  }
  if (code === 'EENVELOPE' && typeof e.message === 'string') {
    // nodemailer refused the addresses before talking to the server ("Invalid recipient ...")
    return { message: scrub(e.message), code, badRequest: true };
  }
  // a system error (ECONNREFUSED, ENOTFOUND, ...) says more than nodemailer's wrapper code
  const detail = typeof e.originalCode === 'string' ? e.originalCode : code;
  const suffix = detail ? ` (${detail})` : '';
  if (code === 'ETIMEDOUT' && e.timeoutType !== undefined && e.timeoutType !== 'CONNECT_TIMEOUT') {
    // connected, but the greeting, the TLS handshake or a reply never came
    return {
      message: `The SMTP server at ${target.address} did not answer in time${suffix}`,
      code,
      badRequest: false,
    };
  }
  if (code !== undefined && UNREACHABLE_CODES.has(code)) {
    return {
      message: `Could not reach the SMTP server at ${target.address}${suffix}`,
      code,
      badRequest: false,
    };
  }
  if (code === 'EAUTH' || code === 'ENOAUTH') {
    return {
      message: `The SMTP server at ${target.address} did not accept the credentials${suffix}`,
      code,
      badRequest: false,
    };
  }
  return {
    message: `Sending mail through the SMTP server at ${target.address} failed${suffix}`,
    code,
    badRequest: false,
  };
}

function redact(text: string, secrets: string[]): string {
  let out = text;
  // longest first, so a url is replaced whole rather than around its password
  for (const secret of [...secrets].sort((a, b) => b.length - a.length)) {
    out = out.split(secret).join('***');
  }
  return out;
}

function nonEmpty(value: string | undefined): string | undefined {
  const trimmed = value?.trim();
  return trimmed ? trimmed : undefined;
}

function safeDecode(value: string): string {
  try {
    return decodeURIComponent(value);
  } catch {
    return value;
  }
}
