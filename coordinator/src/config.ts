// The coordinator's whole configuration: one schema over environment variables, parsed once at
// start-up. A bad value stops the process with a message naming the variable; nothing else in
// the coordinator reads process.env. Every variable is documented in .env.example.
import Type, { type Static } from 'typebox';
import Value from 'typebox/value';

const Bool = Type.Union([Type.Literal('true'), Type.Literal('false'), Type.Literal('1'), Type.Literal('0')]);

export const EnvSchema = Type.Object({
  HOST: Type.String({ default: '127.0.0.1', minLength: 1 }),
  PORT: Type.Integer({ default: 3000, minimum: 0, maximum: 65535 }),
  PUBLIC_URL: Type.Optional(Type.String({ pattern: '^https?://[^\\s]+$' })),
  LOG_LEVEL: Type.Union(
    ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'].map((l) => Type.Literal(l)),
    { default: 'info' },
  ),
  DATABASE_URL: Type.Optional(Type.String({ pattern: '^postgres(ql)?://' })),
  DATABASE_POOL_MAX: Type.Integer({ default: 10, minimum: 1, maximum: 200 }),
  DECKHAND_DATA_DIR: Type.String({ default: '.data', minLength: 1 }),
  EMBEDDED_POSTGRES_PORT: Type.Integer({ default: 54329, minimum: 1, maximum: 65535 }),
  DECKHAND_SECRET: Type.Optional(Type.String({ minLength: 32 })),
  TRUST_PROXY: Type.String({ default: 'false' }),
  REGISTRATION: Type.Union([Type.Literal('closed'), Type.Literal('open')], { default: 'closed' }),
  SETUP_TOKEN: Type.Optional(Type.String({ minLength: 16 })),
  LOGIN_RATE_LIMIT: Type.Integer({ default: 40, minimum: 1 }),
  LOGIN_RATE_WINDOW_SECONDS: Type.Integer({ default: 60, minimum: 1 }),
  SESSION_TTL_HOURS: Type.Integer({ default: 24 * 14, minimum: 1 }),
  AGENT_HEARTBEAT_MS: Type.Integer({ default: 10_000, minimum: 100 }),
  AGENT_LEASE_MS: Type.Integer({ default: 30_000, minimum: 200 }),
  AGENT_ABANDON_GRACE_MS: Type.Integer({ default: 30_000, minimum: 0 }),
  OUTPUT_LIMIT_BYTES: Type.Integer({ default: 16 * 1024 * 1024, minimum: 1024 }),
  SCHEDULER_INTERVAL_MS: Type.Integer({ default: 1_000, minimum: 50 }),
  BODY_LIMIT_BYTES: Type.Integer({ default: 1024 * 1024, minimum: 1024 }),
  WEBHOOK_BODY_LIMIT_BYTES: Type.Integer({ default: 25 * 1024 * 1024, minimum: 1024 }),
  NOTIFY_INTERVAL_MS: Type.Integer({ default: 2_000, minimum: 50 }),
  METRICS_TOKEN: Type.Optional(Type.String({ minLength: 16 })),
  RETENTION_DAYS: Type.Integer({ default: 0, minimum: 0, maximum: 36_500 }),
  RETENTION_INTERVAL_MS: Type.Integer({ default: 3_600_000, minimum: 1_000 }),
  NOTIFY_RETRY_ATTEMPTS: Type.Integer({ default: 6, minimum: 1, maximum: 20 }),
  NOTIFY_RETRY_BASE_MS: Type.Integer({ default: 60_000, minimum: 10 }),
  SMTP_URL: Type.Optional(Type.String({ pattern: '^smtps?://' })),
  SMTP_HOST: Type.Optional(Type.String({ minLength: 1 })),
  SMTP_PORT: Type.Optional(Type.Integer({ minimum: 1, maximum: 65535 })),
  SMTP_SECURE: Type.Optional(Bool),
  SMTP_USER: Type.Optional(Type.String()),
  SMTP_PASSWORD: Type.Optional(Type.String()),
  SMTP_FROM: Type.Optional(Type.String({ minLength: 3 })),
});
export type Env = Static<typeof EnvSchema>;

export type TrustProxy = boolean | number | string[];

export interface Config {
  host: string;
  port: number;
  /** Base URL used in links (webhook URLs, mails); derived from HOST/PORT when unset. */
  publicUrl: string | undefined;
  logLevel: string;
  databaseUrl: string | undefined;
  databasePoolMax: number;
  dataDir: string;
  embeddedPostgresPort: number;
  secret: string | undefined;
  trustProxy: TrustProxy;
  registration: 'closed' | 'open';
  setupToken: string | undefined;
  loginRateLimit: { max: number; windowMs: number };
  sessionTtlMs: number;
  bodyLimit: number;
  webhookBodyLimit: number;
  agentHeartbeatMs: number;
  agentLeaseMs: number;
  agentAbandonGraceMs: number;
  outputLimitBytes: number;
  schedulerIntervalMs: number;
  /** Notifications (mail, outgoing webhooks, commit statuses): poll interval and retries. */
  notify: { intervalMs: number; retryAttempts: number; retryBaseMs: number };
  /** GET /metrics: with a token, for whoever holds it; without, for loopback clients only. */
  metricsToken: string | undefined;
  /** Finished deployments older than `days` (0: keep) are pruned every `intervalMs`. */
  retention: { days: number; intervalMs: number };
  smtp: {
    url?: string;
    host?: string;
    port?: number;
    secure?: boolean;
    user?: string;
    password?: string;
    from?: string;
  };
}

export class ConfigError extends Error {}

function parseTrustProxy(raw: string): TrustProxy {
  const v = raw.trim();
  if (v === '' || v === 'false' || v === '0') return false;
  if (v === 'true') return true;
  if (/^\d+$/.test(v)) return Number(v);
  return v
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
}

const SECRET_KEYS = new Set([
  'DECKHAND_SECRET',
  'SMTP_PASSWORD',
  'SMTP_URL',
  'DATABASE_URL',
  'SETUP_TOKEN',
  'METRICS_TOKEN',
]);

/** Parses the environment; throws ConfigError naming every bad variable (never its secret value). */
export function loadConfig(env: Record<string, string | undefined> = process.env): Config {
  const known: Record<string, unknown> = {};
  for (const key of Object.keys(EnvSchema.properties)) {
    const value = env[key];
    if (value !== undefined && value !== '') known[key] = value;
  }
  const withDefaults = Value.Default(EnvSchema, Value.Convert(EnvSchema, known)) as Record<string, unknown>;
  const errors = [...Value.Errors(EnvSchema, withDefaults)];
  if (errors.length > 0) {
    const lines = errors.map((e) => {
      const key = e.instancePath.replace(/^\//, '') || 'environment';
      const shown = SECRET_KEYS.has(key) ? '' : ` (got ${JSON.stringify(known[key])})`;
      return `  ${key}: ${e.message}${shown}`;
    });
    throw new ConfigError(`Invalid configuration, fix these environment variables:\n${lines.join('\n')}`);
  }
  const e = withDefaults as Env;
  const bool = (v: string | undefined) => (v === undefined ? undefined : v === 'true' || v === '1');
  return {
    host: e.HOST,
    port: e.PORT,
    publicUrl: e.PUBLIC_URL?.replace(/\/+$/, ''),
    logLevel: e.LOG_LEVEL,
    databaseUrl: e.DATABASE_URL,
    databasePoolMax: e.DATABASE_POOL_MAX,
    dataDir: e.DECKHAND_DATA_DIR,
    embeddedPostgresPort: e.EMBEDDED_POSTGRES_PORT,
    secret: e.DECKHAND_SECRET,
    trustProxy: parseTrustProxy(e.TRUST_PROXY),
    registration: e.REGISTRATION,
    setupToken: e.SETUP_TOKEN,
    loginRateLimit: { max: e.LOGIN_RATE_LIMIT, windowMs: e.LOGIN_RATE_WINDOW_SECONDS * 1000 },
    sessionTtlMs: e.SESSION_TTL_HOURS * 3600 * 1000,
    bodyLimit: e.BODY_LIMIT_BYTES,
    agentHeartbeatMs: e.AGENT_HEARTBEAT_MS,
    agentLeaseMs: e.AGENT_LEASE_MS,
    agentAbandonGraceMs: e.AGENT_ABANDON_GRACE_MS,
    outputLimitBytes: e.OUTPUT_LIMIT_BYTES,
    schedulerIntervalMs: e.SCHEDULER_INTERVAL_MS,
    webhookBodyLimit: e.WEBHOOK_BODY_LIMIT_BYTES,
    metricsToken: e.METRICS_TOKEN,
    retention: { days: e.RETENTION_DAYS, intervalMs: e.RETENTION_INTERVAL_MS },
    notify: {
      intervalMs: e.NOTIFY_INTERVAL_MS,
      retryAttempts: e.NOTIFY_RETRY_ATTEMPTS,
      retryBaseMs: e.NOTIFY_RETRY_BASE_MS,
    },
    smtp: {
      url: e.SMTP_URL,
      host: e.SMTP_HOST,
      port: e.SMTP_PORT,
      secure: bool(e.SMTP_SECURE),
      user: e.SMTP_USER,
      password: e.SMTP_PASSWORD,
      from: e.SMTP_FROM,
    },
  };
}

/** True when the address only accepts connections from this machine. */
export function isLoopbackHost(host: string): boolean {
  return host === 'localhost' || host === '::1' || /^127\.\d+\.\d+\.\d+$/.test(host);
}
