// The users API (API.md "Accounts"): the list, invitations (a link, shown once, that lets one
// address register with a role while registration is closed), roles and removal. Admins only.
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import Type from 'typebox';
import { errors, NullableTimestamp, Ok, Timestamp, Uuid } from '../modules/common/schemas.ts';
import { ROLES } from '../modules/user/user.entity.ts';
import { requireActor } from '../plugins/auth.ts';
import { acceptForms, isBrowserForm } from '../plugins/forms.ts';
import { renderPage } from '../plugins/negotiation.ts';

const RoleSchema = Type.Enum([...ROLES]);
const UserJson = Type.Object({
  id: Uuid,
  email: Type.String(),
  role: RoleSchema,
  created_at: Timestamp,
  last_seen_at: NullableTimestamp,
});
const InvitationJson = Type.Object({
  id: Uuid,
  email: Type.String(),
  role: RoleSchema,
  invited_by: Type.String(),
  created_at: Timestamp,
  expires_at: Timestamp,
  accepted_at: NullableTimestamp,
});
const IdParams = Type.Object({ id: Type.String() });

export default async function userRoutes(instance: FastifyInstance) {
  const app = instance.withTypeProvider<TypeBoxTypeProvider>();
  const admin = () => app.services.userAdmin;
  acceptForms(instance);

  app.get(
    '/users',
    {
      config: { auth: 'admin' },
      schema: {
        tags: ['users'],
        response: { 200: Ok({ users: Type.Array(UserJson) }), ...errors(401, 403) },
      },
    },
    async () => ({ success: true as const, users: await admin().list() }),
  );

  app.post(
    '/users/invitations',
    {
      config: { auth: 'admin', form: true },
      schema: {
        tags: ['users'],
        body: Type.Object(
          { email: Type.String({ format: 'email', maxLength: 320 }), role: RoleSchema },
          { additionalProperties: false },
        ),
        response: {
          201: Ok({
            invitation: InvitationJson,
            url: Type.String({ description: 'The link to send; shown once' }),
          }),
          ...errors(400, 401, 403, 409),
        },
      },
    },
    async (request, reply) => {
      const result = await admin().invite(request.body, requireActor(request));
      // The settings page's form: the link is shown once, in this answer (never a redirect or cookie).
      if (isBrowserForm(request)) return renderPage(reply.code(201), 'settings-invitation', result);
      return reply.code(201).send({ success: true as const, ...result });
    },
  );

  app.get(
    '/users/invitations',
    {
      config: { auth: 'admin' },
      schema: {
        tags: ['users'],
        response: { 200: Ok({ invitations: Type.Array(InvitationJson) }), ...errors(401, 403) },
      },
    },
    async () => ({ success: true as const, invitations: await admin().invitations() }),
  );

  app.delete(
    '/users/invitations/:id',
    {
      config: { auth: 'admin' },
      schema: { tags: ['users'], params: IdParams, response: { 200: Ok({}), ...errors(401, 403, 404) } },
    },
    async (request) => {
      await admin().revokeInvitation(request.params.id, requireActor(request));
      return { success: true as const };
    },
  );

  app.patch(
    '/users/:id',
    {
      config: { auth: 'admin' },
      schema: {
        tags: ['users'],
        params: IdParams,
        body: Type.Object({ role: RoleSchema }, { additionalProperties: false }),
        response: { 200: Ok({ user: UserJson }), ...errors(400, 401, 403, 404, 409) },
      },
    },
    async (request) => ({
      success: true as const,
      user: await admin().setRole(request.params.id, request.body.role, requireActor(request)),
    }),
  );

  app.delete(
    '/users/:id',
    {
      config: { auth: 'admin' },
      schema: { tags: ['users'], params: IdParams, response: { 200: Ok({}), ...errors(401, 403, 404, 409) } },
    },
    async (request) => {
      await admin().delete(request.params.id, requireActor(request));
      return { success: true as const };
    },
  );
}
