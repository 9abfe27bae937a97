// Agents (API.md "Agents"): admins register and revoke them; the token is shown once.
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import Type from 'typebox';
import { errors, NullableTimestamp, Ok, Uuid } from '../modules/common/schemas.ts';
import { requireActor } from '../plugins/auth.ts';
import { renderPage, wantsHtml } from '../plugins/negotiation.ts';

const Name = Type.String({ minLength: 1, maxLength: 100, pattern: '^[A-Za-z0-9][A-Za-z0-9._-]*$' });
const Label = Type.String({ minLength: 1, maxLength: 63, pattern: '^[A-Za-z0-9][A-Za-z0-9_.:-]*$' });
const AgentJson = Type.Object({
  id: Uuid,
  name: Type.String(),
  labels: Type.Array(Type.String()),
  online: Type.Boolean(),
  version: Type.Union([Type.String(), Type.Null()]),
  last_seen_at: NullableTimestamp,
});

export default async function agentRoutes(instance: FastifyInstance) {
  const app = instance.withTypeProvider<TypeBoxTypeProvider>();
  const agents = app.services.agents;

  app.post(
    '/agents',
    {
      config: { auth: 'admin' },
      schema: {
        tags: ['agents'],
        body: Type.Object({ name: Name, labels: Type.Optional(Type.Array(Label, { maxItems: 50 })) }),
        response: {
          201: Ok({
            agent: Type.Object({ id: Uuid, name: Type.String(), labels: Type.Array(Type.String()) }),
            token: Type.String(),
          }),
          ...errors(400, 401, 403, 409),
        },
      },
    },
    async (request, reply) => {
      const created = await agents.create(request.body, requireActor(request));
      return reply.code(201).send({ success: true, ...created });
    },
  );

  app.get(
    '/agents',
    {
      schema: { tags: ['agents'], response: { 200: Ok({ agents: Type.Array(AgentJson) }), ...errors(401) } },
    },
    async (request, reply) => {
      const list = await agents.list();
      if (wantsHtml(request)) return renderPage(reply, 'agents', { agents: list });
      return { success: true as const, agents: list };
    },
  );

  app.delete(
    '/agents/:id',
    {
      config: { auth: 'admin' },
      schema: {
        tags: ['agents'],
        params: Type.Object({ id: Type.String() }),
        response: { 200: Ok({}), ...errors(401, 403, 404) },
      },
    },
    async (request) => {
      await agents.delete(request.params.id, requireActor(request));
      return { success: true as const };
    },
  );
}
