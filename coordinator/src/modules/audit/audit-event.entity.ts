// The audit log: who (user, API token, webhook delivery, agent, system) did what to which
// resource, from where, appended in the same transaction as the change itself. It names what
// changed, never secret values. `project_id` is kept without a foreign key: the record of a
// deleted project's history stays.
import { defineEntity, type InferEntity, p } from '@mikro-orm/core';
import { baseProperties } from '../common/base.entity.ts';

export type ActorType = 'user' | 'token' | 'webhook' | 'agent' | 'system';

export const AuditEvent = defineEntity({
  name: 'AuditEvent',
  tableName: 'audit_events',
  properties: {
    ...baseProperties,
    actorType: p.string().length(16).$type<ActorType>(),
    actorId: p.string().length(64).nullable(),
    actorName: p.text(),
    action: p.string().length(64).index(),
    targetType: p.string().length(32).nullable(),
    targetId: p.string().length(64).nullable(),
    details: p.json<Record<string, unknown>>().nullable(),
    ip: p.string().length(64).nullable(),
    projectId: p.uuid().nullable().index(),
  },
});
export type IAuditEvent = InferEntity<typeof AuditEvent>;
