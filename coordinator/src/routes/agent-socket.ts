// GET /agent/ws: the agents' WebSocket. The upgrade is authenticated by the agent's token
// (`Authorization: Bearer dha_…`) before it happens — an unknown or revoked token gets 401 and no
// socket. Everything after the upgrade is the agent hub's (modules/agent/agent-hub.ts).
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { IAgent } from '../modules/agent/agent.entity.ts';

declare module 'fastify' {
  interface FastifyRequest {
    agent: IAgent | null;
  }
}

export default async function agentSocketRoutes(app: FastifyInstance) {
  app.decorateRequest('agent', null);
  app.get(
    '/agent/ws',
    {
      websocket: true,
      config: { auth: 'public', csrf: false },
      schema: { hide: true },
      preValidation: async (request: FastifyRequest, reply) => {
        const header = request.headers.authorization;
        const token =
          typeof header === 'string' && header.startsWith('Bearer ') ? header.slice(7).trim() : '';
        const agent = token ? await app.services.agents.authenticate(token) : null;
        if (!agent) {
          request.log.warn('agent connection refused: unknown or revoked token');
          return reply.code(401).send({ success: false, error: 'Unknown or revoked agent token' });
        }
        request.agent = agent;
      },
    },
    (socket, request) => {
      app.services.hub.accept(socket, request.agent!);
    },
  );
}
