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
  projectId: string | null = null,
): void {
  const project =
    projectId ??
    (target?.type === 'project' ? target.id : typeof details?.project === 'string' ? details.project : null);
  em.create(AuditEvent, {
    ip: actor.ip ?? null,
    projectId: project,
    actorType: actor.type,
    actorId: actor.id,
    actorName: actor.name,
    action,
    targetType: target?.type ?? null,
    targetId: target?.id ?? null,
    details,
  });
}

export interface AuditEventJson {
  id: string;
  created_at: string;
  actor: { type: string; id: string | null; name: string };
  action: string;
  target: { type: string; id: string } | null;
  project_id: string | null;
  ip: string | null;
  details: Record<string, unknown> | null;
}

/** Newest first; `before` pages on (an event's created_at). */
export async function listAudit(
  em: EntityManager,
  filter: { projectId?: string; limit: number; before?: Date },
): Promise<AuditEventJson[]> {
  const events = await em.find(
    AuditEvent,
    {
      ...(filter.projectId ? { projectId: filter.projectId } : {}),
      ...(filter.before ? { createdAt: { $lt: filter.before } } : {}),
    },
    { orderBy: { createdAt: 'desc', id: 'desc' }, limit: filter.limit },
  );
  return events.map((e) => ({
    id: e.id,
    created_at: e.createdAt.toISOString(),
    actor: { type: e.actorType, id: e.actorId ?? null, name: e.actorName },
    action: e.action,
    target: e.targetType && e.targetId ? { type: e.targetType, id: e.targetId } : null,
    project_id: e.projectId ?? null,
    ip: e.ip ?? null,
    details: e.details ?? null,
  }));
}
