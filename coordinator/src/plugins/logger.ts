// Structured logs (pino) that never carry credentials: request headers that hold them, and any
// field named like a secret, are censored wherever they appear.
import type { FastifyRequest } from 'fastify';
import type { LoggerOptions } from 'pino';

export const REDACTED_PATHS = [
  'req.headers.authorization',
  'req.headers.cookie',
  'req.headers["x-hub-signature-256"]',
  'req.headers["x-gitea-signature"]',
  'req.headers["x-gogs-signature"]',
  'req.headers["x-gitlab-token"]',
  'res.headers["set-cookie"]',
  '*.password',
  '*.token',
  '*.secret',
  '*.secrets',
  '*.private_key',
  '*.setup_token',
  '*.webhook_secret',
];

export function loggerOptions(level: string): LoggerOptions {
  return {
    level,
    redact: { paths: REDACTED_PATHS, censor: '[redacted]' },
    serializers: {
      req(request: FastifyRequest) {
        // The query string can hold tokens in some integrations: log the path only.
        return { method: request.method, url: request.url.split('?')[0], remoteAddress: request.ip };
      },
    },
  };
}
