// The audit log: who or what (user, API token, webhook delivery, agent, system) triggered,
// cancelled or changed anything, when and from where. Globally for admins; per project for anyone
// who may read the project. Secret values are never recorded, so nothing here needs hiding.
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import Type from 'typebox';
import { listAudit } from '../modules/audit/audit.service.ts';
import { BadRequestError } from '../modules/common/errors.ts';
import { errors, Ok, Timestamp, Uuid } from '../modules/common/schemas.ts';

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
  before: Type.Optional(Type.String({ description: 'an event created_at: older ones only' })),
});

function beforeOf(value: string | undefined): Date | undefined {
  if (value === undefined) return undefined;
  const date = new Date(value);
  if (Number.isNaN(date.getTime())) throw new BadRequestError('before must be a timestamp');
  return date;
}

export default async function auditRoutes(instance: FastifyInstance) {
  const app = instance.withTypeProvider<TypeBoxTypeProvider>();

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
    async (request) => ({
      success: true as const,
      audit_events: await listAudit(app.services.orm.em.fork(), {
        limit: request.query.limit,
        before: beforeOf(request.query.before),
      }),
    }),
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
    async (request) => {
      const project = await app.services.projects.get(request.params.id);
      return {
        success: true as const,
        audit_events: await listAudit(app.services.orm.em.fork(), {
          projectId: project.id,
          limit: request.query.limit,
          before: beforeOf(request.query.before),
        }),
      };
    },
  );
}
