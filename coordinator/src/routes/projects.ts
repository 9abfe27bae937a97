// Projects (API.md "Projects"): admins create, change and delete them; everyone signed in reads.
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import Type from 'typebox';
import { errors, Ok } from '../modules/common/schemas.ts';
import {
  CreateProjectBody,
  ProjectJson,
  UpdateProjectBody,
  WebhookJson,
} from '../modules/project/project.schema.ts';
import { requireActor } from '../plugins/auth.ts';
import { acceptForms, formDone, isBrowserForm } from '../plugins/forms.ts';
import { renderPage, wantsHtml } from '../plugins/negotiation.ts';
import { projectForm, renderProjectPage } from './project-pages.ts';

const IdParams = Type.Object({ id: Type.String() });

export default async function projectRoutes(instance: FastifyInstance) {
  const app = instance.withTypeProvider<TypeBoxTypeProvider>();
  const projects = app.services.projects;
  acceptForms(instance);

  app.post(
    '/projects',
    {
      config: { auth: 'admin', form: (fields) => projectForm(fields) },
      schema: {
        tags: ['projects'],
        body: CreateProjectBody,
        response: { 201: Ok({ project: ProjectJson, webhook: WebhookJson }), ...errors(400, 401, 403, 409) },
      },
    },
    async (request, reply) => {
      const created = await projects.create(request.body, requireActor(request));
      if (isBrowserForm(request)) {
        const to = `/projects/${created.project.id}#webhook`;
        return formDone(request, reply, to, `Project ${created.project.name} created`);
      }
      return reply.code(201).send({ success: true, ...created });
    },
  );

  app.get(
    '/projects',
    {
      schema: {
        tags: ['projects'],
        response: { 200: Ok({ projects: Type.Array(ProjectJson) }), ...errors(401) },
      },
    },
    async (request, reply) => {
      const list = await projects.list();
      if (wantsHtml(request)) return renderPage(reply, 'projects', { projects: list });
      return { success: true as const, projects: list };
    },
  );

  app.get(
    '/projects/:id',
    {
      schema: {
        tags: ['projects'],
        params: IdParams,
        querystring: Type.Object({
          before: Type.Optional(
            Type.String({
              maxLength: 64,
              description: 'The page only: its deployment history before this deployment id',
            }),
          ),
        }),
        response: { 200: Ok({ project: ProjectJson }), ...errors(401, 404) },
      },
    },
    async (request, reply) => {
      const project = await projects.get(request.params.id);
      if (wantsHtml(request)) return renderProjectPage(app, request, reply, project, request.query.before);
      return { success: true as const, project };
    },
  );

  app.patch(
    '/projects/:id',
    {
      config: { auth: 'admin' },
      schema: {
        tags: ['projects'],
        params: IdParams,
        body: UpdateProjectBody,
        response: { 200: Ok({ project: ProjectJson }), ...errors(400, 401, 403, 404, 409) },
      },
    },
    async (request) => ({
      success: true as const,
      project: await projects.update(request.params.id, request.body, requireActor(request)),
    }),
  );

  app.delete(
    '/projects/:id',
    {
      config: { auth: 'admin' },
      schema: {
        tags: ['projects'],
        params: IdParams,
        response: { 200: Ok({}), ...errors(401, 403, 404, 409) },
      },
    },
    async (request) => {
      await projects.delete(request.params.id, requireActor(request));
      return { success: true as const };
    },
  );

  app.post(
    '/projects/:id/deploy-key/rotate',
    {
      config: { auth: 'admin', form: true },
      schema: {
        tags: ['projects'],
        params: IdParams,
        response: { 200: Ok({ project: ProjectJson }), ...errors(401, 403, 404) },
      },
    },
    async (request, reply) => {
      const project = await projects.rotateDeployKey(request.params.id, requireActor(request));
      if (isBrowserForm(request)) {
        const note = 'New deploy key: add it to the forge (and remove the old one)';
        return formDone(request, reply, `/projects/${project.id}#deploy-key`, note);
      }
      return { success: true as const, project };
    },
  );

  app.get(
    '/projects/:id/webhook',
    {
      config: { auth: 'admin' },
      schema: {
        tags: ['projects'],
        params: IdParams,
        response: { 200: Ok({ webhook: WebhookJson }), ...errors(401, 403, 404) },
      },
    },
    async (request, reply) => {
      const webhook = await projects.getWebhook(request.params.id);
      if (wantsHtml(request)) {
        const project = await projects.get(request.params.id);
        return renderPage(reply, 'project-webhook', { project, webhook });
      }
      return { success: true as const, webhook };
    },
  );

  app.post(
    '/projects/:id/webhook/rotate',
    {
      config: { auth: 'admin', form: true },
      schema: {
        tags: ['projects'],
        params: IdParams,
        response: { 200: Ok({ webhook: WebhookJson }), ...errors(401, 403, 404) },
      },
    },
    async (request, reply) => {
      const webhook = await projects.rotateWebhook(request.params.id, requireActor(request));
      if (isBrowserForm(request)) {
        const note = 'New webhook secret: reveal it below and update it in the forge';
        return formDone(request, reply, `/projects/${request.params.id}#webhook`, note);
      }
      return { success: true as const, webhook };
    },
  );
}
