// The agent as one JavaScript file for installers (`deckhand agents install`) and for agents that
// update themselves: GET /agent/download, and GET /agent/version to learn what it would get.
// Public: it is the open-source agent with nothing of this installation in it.
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import Type from 'typebox';
import { PROTOCOL_VERSION } from '@deckhand/protocol';
import { AgentBundle, AgentBundleUnavailable } from '../modules/agent-bundle/agent-bundle.ts';
import { DomainError } from '../modules/common/errors.ts';
import { errors, Ok } from '../modules/common/schemas.ts';

class BundleUnavailableError extends DomainError {
  constructor(message: string) {
    super(503, message);
  }
}

export default async function agentDownloadRoutes(instance: FastifyInstance, opts: { bundle?: AgentBundle }) {
  const app = instance.withTypeProvider<TypeBoxTypeProvider>();
  const bundle = opts.bundle ?? new AgentBundle();
  const load = async () => {
    try {
      return await bundle.get();
    } catch (err) {
      if (err instanceof AgentBundleUnavailable) {
        app.log.error({ err }, 'agent bundle unavailable');
        throw new BundleUnavailableError(err.message);
      }
      throw err;
    }
  };

  app.get(
    '/agent/version',
    {
      config: { auth: 'public' },
      schema: {
        tags: ['agents'],
        summary: 'The agent this coordinator serves: version, protocol, SHA-256 of the file',
        response: {
          200: Ok({ version: Type.String(), protocol_version: Type.Integer(), sha256: Type.String() }),
          ...errors(503),
        },
      },
    },
    async () => {
      const b = await load();
      return {
        success: true as const,
        version: b.version,
        protocol_version: PROTOCOL_VERSION,
        sha256: b.sha256,
      };
    },
  );

  app.get(
    '/agent/download',
    {
      config: { auth: 'public' },
      schema: {
        tags: ['agents'],
        summary: 'The agent as one JavaScript file for Node 22+ (deckhand-agent.js)',
        response: {
          200: Type.Any({
            description: 'deckhand-agent.js (text/javascript), with its version in x-deckhand-agent-version',
          }),
          ...errors(503),
        },
      },
    },
    async (_request, reply) => {
      const b = await load();
      return reply
        .header('content-type', 'text/javascript; charset=utf-8')
        .header('content-disposition', 'attachment; filename="deckhand-agent.js"')
        .header('x-deckhand-agent-version', b.version)
        .header('x-deckhand-protocol-version', String(PROTOCOL_VERSION))
        .header('x-content-sha256', b.sha256)
        .header('cache-control', 'no-cache')
        .send(b.code);
    },
  );
}
