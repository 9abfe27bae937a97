// Deployments (the spec's POST /deploy and GET /deploy/:id, API.md "Deployments"): trigger,
// read one with its logs and project, list. Triggering stores the deployment and returns.
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import Type from 'typebox';
import { BadRequestError, NotFoundError } from '../modules/common/errors.ts';
import { errors, isUuid, NullableTimestamp, Ok, Timestamp, Uuid } from '../modules/common/schemas.ts';
import { DEPLOYMENT_STATUSES, TRIGGERS } from '../modules/deployment/deployment.entity.ts';
import { BranchName } from '../modules/project/project.schema.ts';
import { Cursor, readSince } from '../modules/deployment/event-stream.ts';
import { requireActor } from '../plugins/auth.ts';
import { acceptForms, field, type FormFields, formDone, isBrowserForm } from '../plugins/forms.ts';
import { renderPage, sendJsonText, wantsHtml } from '../plugins/negotiation.ts';
import { buildLogView } from '../views/deployment-log.ts';
import { renderDeploymentsPage } from './pages.ts';

const DeploymentJson = Type.Object({
  id: Uuid,
  proj_id: Uuid,
  started_at: Timestamp,
  finished_at: NullableTimestamp,
  status: Type.Enum(DEPLOYMENT_STATUSES),
  commit: Type.Union([Type.String(), Type.Null()]),
  branch: Type.String(),
  trigger: Type.Enum(TRIGGERS),
  triggered_by: Type.String(),
  reason: Type.Union([Type.String(), Type.Null()]),
  hosts: Type.Array(Type.String()),
});
const LogEntryJson = Type.Object({
  id: Uuid,
  deploy_id: Uuid,
  host: Type.String(),
  cmd: Type.String(),
  log: Type.String(),
  success: Type.Boolean(),
  status: Type.String(),
  exit_code: Type.Union([Type.Integer(), Type.Null()]),
  started_at: Timestamp,
  finished_at: NullableTimestamp,
});
const EmbeddedProject = Type.Object({
  id: Uuid,
  name: Type.String(),
  forge_url: Type.String(),
  branch_name: Type.String(),
});

/**
 * The Deploy form (project page): an empty commit means the branch head. Only a full SHA: the
 * agents check out exactly the commit they are sent, and cannot take an abbreviated one.
 */
function deployForm(fields: FormFields) {
  const commit = field(fields, 'commit').trim().toLowerCase();
  if (commit && !/^[0-9a-f]{40}([0-9a-f]{24})?$/.test(commit)) {
    throw new BadRequestError(
      'commit: give the full commit SHA (40 hex digits), or leave it empty for the branch head',
    );
  }
  return { projectId: field(fields, 'projectId'), ...(commit ? { commit } : {}) };
}

export default async function deploymentRoutes(instance: FastifyInstance) {
  const app = instance.withTypeProvider<TypeBoxTypeProvider>();
  const { deployments, projects } = app.services;
  acceptForms(instance);

  app.post(
    '/deploy',
    {
      config: { auth: 'deployer', form: deployForm },
      attachValidation: true,
      schema: {
        tags: ['deployments'],
        body: Type.Object({
          projectId: Uuid,
          commit: Type.Optional(Type.String({ pattern: '^[0-9a-fA-F]{7,64}$' })),
          branch: Type.Optional(BranchName),
        }),
        response: { 200: Ok({ deployId: Uuid }), ...errors(400, 401, 403, 404) },
      },
    },
    async (request, reply) => {
      if (request.validationError) {
        const body = request.body as Record<string, unknown> | null;
        const id = body && typeof body === 'object' ? body.projectId : undefined;
        if (!isUuid(id)) {
          throw new BadRequestError('projectId must be a UUID');
        }
        throw new BadRequestError(request.validationError.message);
      }
      const project = await projects.find(request.body.projectId);
      if (!project) throw new NotFoundError('Project not found');
      const actor = requireActor(request);
      const deployment = await deployments.trigger({
        project,
        trigger: actor.type === 'token' ? 'api' : 'manual',
        actor,
        commit: request.body.commit ?? null,
        branch: request.body.branch ?? null,
      });
      if (isBrowserForm(request)) return reply.redirect(`/deploy/${deployment.id}`, 303);
      return { success: true as const, deployId: deployment.id };
    },
  );

  app.get(
    '/deploy/:id',
    {
      schema: {
        tags: ['deployments'],
        params: Type.Object({ id: Type.String() }),
        response: {
          200: Ok({ deployment: DeploymentJson, logs: Type.Array(LogEntryJson), project: EmbeddedProject }),
          ...errors(401, 404),
        },
      },
    },
    async (request, reply) => {
      if (wantsHtml(request)) {
        const detail = await deployments.get(request.params.id);
        // The log as the live stream would send it so far; the page's script continues from there.
        const id = detail.deployment.id;
        const stream = await readSince(app.services.orm.em.fork(), id, new Cursor(), null);
        const log = buildLogView(detail.deployment.hosts, stream?.events ?? [], stream?.ended ?? true);
        const canRollBack = await deployments.rollbackOffered(detail.deployment);
        return renderPage(reply, 'deployment', { ...detail, log, canRollBack });
      }
      // Already JSON text (a finished deployment's logs are kept serialised): sent as it is.
      return sendJsonText(reply, await deployments.getJson(request.params.id));
    },
  );

  // Cancel, redeploy, rollback: each answers with the deployment it acted on or created (a
  // browser's form post: its page).
  const done = { cancel: 'Cancel requested', redeploy: 'Redeploy queued', rollback: 'Rollback queued' };
  const actions = {
    cancel: (id: string, actor: ReturnType<typeof requireActor>) => deployments.cancel(id, actor),
    redeploy: (id: string, actor: ReturnType<typeof requireActor>) => deployments.redeploy(id, actor),
    rollback: (id: string, actor: ReturnType<typeof requireActor>) => deployments.rollback(id, actor),
  } as const;
  for (const [action, run] of Object.entries(actions)) {
    app.post(
      `/deploy/:id/${action}`,
      {
        config: { auth: 'deployer', form: true },
        schema: {
          tags: ['deployments'],
          params: Type.Object({ id: Type.String() }),
          response: {
            200: Ok({ deployId: Uuid, deployment: DeploymentJson }),
            ...errors(401, 403, 404, 409),
          },
        },
      },
      async (request, reply) => {
        const deployment = await run(request.params.id, requireActor(request));
        if (isBrowserForm(request)) {
          return formDone(request, reply, `/deploy/${deployment.id}`, done[action as keyof typeof done]);
        }
        return { success: true as const, deployId: deployment.id, deployment };
      },
    );
  }

  // The releases a project can roll back to (modules/deployment keptReleases): the successful
  // builds among the newest `releases.keep`, which the hosts still keep, and the one live now.
  app.get(
    '/projects/:id/releases',
    {
      schema: {
        tags: ['deployments'],
        params: Type.Object({ id: Type.String() }),
        response: {
          200: Ok({
            live: Type.Union([Uuid, Type.Null()], { description: 'The deployment whose release is current' }),
            releases: Type.Array(DeploymentJson, { description: 'Newest first; empty without releases' }),
          }),
          ...errors(401, 404),
        },
      },
    },
    async (request) => {
      const project = await projects.get(request.params.id);
      if (!project.releases) return { success: true as const, live: null, releases: [] };
      const { live, kept } = await deployments.keptReleases(project.id, project.releases.keep);
      return { success: true as const, live, releases: kept };
    },
  );

  app.get(
    '/deployments',
    {
      schema: {
        tags: ['deployments'],
        querystring: Type.Object({
          project_id: Type.Optional(Uuid),
          status: Type.Optional(Type.Enum(DEPLOYMENT_STATUSES)),
          limit: Type.Integer({ minimum: 1, maximum: 200, default: 50 }),
          before: Type.Optional(Type.String({ maxLength: 64 })),
        }),
        response: { 200: Ok({ deployments: Type.Array(DeploymentJson) }), ...errors(400, 401) },
      },
      // The page's filter form sends "All projects" and "Any status" as empty values: for a
      // browser an empty filter is no filter. The JSON API keeps refusing them.
      preValidation: async (request) => {
        if (!wantsHtml(request)) return;
        const query = request.query as Record<string, unknown>;
        for (const key of ['project_id', 'status']) if (query[key] === '') delete query[key];
      },
    },
    async (request, reply) => {
      const q = request.query;
      if (wantsHtml(request)) return renderDeploymentsPage(app, reply, q);
      const list = await deployments.list({
        projectId: q.project_id,
        status: q.status,
        limit: q.limit,
        before: q.before,
      });
      return { success: true as const, deployments: list };
    },
  );
}
