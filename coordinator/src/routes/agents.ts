// Agents (API.md "Agents"): admins register and revoke them; the token is shown once.
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import Type from 'typebox';
import { errors, NullableTimestamp, Ok, Uuid } from '../modules/common/schemas.ts';
import { requireActor } from '../plugins/auth.ts';
import { acceptForms, field, type FormFields, formDone, isBrowserForm } from '../plugins/forms.ts';
import { renderPage, wantsHtml } from '../plugins/negotiation.ts';
import { agentSetup, servedAgentVersion, versionOlder } from '../views/agent-setup.ts';

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

/** The "Add agent" form: labels typed as one field, separated by commas or spaces. */
function agentForm(fields: FormFields) {
  const labels = field(fields, 'labels')
    .split(/[\s,]+/)
    .filter((l) => l !== '');
  return { name: field(fields, 'name').trim(), labels };
}

export default async function agentRoutes(
  instance: FastifyInstance,
  opts: { publicUrl?: () => string } = {},
) {
  const app = instance.withTypeProvider<TypeBoxTypeProvider>();
  const agents = app.services.agents;
  acceptForms(instance);

  app.post(
    '/agents',
    {
      config: { auth: 'admin', form: agentForm },
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
      if (isBrowserForm(request)) {
        // The token exists only in this answer (it is stored as a hash): the page shows it once,
        // and is not a redirect, so the token never sits in a cookie or a URL.
        const url = opts.publicUrl?.() ?? `${request.protocol}://${request.host}`;
        return renderPage(reply.code(201), 'agent-created', {
          agent: created.agent,
          setup: agentSetup(url, created.token),
        });
      }
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
      if (wantsHtml(request)) {
        const served = await servedAgentVersion();
        return renderPage(reply, 'agents', {
          agents: list.map((a) => ({ ...a, outdated: versionOlder(a.version, served) })),
          served,
        });
      }
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

  // Revoke from the agents page (a form cannot send DELETE): the same service, then back to the list.
  app.post(
    '/agents/:id/revoke',
    {
      config: { auth: 'admin', form: true },
      schema: { hide: true, params: Type.Object({ id: Type.String() }) },
    },
    async (request, reply) => {
      const list = await agents.list();
      const name = list.find((a) => a.id === request.params.id)?.name;
      await agents.delete(request.params.id, requireActor(request));
      if (isBrowserForm(request)) return formDone(request, reply, '/agents', `Agent ${name ?? ''} revoked`);
      return { success: true as const };
    },
  );
}
