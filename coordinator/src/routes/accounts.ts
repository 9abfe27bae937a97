// Accounts (API.md "Accounts"): register, login, logout, me — and their sign-in pages.
// /login and /register are rate limited per client IP (LOGIN_RATE_LIMIT per window).
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import Type from 'typebox';
import { errors, Ok } from '../modules/common/schemas.ts';
import { ROLES } from '../modules/user/user.entity.ts';
import { requireActor } from '../plugins/auth.ts';
import { renderPage } from '../plugins/negotiation.ts';

const UserJson = Type.Object({
  id: Type.String({ format: 'uuid' }),
  email: Type.String(),
  role: Type.Enum(ROLES),
});
const Credentials = {
  email: Type.String({ format: 'email', maxLength: 320 }),
  password: Type.String({ minLength: 8, maxLength: 1024 }),
};

/** Where to go after signing in: a path on this site, never another origin (resolved, not pattern-matched). */
export function sameSitePath(next: unknown): string {
  if (typeof next !== 'string' || !next.startsWith('/')) return '/';
  const base = 'http://deckhand.invalid';
  try {
    const url = new URL(next, base);
    return url.origin === base ? url.pathname + url.search + url.hash : '/';
  } catch {
    return '/';
  }
}

function client(request: FastifyRequest) {
  const ua = request.headers['user-agent'];
  return { ip: request.ip ?? null, userAgent: typeof ua === 'string' ? ua : null };
}

export default async function accountRoutes(
  instance: FastifyInstance,
  opts: { rateLimit: { max: number; windowMs: number } },
) {
  const app = instance.withTypeProvider<TypeBoxTypeProvider>();
  const rateLimit = {
    max: opts.rateLimit.max,
    timeWindow: opts.rateLimit.windowMs,
    errorResponseBuilder: (_req: FastifyRequest, ctx: { after: string; statusCode: number }) => {
      const err = new Error(`Too many requests: try again in ${ctx.after}`) as Error & { statusCode: number };
      err.statusCode = ctx.statusCode;
      return err;
    },
  };

  app.post(
    '/register',
    {
      config: { auth: 'public', rateLimit },
      schema: {
        tags: ['accounts'],
        body: Type.Object({ ...Credentials, setup_token: Type.Optional(Type.String({ maxLength: 256 })) }),
        response: { 201: Ok({ user: UserJson }), ...errors(400, 403, 429) },
      },
    },
    async (request, reply) => {
      const { user, sessionId } = await app.services.users.register(request.body, client(request));
      request.session.set('sid', sessionId);
      return reply.code(201).send({ success: true, user });
    },
  );

  app.post(
    '/login',
    {
      config: { auth: 'public', rateLimit },
      schema: {
        tags: ['accounts'],
        body: Type.Object({
          email: Type.String({ maxLength: 320 }),
          password: Type.String({ maxLength: 1024 }),
        }),
        response: { 200: Ok({ user: UserJson }), ...errors(400, 401, 429) },
      },
    },
    async (request) => {
      const { user, sessionId } = await app.services.users.login(
        request.body.email,
        request.body.password,
        client(request),
      );
      request.session.set('sid', sessionId);
      return { success: true as const, user };
    },
  );

  app.post(
    '/logout',
    { config: { auth: 'public' }, schema: { tags: ['accounts'], response: { 200: Ok({}) } } },
    async (request) => {
      const sid = request.session.get('sid');
      if (sid) await app.services.users.logout(sid);
      request.session.delete();
      return { success: true as const };
    },
  );

  app.get(
    '/me',
    { schema: { tags: ['accounts'], response: { 200: Ok({ user: UserJson }), ...errors(401) } } },
    async (request) => {
      const actor = requireActor(request);
      const user = await app.services.users.get(actor.userId!);
      // Through a token, the role is the token's (never more than the user's).
      return { success: true as const, user: { ...user, role: actor.role! } };
    },
  );

  for (const page of ['login', 'register'] as const) {
    app.get(`/${page}`, { config: { auth: 'public' }, schema: { hide: true } }, async (request, reply) => {
      const next = (request.query as { next?: unknown }).next;
      return renderPage(reply, 'sign-in', { mode: page, next: sameSitePath(next) });
    });
  }
}
