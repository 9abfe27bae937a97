// JSON shapes of a project's outgoing webhooks and of the notification record (API, snake_case).
import Type, { type Static } from 'typebox';
import { NullableTimestamp, Timestamp, Uuid } from '../common/schemas.ts';
import { HttpUrl } from '../project/project.schema.ts';
import { HOOK_EVENTS } from './notification.entity.ts';

const HookEventName = Type.Enum([...HOOK_EVENTS]);

export const CreateHookBody = Type.Object(
  {
    url: HttpUrl,
    events: Type.Optional(
      Type.Array(HookEventName, {
        minItems: 1,
        uniqueItems: true,
        description: 'Default: every event (deployment.started, deployment.finished)',
      }),
    ),
  },
  { additionalProperties: false },
);
export type CreateHookBody = Static<typeof CreateHookBody>;

export const HookJson = Type.Object({
  id: Uuid,
  url: Type.String(),
  events: Type.Array(HookEventName),
  created_at: Timestamp,
});
export type HookJson = Static<typeof HookJson>;

export const AttemptJson = Type.Object({
  at: Timestamp,
  success: Type.Boolean(),
  status_code: Type.Union([Type.Integer(), Type.Null()]),
  error: Type.Union([Type.String(), Type.Null()]),
  duration_ms: Type.Integer(),
});

export const NotificationDeliveryJson = Type.Object({
  id: Uuid,
  channel: Type.Enum(['email', 'webhook', 'commit_status']),
  hook_id: Type.Union([Uuid, Type.Null()]),
  event: Type.String({ description: 'deployment.queued, deployment.started or deployment.finished' }),
  deployment_id: Uuid,
  deployment_status: Type.String(),
  state: Type.Enum(['pending', 'delivered', 'failed', 'skipped', 'superseded'], {
    description:
      'pending: waiting for its next attempt; superseded: a later state of the deployment was reported instead',
  }),
  attempts: Type.Integer(),
  next_attempt_at: NullableTimestamp,
  last_error: Type.Union([Type.String(), Type.Null()]),
  delivered_at: NullableTimestamp,
  created_at: Timestamp,
  attempt_log: Type.Array(AttemptJson),
});
export type NotificationDeliveryJson = Static<typeof NotificationDeliveryJson>;
