// Accounts (API.md "Accounts"): register, login, logout, me — and their sign-in pages.
// /login and /register are rate limited per client IP (LOGIN_RATE_LIMIT per window).
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import Type from 'typebox';
import { errors, Ok } from '../modules/common/schemas.ts';
import { ROLES } from '../modules/user/user.entity.ts';
import { isLoopbackHost } from '../config.ts';
import { hasUsers } from '../modules/dashboard/dashboard.repository.ts';
import { requireActor } from '../plugins/auth.ts';
import { acceptForms, field, type FormFields, isBrowserForm } from '../plugins/forms.ts';
import { renderPage, sameSitePath, wantsHtml } from '../plugins/negotiation.ts';

export { sameSitePath };

const UserJson = Type.Object({
  id: Type.String({ format: 'uuid' }),
  email: Type.String(),
  role: Type.Enum(ROLES),
});
const Credentials = {
  email: Type.String({ format: 'email', maxLength: 320 }),
  password: Type.String({ minLength: 8, maxLength: 1024 }),
};

/** The sign-in forms' fields as the JSON bodies (an empty setup token is no setup token). */
function credentials(fields: FormFields) {
  const token = field(fields, 'setup_token').trim();
  const invitation = field(fields, 'invitation').trim();
  return {
    email: field(fields, 'email').trim(),
    password: field(fields, 'password'),
    ...(token ? { setup_token: token } : {}),
    ...(invitation ? { invitation } : {}),
  };
}

/** The invitation token of an invitation link, when it looks like one. */
function invitationOf(query: unknown): string | null {
  const value = (query as { invitation?: unknown } | null)?.invitation;
  return typeof value === 'string' && /^[A-Za-z0-9_-]{1,256}$/.test(value) ? value : null;
}

/** After signing in from a form: a fresh CSRF token for the new session, then where `next` says. */
function signedIn(request: FastifyRequest, reply: FastifyReply) {
  request.session.set('csrf', undefined);
  return reply.redirect(sameSitePath(request.formFields?.next), 303);
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
  acceptForms(instance);
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
      config: { auth: 'public', rateLimit, form: credentials },
      schema: {
        tags: ['accounts'],
        body: Type.Object({
          ...Credentials,
          setup_token: Type.Optional(Type.String({ maxLength: 256 })),
          invitation: Type.Optional(Type.String({ maxLength: 256, description: 'From an invitation link' })),
        }),
        response: { 201: Ok({ user: UserJson }), ...errors(400, 403, 429) },
      },
    },
    async (request, reply) => {
      const { user, sessionId } = await app.services.users.register(request.body, client(request));
      request.session.set('sid', sessionId);
      if (isBrowserForm(request)) return signedIn(request, reply);
      return reply.code(201).send({ success: true, user });
    },
  );

  app.post(
    '/login',
    {
      config: { auth: 'public', rateLimit, form: credentials },
      schema: {
        tags: ['accounts'],
        body: Type.Object({
          email: Type.String({ maxLength: 320 }),
          password: Type.String({ maxLength: 1024 }),
        }),
        response: { 200: Ok({ user: UserJson }), ...errors(400, 401, 429) },
      },
    },
    async (request, reply) => {
      const { user, sessionId } = await app.services.users.login(
        request.body.email,
        request.body.password,
        client(request),
      );
      request.session.set('sid', sessionId);
      if (isBrowserForm(request)) return signedIn(request, reply);
      return { success: true as const, user };
    },
  );

  app.post(
    '/logout',
    { config: { auth: 'public', form: true }, schema: { tags: ['accounts'], response: { 200: Ok({}) } } },
    async (request, reply) => {
      const sid = request.session.get('sid');
      if (sid) await app.services.users.logout(sid);
      request.session.delete();
      if (isBrowserForm(request)) return reply.redirect('/login', 303);
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

  // The sign-in pages. Before the first account exists both offer to create the admin account
  // (with the setup token field when the coordinator listens beyond loopback).
  for (const page of ['login', 'register'] as const) {
    app.get(`/${page}`, { config: { auth: 'public' }, schema: { hide: true } }, async (request, reply) => {
      const next = sameSitePath((request.query as { next?: unknown }).next);
      if (request.actor && wantsHtml(request)) return reply.redirect(next, 303);
      const firstRun = !(await hasUsers(app.services.orm.em.fork()));
      const address = app.server.address();
      const listening = typeof address === 'object' && address ? address.address : '127.0.0.1';
      return renderPage(reply, 'sign-in', {
        mode: firstRun ? 'register' : page,
        firstRun,
        setupToken: firstRun && !isLoopbackHost(listening),
        next,
        // From an invitation link (/register?invitation=…): posted back with the form.
        invitation: invitationOf(request.query),
      });
    });
  }
}
