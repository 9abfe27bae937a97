// The application's services, built once per app and reachable from routes as `app.services`.
import type { MikroORM } from '@mikro-orm/postgresql';
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import pg from 'pg';
import type { Logger } from 'pino';
import { AgentHub } from '../modules/agent/agent-hub.ts';
import { AgentBundle } from '../modules/agent-bundle/agent-bundle.ts';
import { AgentUpdates } from '../modules/agent-bundle/agent-update.ts';
import { AgentService } from '../modules/agent/agent.service.ts';
import type { SecretBox } from '../modules/common/crypto.ts';
import { type DeploymentEvents, SignalledDeploymentEvents } from '../modules/deployment/deployment-events.ts';
import { FinishedLogs } from '../modules/deployment/finished-logs.ts';
import { DeploymentService } from '../modules/deployment/deployment.service.ts';
import { ClusterSignals } from '../modules/cluster/cluster-signals.ts';
import { Retention } from '../modules/deployment/retention.ts';
import { Metrics } from '../modules/metrics/metrics.ts';
import { JobDispatch } from '../modules/deployment/job-dispatch.ts';
import { JobService } from '../modules/deployment/job.service.ts';
import { Scheduler } from '../modules/deployment/scheduler.ts';
import type { Mailer } from '../modules/mail/mailer.ts';
import { NotificationService } from '../modules/notification/notification.service.ts';
import { NotificationWorker } from '../modules/notification/notification.worker.ts';
import { ProjectService } from '../modules/project/project.service.ts';
import { SSH_DEFAULTS, SshRunner } from '../modules/ssh/ssh-runner.ts';
import { ApiTokenService } from '../modules/token/api-token.service.ts';
import type { SmtpSettingsService } from '../modules/settings/smtp-settings.service.ts';
import { UserAdminService } from '../modules/user/user-admin.service.ts';
import { type RegistrationPolicy, UserService } from '../modules/user/user.service.ts';
import { WebhookService } from '../modules/webhook/webhook.service.ts';

export interface Services {
  orm: MikroORM;
  tokens: ApiTokenService;
  dispatch: JobDispatch;
  pool: pg.Pool;
  events: DeploymentEvents;
  /** LISTEN/NOTIFY between the coordinator processes sharing the database. */
  signals: ClusterSignals;
  /** GET /metrics. */
  metrics: Metrics;
  /** Prunes deployments past their retention. */
  retention: Retention;
  jobs: JobService;
  hub: AgentHub;
  scheduler: Scheduler;
  /** Runs the jobs of SSH targets in this process. */
  ssh: SshRunner;
  users: UserService;
  /** Managing accounts: list, invitations, roles, removal. */
  userAdmin: UserAdminService;
  projects: ProjectService;
  agents: AgentService;
  deployments: DeploymentService;
  webhooks: WebhookService;
  mailer: Mailer;
  /** Where mail settings come from (environment, else stored). */
  smtpSettings: SmtpSettingsService;
  notifications: NotificationService;
  notifier: NotificationWorker;
}

declare module 'fastify' {
  interface FastifyInstance {
    services: Services;
  }
}

export interface ServiceOptions {
  orm: MikroORM;
  log: Logger;
  /** Identifies this coordinator process (agent presence). */
  processId: string;
  agentHeartbeatMs: number;
  agentLeaseMs: number;
  agentAbandonGraceMs: number;
  outputLimitBytes: number;
  schedulerIntervalMs: number;
  box: SecretBox;
  mailer: Mailer;
  /** Where mail settings come from (environment, else stored). */
  smtpSettings: SmtpSettingsService;
  registration: RegistrationPolicy;
  sessionTtlMs: number;
  publicUrl: () => string;
  /** Notifications: poll interval and retries (config.notify). */
  notify: { intervalMs: number; retryAttempts: number; retryBaseMs: number };
  retention: { days: number; intervalMs: number };
}

export function createServices(o: ServiceOptions): Services {
  const users = new UserService(o.orm, o.registration, o.sessionTtlMs);
  const projects = new ProjectService(o.orm, o.box, (id) => `${o.publicUrl()}/webhook/${id}`);
  const agents = new AgentService(o.orm, 3 * o.agentHeartbeatMs);
  // Several coordinator processes may share the database: what one does, the others hear of at
  // once (they also poll, so a lost signal only delays).
  const signals = new ClusterSignals({
    connectionString: o.orm.config.get('clientUrl') as string,
    processId: o.processId,
    log: o.log.child({ component: 'cluster-signals' }),
  });
  const events = new SignalledDeploymentEvents(signals);
  // Output ingest writes through a small plain pool of its own (see JobService.outputs).
  const pool = new pg.Pool({ connectionString: o.orm.config.get('clientUrl'), max: 4 });
  pool.on('error', (err) => o.log.warn({ err }, 'output ingest database connection error'));
  const jobs = new JobService({
    pool,
    orm: o.orm,
    events,
    leaseMs: o.agentLeaseMs,
    abandonGraceMs: o.agentAbandonGraceMs,
    outputLimitBytes: o.outputLimitBytes,
  });
  const dispatch = new JobDispatch({ orm: o.orm, box: o.box, projects, leaseMs: o.agentLeaseMs });
  // The hub and the scheduler wake each other: an agent coming online may start a queued
  // deployment; a started deployment has jobs to send.
  const agentUpdates = new AgentUpdates(new AgentBundle());
  const hub: AgentHub = new AgentHub({
    agents,
    jobs,
    dispatch,
    processId: o.processId,
    heartbeatMs: o.agentHeartbeatMs,
    leaseMs: o.agentLeaseMs,
    abandonAfterMs: o.agentLeaseMs + o.agentAbandonGraceMs,
    onAgentOnline: () => queueMoved(),
    // Agents older than the one served at GET /agent/download are told so, and may update.
    agentUpdate: (version) => agentUpdates.offerFor(version),
    publicUrl: o.publicUrl,
    log: o.log.child({ component: 'agent-hub' }),
  });
  const ssh = new SshRunner({
    orm: o.orm,
    jobs,
    dispatch,
    projects,
    leaseMs: o.agentLeaseMs,
    log: o.log.child({ component: 'ssh-runner' }),
    ...SSH_DEFAULTS,
  });
  const scheduler: Scheduler = new Scheduler({
    orm: o.orm,
    jobs,
    leaseMs: o.agentLeaseMs,
    agents,
    projects,
    events,
    dispatch: async () => {
      await hub.dispatch();
      await ssh.dispatch();
      // The agent may be connected to another process.
      signals.publish('jobs');
    },
    log: o.log.child({ component: 'scheduler' }),
    intervalMs: o.schedulerIntervalMs,
  });
  /** Something may start now: here, and on every other process (another may hold the agent). */
  const queueMoved = () => {
    scheduler.nudge();
    signals.publish('queue');
  };
  const sendCancels = () => {
    void hub.sendCancels().catch((err) => o.log.error({ err }, 'could not send cancels'));
    void ssh.checkCancels().catch((err) => o.log.error({ err }, 'could not stop SSH jobs'));
  };
  agents.onRevoked = (id) => {
    hub.revoke(id);
    signals.publish('revoked', id);
  };
  const metrics = new Metrics({
    orm: o.orm,
    pool,
    connections: () => hub.connectedAgentIds().length,
    onlineWindowMs: 3 * o.agentHeartbeatMs,
  });
  jobs.onOutputStored = (bytes) => metrics.logBytes.inc(bytes);
  jobs.onDeploymentFinished = (id) => {
    queueMoved();
    void metrics.deploymentFinished(o.orm, id).catch(() => undefined);
  };
  jobs.onCancelRequested = () => {
    sendCancels();
    signals.publish('cancels');
  };
  // What the other processes signal (each handler acts here only: no echo).
  signals.on('queue', () => scheduler.nudge());
  signals.on('jobs', () => void hub.dispatch().catch((err) => o.log.error({ err }, 'could not send jobs')));
  signals.on('cancels', () => sendCancels());
  signals.on('revoked', (ids) => {
    for (const id of ids) hub.revoke(id);
  });
  // 32 MiB of finished deployments' logs as JSON text (about 250 deployments of 200 entries).
  const deployments = new DeploymentService(
    o.orm,
    agents,
    events,
    jobs,
    () => queueMoved(),
    new FinishedLogs(32 * 2 ** 20),
  );
  const webhooks = new WebhookService(o.orm, projects, deployments);
  return {
    orm: o.orm,
    tokens: new ApiTokenService(o.orm),
    dispatch,
    pool,
    users,
    userAdmin: new UserAdminService(o.orm, (token) => `${o.publicUrl()}/register?invitation=${token}`),
    projects,
    agents,
    deployments,
    webhooks,
    mailer: o.mailer,
    smtpSettings: o.smtpSettings,
    notifications: new NotificationService(o.orm, o.box),
    notifier: new NotificationWorker({
      orm: o.orm,
      box: o.box,
      mailer: o.mailer,
      publicUrl: o.publicUrl,
      log: o.log.child({ component: 'notifications' }),
      ...o.notify,
    }),
    events,
    signals,
    metrics,
    retention: new Retention({ orm: o.orm, ...o.retention, log: o.log.child({ component: 'retention' }) }),
    jobs,
    hub,
    scheduler,
    ssh,
  };
}

export default fp(
  async (app: FastifyInstance, services: Services) => {
    app.decorate('services', services);
    // Background work runs while the app serves, and stops before the database closes.
    app.addHook('onReady', async () => {
      await services.signals.start();
      const inFlight = await services.jobs.reconcileInFlight();
      if (inFlight)
        app.log.info({ jobs: inFlight }, 'jobs in flight at start-up: waiting for their agents to reconnect');
      services.hub.start();
      services.scheduler.start();
      services.retention.start();
      services.ssh.start();
      services.notifier.start();
    });
    app.addHook('preClose', async () => {
      // Each part stops in turn; how long each took is logged, so a slow stop says where it waits.
      const took: Record<string, number> = {};
      const timed = async (name: string, stop: () => Promise<void>) => {
        const started = performance.now();
        await stop();
        took[name] = Math.round(performance.now() - started);
      };
      await timed('scheduler', () => services.scheduler.stop());
      await timed('retention', () => services.retention.stop());
      await timed('ssh', () => services.ssh.stop());
      await timed('notifier', () => services.notifier.stop());
      await timed('hub', () => services.hub.stop());
      await timed('signals', () => services.signals.stop());
      await timed('pool', () => services.pool.end());
      app.log.info({ tookMs: took }, 'background work stopped');
    });
  },
  { name: 'services' },
);
