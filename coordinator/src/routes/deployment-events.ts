// GET /deploy/:id/events: a deployment's state changes and output as server-sent events, resumable
// with Last-Event-ID (each event id is a cursor; see modules/deployment/event-stream.ts). The
// stream re-reads PostgreSQL whenever the publisher says the deployment changed, and ends with an
// `end` event once the deployment has finished and everything was delivered.
import type { FastifyInstance } from 'fastify';
import Type from 'typebox';
import { NotFoundError } from '../modules/common/errors.ts';
import { Cursor, readSince, type StreamEvent } from '../modules/deployment/event-stream.ts';
import { isUuid } from '../modules/common/schemas.ts';

const KEEPALIVE_MS = 15_000;

function frame(e: StreamEvent): string {
  return `id: ${e.id}\nevent: ${e.event}\ndata: ${JSON.stringify(e.data)}\n\n`;
}

export default async function deploymentEventRoutes(app: FastifyInstance) {
  // Open streams end when the coordinator stops (they would hold its HTTP server open): the
  // browser's EventSource reconnects with Last-Event-ID, to this process again or another.
  const open = new Set<() => void>();
  app.addHook('preClose', async () => {
    for (const finish of [...open]) finish();
  });

  app.get(
    '/deploy/:id/events',
    {
      schema: {
        tags: ['deployments'],
        summary: 'Server-sent events: deployment, entry, output, end (resumable with Last-Event-ID)',
        params: Type.Object({ id: Type.String() }),
        querystring: Type.Object({ last_event_id: Type.Optional(Type.String({ maxLength: 4096 })) }),
      },
    },
    async (request, reply) => {
      const { id } = request.params as { id: string };
      const em = app.services.orm.em.fork();
      if (!isUuid(id) || !(await em.execute('select 1 from deployments where id = ?', [id])).length) {
        throw new NotFoundError('Deployment not found');
      }
      const header = request.headers['last-event-id'];
      const cursor = Cursor.parse(
        (typeof header === 'string' ? header : undefined) ??
          (request.query as { last_event_id?: string }).last_event_id,
      );
      reply.hijack();
      const res = reply.raw;
      res.writeHead(200, {
        'content-type': 'text/event-stream; charset=utf-8',
        'cache-control': 'no-cache, no-transform',
        connection: 'keep-alive',
        'x-accel-buffering': 'no',
      });
      res.write('retry: 2000\n\n');

      let state: string | null = null;
      let closed = false;
      let reading = false;
      let dirty = true;
      const finish = () => {
        if (closed) return;
        closed = true;
        open.delete(finish);
        unsubscribe();
        clearInterval(keepalive);
        res.end();
      };
      const pump = async () => {
        if (reading || closed) return;
        reading = true;
        try {
          while (dirty && !closed) {
            dirty = false;
            const result = await readSince(app.services.orm.em.fork(), id, cursor, state);
            if (!result) return finish();
            state = result.state;
            for (const e of result.events) res.write(frame(e));
            if (result.ended) return finish();
          }
        } catch (err) {
          request.log.error({ err }, 'deployment event stream failed');
          finish();
        } finally {
          reading = false;
        }
      };
      const unsubscribe = app.services.events.subscribe(id, () => {
        dirty = true;
        void pump();
      });
      const keepalive = setInterval(() => res.write(': keep-alive\n\n'), KEEPALIVE_MS);
      request.raw.on('close', finish);
      open.add(finish);
      void pump();
    },
  );
}
