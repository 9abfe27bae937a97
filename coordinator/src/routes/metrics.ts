// GET /metrics: Prometheus' text format (modules/metrics/metrics.ts). Served to whoever presents
// METRICS_TOKEN as a Bearer token, or — when no token is configured — to loopback clients only
// (the address of the connection itself, not a forwarded one).
import { timingSafeEqual } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import { ForbiddenError, UnauthorizedError } from '../modules/common/errors.ts';

const LOOPBACK = /^(127\.|::1$|::ffff:127\.)/;

function sameSecret(given: string, expected: string): boolean {
  const a = Buffer.from(given);
  const b = Buffer.from(expected);
  return a.length === b.length && timingSafeEqual(a, b);
}

export default async function metricsRoutes(app: FastifyInstance, opts: { token: string | undefined }) {
  app.get(
    '/metrics',
    // Public to the session/API-token check: this route has its own credentials.
    { config: { auth: 'public', csrf: false }, schema: { hide: true } },
    async (request, reply) => {
      if (opts.token) {
        const header = request.headers.authorization ?? '';
        const given = /^Bearer\s+(\S+)\s*$/i.exec(header)?.[1] ?? '';
        if (!sameSecret(given, opts.token)) throw new UnauthorizedError('Metrics need the METRICS_TOKEN');
      } else if (!LOOPBACK.test(request.socket.remoteAddress ?? '')) {
        throw new ForbiddenError('Metrics are served to loopback clients only unless METRICS_TOKEN is set');
      }
      const registry = app.services.metrics.registry;
      return reply.type(registry.contentType).send(await registry.metrics());
    },
  );
}
