// The notification outbox. Deployments end from many code paths; none of them calls us. Instead
// the notification worker reads deployment states from the database: `deployment_notices` keeps
// the last state it noticed per deployment, each newly noticed state becomes one
// `notification_deliveries` row per channel (mail, a project's outgoing webhook, the commit
// status), and every try at sending one is a `notification_attempts` row. Because all of it is
// rows, a restarted coordinator carries on where it stopped and replicas never send twice.
import { defineEntity, type InferEntity, p } from '@mikro-orm/core';
import { baseProperties, timestamp } from '../common/base.entity.ts';
import { Deployment } from '../deployment/deployment.entity.ts';
import { Project } from '../project/project.entity.ts';

export const HOOK_EVENTS = ['deployment.started', 'deployment.finished'] as const;
export type HookEvent = (typeof HOOK_EVENTS)[number];

/** An outgoing webhook of a project: where deployment events are POSTed, signed with its secret. */
export const ProjectHook = defineEntity({
  name: 'ProjectHook',
  tableName: 'project_hooks',
  properties: {
    ...baseProperties,
    project: () => p.manyToOne(Project).deleteRule('cascade').index(),
    url: p.text(),
    events: p.json<HookEvent[]>(),
    /** `whsec_…`, encrypted with the secrets-at-rest key. */
    secretEncrypted: p.text().hidden(),
  },
});
export type IProjectHook = InferEntity<typeof ProjectHook>;

/** The last state of a deployment the worker has turned into deliveries. */
export const DeploymentNotice = defineEntity({
  name: 'DeploymentNotice',
  tableName: 'deployment_notices',
  properties: {
    deployment: () => p.manyToOne(Deployment).primary().deleteRule('cascade'),
    status: p.string().length(16),
    noticedAt: timestamp().onCreate(() => new Date()),
  },
});
export type IDeploymentNotice = InferEntity<typeof DeploymentNotice>;

export const CHANNELS = ['email', 'webhook', 'commit_status'] as const;
export type Channel = (typeof CHANNELS)[number];
/** `pending` (due at next_attempt_at, or being sent while locked_until is ahead), then one of the rest. */
export const DELIVERY_STATES = ['pending', 'delivered', 'failed', 'skipped', 'superseded'] as const;
export type DeliveryState = (typeof DELIVERY_STATES)[number];

/** One message to send on one channel about one state of one deployment. */
export const NotificationDelivery = defineEntity({
  name: 'NotificationDelivery',
  tableName: 'notification_deliveries',
  indexes: [
    {
      name: 'notification_deliveries_due_index',
      expression: `create index "notification_deliveries_due_index" on "notification_deliveries" ("next_attempt_at") where "state" = 'pending'`,
    },
  ],
  properties: {
    ...baseProperties,
    deployment: () => p.manyToOne(Deployment).deleteRule('cascade').index(),
    project: () => p.manyToOne(Project).deleteRule('cascade').index(),
    hook: () => p.manyToOne(ProjectHook).deleteRule('cascade').nullable().index(),
    channel: p.string().length(16).$type<Channel>(),
    /** `deployment.queued`, `deployment.started`, `deployment.finished`. */
    event: p.string().length(32),
    /** The deployment's state this delivery reports. */
    deploymentStatus: p.string().length(16),
    /** deployment:channel:hook:state, so a state is never turned into the same delivery twice. */
    dedupeKey: p.string().length(160).unique(),
    state: p.string().length(16).$type<DeliveryState>().default('pending'),
    attempts: p.integer().default(0),
    nextAttemptAt: timestamp().onCreate(() => new Date()),
    /** While a worker sends it: nobody else takes it before this. */
    lockedUntil: timestamp().nullable(),
    lastError: p.text().nullable(),
    deliveredAt: timestamp().nullable(),
    /** For webhooks: the body, fixed when the event happened, so every retry sends the same. */
    payload: p.json<Record<string, unknown>>().nullable(),
  },
});
export type INotificationDelivery = InferEntity<typeof NotificationDelivery>;

/** One try at sending a delivery: what came back and how long it took. */
export const NotificationAttempt = defineEntity({
  name: 'NotificationAttempt',
  tableName: 'notification_attempts',
  properties: {
    ...baseProperties,
    delivery: () => p.manyToOne(NotificationDelivery).deleteRule('cascade').index(),
    success: p.boolean(),
    statusCode: p.integer().nullable(),
    error: p.text().nullable(),
    durationMs: p.integer(),
  },
});
export type INotificationAttempt = InferEntity<typeof NotificationAttempt>;
