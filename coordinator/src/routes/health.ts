// Liveness (the process answers) and readiness (the database answers and every migration is applied).
import type { FastifyInstance } from 'fastify';
import Type from 'typebox';
import { migrationsApplied } from '../db/orm.ts';
import { ErrorBody, Ok } from '../modules/common/schemas.ts';

export default async function healthRoutes(app: FastifyInstance) {
  app.get(
    '/healthz',
    {
      config: { auth: 'public' },
      schema: { tags: ['health'], response: { 200: Ok({ status: Type.String() }) } },
    },
    async () => ({ success: true as const, status: 'ok' }),
  );
  app.get(
    '/readyz',
    {
      config: { auth: 'public' },
      schema: { tags: ['health'], response: { 200: Ok({ database: Type.String() }), 503: ErrorBody } },
    },
    async (_request, reply) => {
      try {
        await app.services.orm.em.fork().execute('select 1');
        if (!(await migrationsApplied(app.services.orm))) {
          return reply.code(503).send({ success: false, error: 'Database migrations are pending' });
        }
        return { success: true as const, database: 'ok' };
      } catch (err) {
        app.log.warn({ err }, 'readiness check failed');
        return reply.code(503).send({ success: false, error: 'Database unreachable' });
      }
    },
  );
}
