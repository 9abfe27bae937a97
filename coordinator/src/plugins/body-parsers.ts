// Request bodies: JSON only (a JSON POST with an empty body is `{}`), under a size limit. Other
// content types get 415 — which also keeps cross-site HTML forms from posting with a cookie.
// The webhook route replaces these with a raw-bytes parser of its own (routes/webhook.ts).
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';

export default fp(
  async (app: FastifyInstance) => {
    app.removeContentTypeParser(['application/json', 'text/plain']);
    app.addContentTypeParser(
      /^application\/([\w.+-]+\+)?json(\s*;.*)?$/i,
      { parseAs: 'string' },
      (_request, body, done) => {
        const text = (body as string).trim();
        if (text === '') return done(null, {});
        try {
          done(null, JSON.parse(text));
        } catch {
          const err = new Error('Request body is not valid JSON') as Error & { statusCode: number };
          err.statusCode = 400;
          done(err, undefined);
        }
      },
    );
    // A POST with no body and no content type is an empty JSON object too.
    app.addHook('preValidation', async (request) => {
      if (request.body === undefined && request.method !== 'GET' && request.method !== 'HEAD') {
        request.body = {};
      }
    });
  },
  { name: 'body-parsers' },
);
