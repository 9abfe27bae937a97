// A user's own sign-in sessions: where and when each was used, and "sign out that browser".
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import Type from 'typebox';
import { UnauthorizedError } from '../modules/common/errors.ts';
import { errors, Ok, Timestamp } from '../modules/common/schemas.ts';
import { requireActor } from '../plugins/auth.ts';

const NullableString = Type.Union([Type.String(), Type.Null()]);
const SessionJson = Type.Object({
  id: Type.String(),
  created_at: Timestamp,
  last_seen_at: Timestamp,
  expires_at: Timestamp,
  ip: NullableString,
  user_agent: NullableString,
  current: Type.Boolean(),
});

export default async function sessionRoutes(instance: FastifyInstance) {
  const app = instance.withTypeProvider<TypeBoxTypeProvider>();
  const userId = (request: Parameters<typeof requireActor>[0]) => {
    const actor = requireActor(request);
    if (!actor.userId) throw new UnauthorizedError();
    return actor.userId;
  };

  app.get(
    '/sessions',
    {
      schema: {
        tags: ['accounts'],
        response: { 200: Ok({ sessions: Type.Array(SessionJson) }), ...errors(401) },
      },
    },
    async (request) => ({
      success: true as const,
      sessions: await app.services.users.sessions(userId(request), request.session?.get('sid') ?? null),
    }),
  );

  app.delete(
    '/sessions/:id',
    {
      schema: {
        tags: ['accounts'],
        params: Type.Object({ id: Type.String({ maxLength: 64 }) }),
        response: { 200: Ok({}), ...errors(401, 404) },
      },
    },
    async (request) => {
      await app.services.users.endSession(userId(request), request.params.id);
      return { success: true as const };
    },
  );
}
