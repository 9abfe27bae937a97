// A project's outgoing webhooks (admins add and delete them; the secret is shown once) and the
// record of its notifications — mails, webhook deliveries, commit statuses — with every attempt.
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import Type from 'typebox';
import { errors, Ok } from '../modules/common/schemas.ts';
import {
  CreateHookBody,
  HookJson,
  NotificationDeliveryJson,
} from '../modules/notification/notification.schema.ts';
import { requireActor } from '../plugins/auth.ts';
import { acceptForms, field, fieldList, type FormFields, isBrowserForm } from '../plugins/forms.ts';
import { renderPage } from '../plugins/negotiation.ts';

const ProjectParams = Type.Object({ id: Type.String() });
const HookParams = Type.Object({ id: Type.String(), hookId: Type.String() });
const Limit = Type.Integer({ minimum: 1, maximum: 200, default: 50 });

/** The project page's "add outgoing webhook" form: no event ticked means every event. */
function hookForm(fields: FormFields) {
  const events = fieldList(fields, 'events');
  return { url: field(fields, 'url').trim(), ...(events.length ? { events } : {}) };
}

export default async function projectHookRoutes(instance: FastifyInstance) {
  const app = instance.withTypeProvider<TypeBoxTypeProvider>();
  const notifications = app.services.notifications;
  acceptForms(instance);

  app.get(
    '/projects/:id/hooks',
    {
      schema: {
        tags: ['notifications'],
        params: ProjectParams,
        response: { 200: Ok({ hooks: Type.Array(HookJson) }), ...errors(401, 404) },
      },
    },
    async (request) => ({
      success: true as const,
      hooks: await notifications.listHooks(request.params.id),
    }),
  );

  app.post(
    '/projects/:id/hooks',
    {
      config: { auth: 'admin', form: hookForm },
      schema: {
        tags: ['notifications'],
        params: ProjectParams,
        body: CreateHookBody,
        response: {
          201: Ok({
            hook: HookJson,
            secret: Type.String({
              description: 'whsec_…: the signing key (Standard Webhooks), shown only in this answer',
            }),
          }),
          ...errors(400, 401, 403, 404, 409),
        },
      },
    },
    async (request, reply) => {
      const created = await notifications.createHook(request.params.id, request.body, requireActor(request));
      if (isBrowserForm(request)) {
        // The secret, once, on a page of its own (as the JSON answer shows it once).
        const project = await app.services.projects.get(request.params.id);
        return renderPage(reply, 'project-hook-created', { project, ...created });
      }
      return reply.code(201).send({ success: true, ...created });
    },
  );

  app.delete(
    '/projects/:id/hooks/:hookId',
    {
      config: { auth: 'admin' },
      schema: {
        tags: ['notifications'],
        params: HookParams,
        response: { 200: Ok({}), ...errors(401, 403, 404) },
      },
    },
    async (request) => {
      await notifications.deleteHook(request.params.id, request.params.hookId, requireActor(request));
      return { success: true as const };
    },
  );

  app.get(
    '/projects/:id/hooks/:hookId/deliveries',
    {
      schema: {
        tags: ['notifications'],
        params: HookParams,
        querystring: Type.Object({ limit: Limit }),
        response: { 200: Ok({ deliveries: Type.Array(NotificationDeliveryJson) }), ...errors(401, 404) },
      },
    },
    async (request) => ({
      success: true as const,
      deliveries: await notifications.hookDeliveries(
        request.params.id,
        request.params.hookId,
        request.query.limit,
      ),
    }),
  );

  app.get(
    '/projects/:id/notifications',
    {
      schema: {
        tags: ['notifications'],
        params: ProjectParams,
        querystring: Type.Object({
          limit: Limit,
          channel: Type.Optional(Type.Enum(['email', 'webhook', 'commit_status'])),
        }),
        response: { 200: Ok({ notifications: Type.Array(NotificationDeliveryJson) }), ...errors(401, 404) },
      },
    },
    async (request) => ({
      success: true as const,
      notifications: await notifications.projectDeliveries(
        request.params.id,
        request.query.limit,
        request.query.channel,
      ),
    }),
  );
}
