// Builds the coordinator's Fastify app from its dependencies: external plugins first (sessions,
// rate limit, OpenAPI), then the app's own (errors, body parsers, services, auth), then routes.
// Start-up and shutdown live in server.ts; tests build the app the same way.

import { randomUUID } from 'node:crypto';
import { MAX_FRAME_BYTES } from '@deckhand/protocol';
import rateLimit from '@fastify/rate-limit';
import secureSession from '@fastify/secure-session';
import swagger from '@fastify/swagger';
import websocket, { type WebsocketPluginOptions } from '@fastify/websocket';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { MikroORM } from '@mikro-orm/postgresql';
import Fastify, { type FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import type { Logger } from 'pino';
import { type Config, isLoopbackHost } from './config.ts';
import { AgentWebSocket } from './modules/agent/agent-websocket.ts';
import { deriveKey, SecretBox } from './modules/common/crypto.ts';
import { pgRateLimitStore } from './modules/rate-limit/pg-rate-limit-store.ts';
import { SmtpSettingsService } from './modules/settings/smtp-settings.service.ts';
import { Mailer, type SmtpSettings, smtpSettingsFromEnv } from './modules/mail/mailer.ts';
import auth from './plugins/auth.ts';
import bodyParsers from './plugins/body-parsers.ts';
import errors from './plugins/errors.ts';
import { loggerOptions } from './plugins/logger.ts';
import services, { createServices } from './plugins/services.ts';
import { installValidators } from './plugins/validation.ts';
import accountRoutes from './routes/accounts.ts';
import agentSocketRoutes from './routes/agent-socket.ts';
import auditRoutes from './routes/audit.ts';
import assetRoutes from './routes/assets.ts';
import deploymentEventRoutes from './routes/deployment-events.ts';
import agentRoutes from './routes/agents.ts';
import deliveryRoutes from './routes/deliveries.ts';
import deploymentRoutes from './routes/deployments.ts';
import emailRoutes from './routes/email.ts';
import healthRoutes from './routes/health.ts';
import metricsRoutes from './routes/metrics.ts';
import pageRoutes from './routes/pages.ts';
import projectHookRoutes from './routes/project-hooks.ts';
import projectPageRoutes from './routes/project-pages.ts';
import projectRoutes from './routes/projects.ts';
import sshHostKeyRoutes from './routes/ssh-host-key.ts';
import agentDownloadRoutes from './routes/agent-download.ts';
import tokenRoutes from './routes/tokens.ts';
import sessionRoutes from './routes/sessions.ts';
import settingsRoutes from './routes/settings.ts';
import settingsPageRoutes from './routes/settings-pages.ts';
import userRoutes from './routes/users.ts';
import webhookRoutes from './routes/webhook.ts';

export interface AppDeps {
  config: Config;
  orm: MikroORM;
  rootSecret: string;
  /** Where SMTP settings come from; defaults to the environment's. */
  smtpSettings?: () => Promise<SmtpSettings | null>;
  /** A pino logger to share (server.ts); otherwise one is made from the configuration. */
  logger?: Logger;
}

export type App = FastifyInstance;

type WebSocketClass = NonNullable<NonNullable<WebsocketPluginOptions['options']>['WebSocket']>;

/** The URL links point at: PUBLIC_URL, or what HOST/PORT make reachable from this machine. */
export function publicUrlOf(config: Config, boundPort?: number): string {
  if (config.publicUrl) return config.publicUrl;
  const host = config.host === '0.0.0.0' || config.host === '::' ? 'localhost' : config.host;
  return `http://${host.includes(':') ? `[${host}]` : host}:${boundPort ?? config.port}`;
}

/** The one-time token the first registration needs when the coordinator is reachable from elsewhere. */
export function setupTokenNeeded(config: Config): boolean {
  return !isLoopbackHost(config.host);
}

export async function buildApp(deps: AppDeps): Promise<App> {
  const { config } = deps;
  const app = Fastify({
    ...(deps.logger ? { loggerInstance: deps.logger } : { logger: loggerOptions(config.logLevel) }),
    // A hop count is valid for proxy-addr, though Fastify's types omit it.
    trustProxy: config.trustProxy as boolean | string[],
    bodyLimit: config.bodyLimit,
    schemaErrorFormatter: (errs, dataVar) => {
      const e = errs[0];
      if (!e) return new Error(`Invalid ${dataVar}`);
      const field = e.instancePath.replace(/^\//, '').replaceAll('/', '.');
      const where = field || (dataVar === 'body' ? 'body' : dataVar);
      if (e.keyword === 'required') {
        const missing = (e.params as { missingProperty?: string }).missingProperty;
        return new Error(`${field ? `${field}.` : ''}${missing} is required`);
      }
      if (e.keyword === 'additionalProperties') {
        return new Error(
          `${where} has an unknown field ${(e.params as { additionalProperty?: string }).additionalProperty}`,
        );
      }
      return new Error(`${where} ${e.message ?? 'is invalid'}`);
    },
  }).withTypeProvider<TypeBoxTypeProvider>();

  installValidators(app as unknown as FastifyInstance);
  // Computed when needed: with PORT=0 the port is only known once listening.
  const publicUrl = () => {
    const address = app.server.address();
    return publicUrlOf(config, typeof address === 'object' && address ? address.port : undefined);
  };
  const box = new SecretBox(deriveKey(deps.rootSecret, 'secrets-at-rest'));
  // Mail settings: the environment's, else those an admin stored (encrypted); tests may inject their own.
  const smtpSettings = new SmtpSettingsService(deps.orm, box, smtpSettingsFromEnv(envSmtp(config)));
  const mailer = new Mailer(deps.smtpSettings ?? (() => smtpSettings.effective()), app.log);

  // External plugins.
  await app.register(
    fp(
      async (instance) => {
        await instance.register(secureSession, {
          key: deriveKey(deps.rootSecret, 'session-cookie'),
          cookieName: 'connect.sid',
          expiry: Math.floor(config.sessionTtlMs / 1000),
          cookie: { path: '/', httpOnly: true, sameSite: 'lax', secure: 'auto' },
        });
      },
      { name: 'secure-session-setup' },
    ),
  );
  // Counted in PostgreSQL, so a limit holds across every coordinator process.
  await app.register(rateLimit, { global: false, store: pgRateLimitStore(deps.orm), skipOnError: true });
  // Frames past MAX_FRAME_BYTES still reach the codec (answered TOO_LARGE); far larger ones are cut by ws.
  await app.register(websocket, {
    options: { maxPayload: 2 * MAX_FRAME_BYTES, WebSocket: AgentWebSocket as unknown as WebSocketClass },
    // The plugin's own pre-close would close every socket without a code (1005) before the agent
    // hub could say GOING_AWAY and store what they sent; the hub closes them (services' preClose).
    // New upgrades are refused meanwhile: without an upgrade listener Node destroys such a socket
    // at once (one left waiting would hold the HTTP server's close until the agent gives up).
    preClose(done) {
      this.server.removeAllListeners('upgrade');
      this.websocketServer.close();
      done();
    },
  });
  await app.register(swagger, {
    openapi: {
      openapi: '3.1.0',
      info: { title: 'Deckhand', version: '0.1.0', description: 'Self-hosted deployment service' },
      components: {
        securitySchemes: {
          session: { type: 'apiKey', in: 'cookie', name: 'connect.sid' },
          token: { type: 'http', scheme: 'bearer', description: 'An API token (POST /tokens)' },
        },
      },
      security: [{ session: [] }, { token: [] }],
    },
  });

  // The app's own plugins.
  await app.register(errors);
  await app.register(bodyParsers);
  await app.register(
    services,
    createServices({
      orm: deps.orm,
      box,
      mailer,
      smtpSettings,
      registration: {
        mode: config.registration,
        setupToken: setupTokenNeeded(config)
          ? (config.setupToken ?? deriveSetupToken(deps.rootSecret))
          : null,
      },
      sessionTtlMs: config.sessionTtlMs,
      publicUrl,
      log: app.log as unknown as Logger,
      processId: randomUUID(),
      agentHeartbeatMs: config.agentHeartbeatMs,
      agentLeaseMs: config.agentLeaseMs,
      agentAbandonGraceMs: config.agentAbandonGraceMs,
      outputLimitBytes: config.outputLimitBytes,
      schedulerIntervalMs: config.schedulerIntervalMs,
      notify: config.notify,
      retention: config.retention,
    }),
  );
  await app.register(auth, { publicOrigin: config.publicUrl ? new URL(config.publicUrl).origin : null });
  app.addHook('onSend', async (request, reply, payload) => {
    if (request.method === 'GET') reply.header('vary', 'Accept');
    reply.header('x-content-type-options', 'nosniff');
    return payload;
  });

  // Routes.
  await app.register(healthRoutes);
  await app.register(metricsRoutes, { token: config.metricsToken });
  await app.register(accountRoutes, { rateLimit: config.loginRateLimit });
  await app.register(projectRoutes);
  await app.register(projectPageRoutes);
  await app.register(sshHostKeyRoutes);
  await app.register(agentRoutes, { publicUrl, heartbeatMs: config.agentHeartbeatMs });
  await app.register(agentDownloadRoutes);
  await app.register(deploymentRoutes);
  await app.register(deploymentEventRoutes);
  await app.register(agentSocketRoutes);
  await app.register(emailRoutes);
  await app.register(tokenRoutes);
  await app.register(auditRoutes);
  await app.register(userRoutes);
  await app.register(settingsRoutes);
  await app.register(settingsPageRoutes);
  await app.register(sessionRoutes);
  await app.register(deliveryRoutes);
  await app.register(projectHookRoutes);
  await app.register(webhookRoutes, { bodyLimit: config.webhookBodyLimit });
  await app.register(assetRoutes);
  await app.register(pageRoutes);
  app.get('/openapi.json', { config: { auth: 'public' }, schema: { hide: true } }, async () => app.swagger());
  return app as unknown as App;
}

function envSmtp(config: Config) {
  const s = config.smtp;
  return {
    SMTP_URL: s.url,
    SMTP_HOST: s.host,
    SMTP_PORT: s.port,
    SMTP_SECURE: s.secure,
    SMTP_USER: s.user,
    SMTP_PASSWORD: s.password,
    SMTP_FROM: s.from,
  };
}

/** Stable for a given root secret, so a restart prints the same token until the first account exists. */
export function deriveSetupToken(rootSecret: string): string {
  return deriveKey(rootSecret, 'setup-token').toString('base64url').slice(0, 24);
}
