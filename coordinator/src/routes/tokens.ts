// API tokens (API.md "API tokens"): create (shown once), list (without values), revoke.
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import Type from 'typebox';
import { requireActor } from '../plugins/auth.ts';
import { acceptForms, field, type FormFields, isBrowserForm } from '../plugins/forms.ts';
import { renderPage } from '../plugins/negotiation.ts';
import { errors, NullableTimestamp, Ok, Timestamp, Uuid } from '../modules/common/schemas.ts';
import { TOKEN_SCOPES } from '../modules/token/api-token.entity.ts';

const ApiTokenJson = Type.Object({
  id: Uuid,
  name: Type.String(),
  scope: Type.Enum(TOKEN_SCOPES),
  expires_at: NullableTimestamp,
  created_at: Timestamp,
  last_used_at: NullableTimestamp,
});

/** The settings page's form: an expiry date (no time) means the end of that day, UTC. */
function tokenForm(fields: FormFields) {
  const expires = field(fields, 'expires_at').trim();
  return {
    name: field(fields, 'name').trim(),
    scope: field(fields, 'scope'),
    ...(expires
      ? { expires_at: /^\d{4}-\d{2}-\d{2}$/.test(expires) ? `${expires}T23:59:59Z` : expires }
      : {}),
  };
}

export default async function tokenRoutes(instance: FastifyInstance) {
  const app = instance.withTypeProvider<TypeBoxTypeProvider>();
  const tokens = app.services.tokens;
  acceptForms(instance);

  app.post(
    '/tokens',
    {
      config: { form: tokenForm },
      schema: {
        tags: ['tokens'],
        body: Type.Object({
          name: Type.String({ minLength: 1, maxLength: 100 }),
          scope: Type.Enum(TOKEN_SCOPES),
          expires_at: Type.Optional(Type.Union([Type.String({ format: 'date-time' }), Type.Null()])),
        }),
        response: { 201: Ok({ api_token: ApiTokenJson, token: Type.String() }), ...errors(400, 401, 403) },
      },
    },
    async (request, reply) => {
      const created = await tokens.create(request.body, requireActor(request));
      // The token is shown once, in this answer (never a redirect or cookie).
      if (isBrowserForm(request)) return renderPage(reply.code(201), 'settings-token', created);
      return reply.code(201).send({ success: true, ...created });
    },
  );

  app.get(
    '/tokens',
    {
      schema: {
        tags: ['tokens'],
        response: { 200: Ok({ api_tokens: Type.Array(ApiTokenJson) }), ...errors(401) },
      },
    },
    async (request) => ({ success: true as const, api_tokens: await tokens.list(requireActor(request)) }),
  );

  app.delete(
    '/tokens/:id',
    {
      schema: {
        tags: ['tokens'],
        params: Type.Object({ id: Type.String() }),
        response: { 200: Ok({}), ...errors(401, 404) },
      },
    },
    async (request) => {
      await tokens.revoke(request.params.id, requireActor(request));
      return { success: true as const };
    },
  );
}
