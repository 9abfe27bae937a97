// The settings page (GET /settings) and the form posts behind it that have no HTML-form-shaped
// JSON route (PATCH/PUT/DELETE): each calls the same service as its JSON route and redirects
// back (303) with a notice. Everyone sees their own API tokens and sessions; admins also users,
// invitations and mail settings. Form posts that fit a JSON route (POST /users/invitations,
// POST /tokens, POST /email/test) go to that route.
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import Type from 'typebox';
import { hasRole } from '../modules/common/actor.ts';
import { UnauthorizedError } from '../modules/common/errors.ts';
import { ROLES } from '../modules/user/user.entity.ts';
import { requireActor } from '../plugins/auth.ts';
import { acceptForms, field, type FormFields, formDone } from '../plugins/forms.ts';
import { renderPage } from '../plugins/negotiation.ts';

const IdParams = Type.Object({ id: Type.String({ maxLength: 64 }) });
const SCOPE_ROLE = { read: 'viewer', deploy: 'deployer', admin: 'admin' } as const;

/** The SMTP form: empty password keeps the stored one, "remove password" removes it. */
function smtpForm(fields: FormFields) {
  const port = field(fields, 'port').trim();
  const user = field(fields, 'user').trim();
  const password = field(fields, 'password');
  return {
    host: field(fields, 'host').trim(),
    ...(port ? { port: /^\d+$/.test(port) ? Number(port) : port } : {}),
    secure: field(fields, 'secure') === 'on',
    user: user || null,
    ...(field(fields, 'remove_password') === 'on' ? { password: null } : password ? { password } : {}),
    from: field(fields, 'from').trim(),
  };
}

function userIdOf(request: FastifyRequest): string {
  const actor = requireActor(request);
  if (!actor.userId) throw new UnauthorizedError();
  return actor.userId;
}

export default async function settingsPageRoutes(instance: FastifyInstance) {
  const app = instance.withTypeProvider<TypeBoxTypeProvider>();
  const { users, userAdmin, tokens, smtpSettings } = app.services;
  acceptForms(instance);

  app.get('/settings', { schema: { hide: true } }, async (request, reply) => {
    const actor = requireActor(request);
    const admin = hasRole(actor, 'admin');
    const [me, apiTokens, sessions, userList, invitations, smtp] = await Promise.all([
      users.get(userIdOf(request)),
      tokens.list(actor),
      users.sessions(userIdOf(request), request.session.get('sid') ?? null),
      admin ? userAdmin.list() : null,
      admin ? userAdmin.invitations() : null,
      admin ? smtpSettings.describe() : null,
    ]);
    const scopes = Object.entries(SCOPE_ROLE)
      .filter(([, role]) => hasRole(actor, role))
      .map(([scope]) => scope);
    return renderPage(reply, 'settings', {
      admin,
      me,
      apiTokens,
      scopes,
      sessions,
      users: userList,
      invitations,
      smtp,
      roles: ROLES,
    });
  });

  // Users (admins).
  app.post(
    '/users/:id/role',
    {
      config: { auth: 'admin', form: true },
      schema: {
        hide: true,
        params: IdParams,
        body: Type.Object({ role: Type.Enum([...ROLES]) }, { additionalProperties: false }),
      },
    },
    async (request, reply) => {
      const user = await userAdmin.setRole(request.params.id, request.body.role, requireActor(request));
      return formDone(request, reply, '/settings#users', `${user.email} is now ${user.role}`);
    },
  );

  app.post(
    '/users/:id/delete',
    { config: { auth: 'admin', form: true }, schema: { hide: true, params: IdParams } },
    async (request, reply) => {
      const list = await userAdmin.list();
      const email = list.find((u) => u.id === request.params.id)?.email ?? 'The user';
      await userAdmin.delete(request.params.id, requireActor(request));
      return formDone(request, reply, '/settings#users', `${email} removed`);
    },
  );

  app.post(
    '/users/invitations/:id/revoke',
    { config: { auth: 'admin', form: true }, schema: { hide: true, params: IdParams } },
    async (request, reply) => {
      await userAdmin.revokeInvitation(request.params.id, requireActor(request));
      return formDone(request, reply, '/settings#invitations', 'Invitation revoked');
    },
  );

  // Mail settings (admins): PUT and DELETE /settings/smtp as forms.
  app.post(
    '/settings/smtp',
    {
      config: { auth: 'admin', form: smtpForm },
      schema: {
        hide: true,
        body: Type.Object(
          {
            host: Type.String({ minLength: 1, maxLength: 255, pattern: '^[^\\s/:]+$' }),
            port: Type.Optional(Type.Integer({ minimum: 1, maximum: 65535 })),
            secure: Type.Boolean(),
            user: Type.Union([Type.String({ maxLength: 255 }), Type.Null()]),
            password: Type.Optional(Type.Union([Type.String({ maxLength: 1024 }), Type.Null()])),
            from: Type.String({ minLength: 3, maxLength: 320 }),
          },
          { additionalProperties: false },
        ),
      },
    },
    async (request, reply) => {
      const saved = await smtpSettings.save(request.body, requireActor(request));
      const note =
        saved.source === 'environment' ? ' (the environment names a server, so mail still goes there)' : '';
      return formDone(request, reply, '/settings#smtp', `Mail settings saved${note}`);
    },
  );

  app.post(
    '/settings/smtp/delete',
    { config: { auth: 'admin', form: true }, schema: { hide: true } },
    async (request, reply) => {
      await smtpSettings.clear(requireActor(request));
      return formDone(request, reply, '/settings#smtp', 'Stored mail settings removed');
    },
  );

  // Everyone's own API tokens and sessions.
  app.post(
    '/tokens/:id/revoke',
    { config: { form: true }, schema: { hide: true, params: IdParams } },
    async (request, reply) => {
      await tokens.revoke(request.params.id, requireActor(request));
      return formDone(request, reply, '/settings#tokens', 'API token revoked');
    },
  );

  app.post(
    '/sessions/:id/end',
    { config: { form: true }, schema: { hide: true, params: IdParams } },
    async (request, reply) => {
      await users.endSession(userIdOf(request), request.params.id);
      return formDone(request, reply, '/settings#sessions', 'That browser is signed out');
    },
  );
}
