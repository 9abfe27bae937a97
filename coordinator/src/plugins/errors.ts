// One place where failures become responses: every error body is `{success: false, error}`
// (the webhook route answers plain text and formats its own). Domain errors carry their status;
// Fastify's own errors (validation, 404, 413, 415, 429) keep theirs with a readable message;
// anything else is a bug: logged with its stack, answered with a generic 500. A browser navigating
// (a GET wanting HTML) gets the same message as a page (views/error.eta) instead of JSON.
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import { ConnectionException } from '@mikro-orm/core';
import { DomainError } from '../modules/common/errors.ts';
import { renderPage, wantsHtml } from './negotiation.ts';

const FASTIFY_MESSAGES: Record<string, string> = {
  FST_ERR_CTP_INVALID_MEDIA_TYPE: 'Unsupported content type: send application/json',
  FST_ERR_CTP_BODY_TOO_LARGE: 'Request body is too large',
  FST_ERR_CTP_EMPTY_JSON_BODY: 'Request body is empty',
  FST_ERR_CTP_INVALID_JSON_BODY: 'Request body is not valid JSON',
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: 'Content-Length does not match the body',
};

/** PostgreSQL unreachable, shutting down or refusing connections: the service is unavailable, not broken. */
function isDatabaseDown(error: unknown): boolean {
  if (error instanceof ConnectionException) return true;
  const code = (error as { code?: unknown } | null)?.code;
  return (
    typeof code === 'string' &&
    (['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', '57P01', '57P02', '57P03'].includes(code) ||
      code.startsWith('08'))
  );
}

export function errorMessage(error: FastifyError): { status: number; message: string } {
  if (error instanceof DomainError) return { status: error.statusCode, message: error.message };
  if (isDatabaseDown(error) || isDatabaseDown((error as { cause?: unknown }).cause)) {
    return { status: 503, message: 'Database unavailable: try again shortly' };
  }
  if (error.validation) return { status: 400, message: error.message };
  const status = error.statusCode ?? 500;
  if (status >= 500) return { status, message: 'Internal server error' };
  if (error.code && FASTIFY_MESSAGES[error.code]) return { status, message: FASTIFY_MESSAGES[error.code]! };
  if (error instanceof SyntaxError) return { status: 400, message: 'Request body is not valid JSON' };
  return { status, message: error.message };
}

/** A browser navigating (GET, HTML wanted, with its session): it gets an error page, not JSON. */
function isPageRequest(request: FastifyRequest): boolean {
  return request.method === 'GET' && wantsHtml(request) && Boolean(request.session);
}

export default fp(
  async (app: FastifyInstance) => {
    app.setErrorHandler((error: FastifyError, request: FastifyRequest, reply: FastifyReply) => {
      const { status, message } = errorMessage(error);
      if (error instanceof DomainError) request.log.info({ status, error: message }, 'request refused');
      else if (status >= 500) request.log.error({ err: error }, 'request failed');
      else request.log.info({ status, error: message }, 'request refused');
      if (reply.getHeader('content-type')?.toString().startsWith('text/plain')) {
        return reply.code(status).send(message);
      }
      if (isPageRequest(request)) return renderPage(reply.code(status), 'error', { status, message });
      return reply
        .code(status)
        .type('application/json; charset=utf-8')
        .send({ success: false, error: message });
    });
    app.setNotFoundHandler((request, reply) => {
      if (isPageRequest(request)) {
        return renderPage(reply.code(404), 'error', { status: 404, message: 'There is no such page' });
      }
      reply
        .code(404)
        .send({ success: false, error: `No route for ${request.method} ${request.url.split('?')[0]}` });
    });
  },
  { name: 'errors' },
);
