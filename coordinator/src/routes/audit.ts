// The audit log: who or what (user, API token, webhook delivery, agent, system) triggered,
// cancelled or changed anything, when and from where. Globally for admins; per project for anyone
// who may read the project. Secret values are never recorded, so nothing here needs hiding. A
// browser gets the same list as a page at the same URL (views/audit.eta), paged the same way.
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance, FastifyReply } from 'fastify';
import Type from 'typebox';
import { type AuditEventJson, listAudit } from '../modules/audit/audit.service.ts';
import { errors, Ok, Timestamp, Uuid } from '../modules/common/schemas.ts';
import type { ProjectJson } from '../modules/project/project.schema.ts';
import { renderPage, wantsHtml } from '../plugins/negotiation.ts';
import { auditRows } from '../views/audit-view.ts';
import { listHref, pageSize } from '../views/format.ts';

const NullableString = Type.Union([Type.String(), Type.Null()]);
const AuditEventJson = Type.Object({
  id: Uuid,
  created_at: Timestamp,
  actor: Type.Object({
    type: Type.String({ description: 'user, token, webhook, agent or system' }),
    id: NullableString,
    name: Type.String(),
  }),
  action: Type.String({ description: 'e.g. deployment.trigger, deployment.cancel, project.update' }),
  target: Type.Union([Type.Object({ type: Type.String(), id: Type.String() }), Type.Null()]),
  project_id: Type.Union([Uuid, Type.Null()]),
  ip: NullableString,
  details: Type.Union([Type.Record(Type.String(), Type.Unknown()), Type.Null()]),
});
const Page = Type.Object({
  limit: Type.Integer({ minimum: 1, maximum: 500, default: 100 }),
  before: Type.Optional(
    Type.String({
      description:
        'an audit event id: the events after it (exact, even within one millisecond); or an ISO timestamp: events older than it',
    }),
  ),
});

/** The JSON route's default page size: a link leaves `limit` out when it is this. */
const DEFAULT_LIMIT = 100;

function auditHref(path: string, limit: number, before?: string): string {
  return listHref(path, { limit: pageSize(limit, DEFAULT_LIMIT), before });
}

export default async function auditRoutes(instance: FastifyInstance) {
  const app = instance.withTypeProvider<TypeBoxTypeProvider>();

  /**
   * The list as a page: one more event is read than shown, to know whether an older page exists;
   * "Older" pages from the last shown event's id, as the JSON's `before` does.
   */
  const auditPage = async (
    reply: FastifyReply,
    query: { limit: number; before?: string },
    project: ProjectJson | null,
  ) => {
    const [events, projects] = await Promise.all([
      listAudit(app.services.orm.em.fork(), {
        projectId: project?.id,
        limit: query.limit + 1,
        before: query.before,
      }),
      app.services.projects.list(),
    ]);
    const shown: AuditEventJson[] = events.slice(0, query.limit);
    const path = project ? `/projects/${project.id}/audit` : '/audit';
    return renderPage(reply, 'audit', {
      project: project && { id: project.id, name: project.name },
      events: auditRows(shown, new Map(projects.map((p) => [p.id, p.name]))),
      paged: Boolean(query.before),
      newestHref: auditHref(path, query.limit),
      olderHref: events.length > query.limit ? auditHref(path, query.limit, shown.at(-1)!.id) : null,
    });
  };

  app.get(
    '/audit',
    {
      config: { auth: 'admin' },
      schema: {
        tags: ['audit'],
        querystring: Page,
        response: { 200: Ok({ audit_events: Type.Array(AuditEventJson) }), ...errors(400, 401, 403) },
      },
    },
    async (request, reply) => {
      if (wantsHtml(request)) return auditPage(reply, request.query, null);
      return {
        success: true as const,
        audit_events: await listAudit(app.services.orm.em.fork(), {
          limit: request.query.limit,
          before: request.query.before,
        }),
      };
    },
  );

  app.get(
    '/projects/:id/audit',
    {
      schema: {
        tags: ['audit'],
        params: Type.Object({ id: Type.String() }),
        querystring: Page,
        response: { 200: Ok({ audit_events: Type.Array(AuditEventJson) }), ...errors(400, 401, 404) },
      },
    },
    async (request, reply) => {
      const project = await app.services.projects.get(request.params.id);
      if (wantsHtml(request)) return auditPage(reply, request.query, project);
      return {
        success: true as const,
        audit_events: await listAudit(app.services.orm.em.fork(), {
          projectId: project.id,
          limit: request.query.limit,
          before: request.query.before,
        }),
      };
    },
  );
}
