// Appends audit events inside the caller's transaction, so a change and its record commit together.
import { raw } from '@mikro-orm/core';
import type { EntityManager } from '@mikro-orm/postgresql';
import type { Actor } from '../common/actor.ts';
import { BadRequestError } from '../common/errors.ts';
import { isUuid } from '../common/schemas.ts';
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

/**
 * Where an older page starts: after an event (its id: exact, however many events share its
 * millisecond) or, as the API first offered, before a time (events of that very millisecond are
 * left out whole, so a time cursor can skip some; links use ids).
 */
async function cursorOf(em: EntityManager, before: string): Promise<{ at: Date; id: string | null }> {
  if (isUuid(before)) {
    const event = await em.findOne(AuditEvent, { id: before }, { fields: ['createdAt'] });
    if (event) return { at: event.createdAt, id: event.id };
  }
  const at = new Date(before);
  if (Number.isNaN(at.getTime()))
    throw new BadRequestError('before must be an audit event id or an ISO timestamp');
  return { at, id: null };
}

/** Newest first, ties on the same millisecond broken by id, the order the id cursor follows. */
export async function listAudit(
  em: EntityManager,
  filter: { projectId?: string; limit: number; before?: string },
): Promise<AuditEventJson[]> {
  const cursor = filter.before === undefined ? null : await cursorOf(em, filter.before);
  const events = await em.find(
    AuditEvent,
    {
      ...(filter.projectId ? { projectId: filter.projectId } : {}),
      ...(cursor?.id
        ? {
            [raw((alias) => `(${alias}.created_at, ${alias}.id) < (?, ?)`, [cursor.at, cursor.id])]: [],
          }
        : cursor
          ? { createdAt: { $lt: cursor.at } }
          : {}),
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
