// Appends audit events inside the caller's transaction, so a change and its record commit together.
import type { EntityManager } from '@mikro-orm/postgresql';
import type { Actor } from '../common/actor.ts';
import { AuditEvent } from './audit-event.entity.ts';

export function recordAudit(
  em: EntityManager,
  actor: Actor,
  action: string,
  target: { type: string; id: string } | null,
  details: Record<string, unknown> | null = null,
): void {
  em.create(AuditEvent, {
    actorType: actor.type,
    actorId: actor.id,
    actorName: actor.name,
    action,
    targetType: target?.type ?? null,
    targetId: target?.id ?? null,
    details,
  });
}
