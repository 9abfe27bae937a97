// POST /webhook/:projectId: the forge's push. Authenticated by HMAC over the raw body, so this
// route reads raw bytes of any content type (up to WEBHOOK_BODY_LIMIT_BYTES) and answers in
// plain text, errors included. The decision itself lives in modules/webhook/webhook.service.ts.
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyError, FastifyInstance } from 'fastify';
import Type from 'typebox';
import { errorMessage } from '../plugins/errors.ts';

export default async function webhookRoutes(instance: FastifyInstance, opts: { bodyLimit: number }) {
  const app = instance.withTypeProvider<TypeBoxTypeProvider>();
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', { parseAs: 'buffer', bodyLimit: opts.bodyLimit }, (_request, body, done) => {
    done(null, body);
  });
  app.setErrorHandler((error: FastifyError, request, reply) => {
    const { status, message } = errorMessage(error);
    if (status >= 500) request.log.error({ err: error }, 'webhook failed');
    return reply
      .code(status)
      .type('text/plain; charset=utf-8')
      .send(status === 400 ? 'No body' : message);
  });

  app.post(
    '/webhook/:projectId',
    {
      bodyLimit: opts.bodyLimit,
      config: { auth: 'public', csrf: false },
      schema: {
        tags: ['webhook'],
        summary: 'Receive a push from a git forge (plain-text answers)',
        params: Type.Object({ projectId: Type.String() }),
      },
    },
    async (request, reply) => {
      const raw = Buffer.isBuffer(request.body) ? request.body : Buffer.alloc(0);
      const result = await app.services.webhooks.receive(request.params.projectId, request.headers, raw);
      request.log.info(
        {
          project: request.params.projectId,
          status: result.status,
          outcome: result.body,
          deployment: result.deploymentId,
        },
        'webhook delivery',
      );
      return reply.code(result.status).type('text/plain; charset=utf-8').send(result.body);
    },
  );
}
