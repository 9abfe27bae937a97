// A project's outgoing webhooks (admins add and delete them; the secret is shown once) and the
// record of its notifications — mails, webhook deliveries, commit statuses — with every attempt.
// A browser gets the record as a page at the same URLs (views/project-notifications.eta).
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance, FastifyReply } from 'fastify';
import Type from 'typebox';
import { errors, Ok } from '../modules/common/schemas.ts';
import {
  CreateHookBody,
  HookJson,
  NotificationDeliveryJson,
} from '../modules/notification/notification.schema.ts';
import { requireActor } from '../plugins/auth.ts';
import { acceptForms, field, fieldList, type FormFields, isBrowserForm } from '../plugins/forms.ts';
import { renderPage, wantsHtml } from '../plugins/negotiation.ts';
import { CHANNEL_FILTERS, noticeRows } from '../views/notification-view.ts';

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

  /** The record as a page: the project's, one channel's, or one webhook's (`hook`). */
  const noticesPage = async (
    reply: FastifyReply,
    projectId: string,
    notices: NotificationDeliveryJson[],
    opts: { limit: number; channel?: string; hook?: HookJson },
  ) => {
    const [project, hooks] = await Promise.all([
      app.services.projects.get(projectId),
      notifications.listHooks(projectId),
    ]);
    const more = new URLSearchParams({ limit: '200', ...(opts.channel ? { channel: opts.channel } : {}) });
    return renderPage(reply, 'project-notifications', {
      project: { id: project.id, name: project.name },
      hook: opts.hook ?? null,
      channel: opts.channel ?? null,
      channelNone: CHANNEL_FILTERS.find((f) => f.channel === opts.channel)?.none ?? '',
      filters: CHANNEL_FILTERS,
      notices: noticeRows(project.id, notices, hooks),
      limit: opts.limit,
      more: notices.length >= opts.limit,
      moreHref: `${reply.request.url.split('?')[0]}?${more.toString()}`,
    });
  };

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
    async (request, reply) => {
      const deliveries = await notifications.hookDeliveries(
        request.params.id,
        request.params.hookId,
        request.query.limit,
      );
      if (wantsHtml(request)) {
        const hook = (await notifications.listHooks(request.params.id)).find(
          (h) => h.id === request.params.hookId,
        );
        return noticesPage(reply, request.params.id, deliveries, { limit: request.query.limit, hook });
      }
      return { success: true as const, deliveries };
    },
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
    async (request, reply) => {
      const { limit, channel } = request.query;
      const list = await notifications.projectDeliveries(request.params.id, limit, channel);
      if (wantsHtml(request)) return noticesPage(reply, request.params.id, list, { limit, channel });
      return { success: true as const, notifications: list };
    },
  );
}
