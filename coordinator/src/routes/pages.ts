// Pages that have no JSON resource of their own: the dashboard at `/` and a deployment's raw log;
// and the deployments list's page, rendered here for its route in deployments.ts. (Every other
// page lives at its resource's URL, in that resource's route file: API.md "One URL per resource".)
import type { FastifyInstance, FastifyReply } from 'fastify';
import Type from 'typebox';
import { latestDeployments } from '../modules/dashboard/dashboard.repository.ts';
import { DEPLOYMENT_STATUSES, type DeploymentStatus } from '../modules/deployment/deployment.entity.ts';
import { renderPage } from '../plugins/negotiation.ts';
import { listHref, pageSize } from '../views/format.ts';

/** GET /deployments's query as its route validated it (a browser's empty filters already dropped). */
export interface DeploymentsQuery {
  project_id?: string;
  status?: DeploymentStatus;
  limit: number;
  before?: string;
}

/** The JSON route's default page size: a link leaves `limit` out when it is this. */
const DEFAULT_LIMIT = 50;

function deploymentsHref(filter: { project_id?: string; status?: string; limit: number; before?: string }) {
  const { project_id, status, before } = filter;
  return listHref('/deployments', {
    project_id,
    status,
    limit: pageSize(filter.limit, DEFAULT_LIMIT),
    before,
  });
}

/**
 * GET /deployments in a browser: every project's deployments, newest first, filtered by project
 * and status with the JSON's own query parameters, paged with `before` (one more row is read to
 * know whether an older page exists).
 */
export async function renderDeploymentsPage(
  app: FastifyInstance,
  reply: FastifyReply,
  query: DeploymentsQuery,
): Promise<FastifyReply> {
  const { projects, deployments } = app.services;
  const { project_id: projectId, status } = query;
  const [projectList, rows] = await Promise.all([
    projects.list(),
    deployments.list({ projectId, status, limit: query.limit + 1, before: query.before }),
  ]);
  const names = new Map(projectList.map((p) => [p.id, p.name]));
  const shown = rows.slice(0, query.limit);
  const filter = { project_id: projectId, status, limit: query.limit };
  return renderPage(reply, 'deployments', {
    deployments: shown.map((d) => ({ ...d, project_name: names.get(d.proj_id) ?? null })),
    projects: projectList.map((p) => ({ id: p.id, name: p.name })),
    statuses: DEPLOYMENT_STATUSES,
    filter,
    filtered: Boolean(projectId || status),
    paged: Boolean(query.before),
    newestHref: deploymentsHref(filter),
    olderHref: rows.length > query.limit ? deploymentsHref({ ...filter, before: shown.at(-1)!.id }) : null,
  });
}

export default async function pageRoutes(app: FastifyInstance) {
  const { projects, agents, deployments, orm } = app.services;

  app.get('/', { schema: { hide: true } }, async (_request, reply) => {
    const [projectList, latest, agentList, recent] = await Promise.all([
      projects.list(),
      latestDeployments(orm.em.fork()),
      agents.list(),
      deployments.list({ limit: 10 }),
    ]);
    const names = new Map(projectList.map((p) => [p.id, p.name]));
    return renderPage(reply, 'dashboard', {
      projects: projectList.map((p) => ({ ...p, last: latest.get(p.id) ?? null })),
      agents: agentList,
      online: agentList.filter((a) => a.online).length,
      recent: recent.map((d) => ({ ...d, project_name: names.get(d.proj_id) ?? '' })),
    });
  });

  // The whole log as plain text (nosniff is set on every answer, so it never renders as HTML).
  app.get(
    '/deploy/:id/log',
    { schema: { hide: true, params: Type.Object({ id: Type.String() }) } },
    async (request, reply) => {
      const { deployment, logs, project } = await deployments.get((request.params as { id: string }).id);
      const lines = [`# ${project.name} deployment ${deployment.id}: ${deployment.status}`];
      for (const entry of logs) {
        lines.push(`\n▶ [${entry.host}] ${entry.cmd}`);
        if (entry.log) lines.push(entry.log.endsWith('\n') ? entry.log.slice(0, -1) : entry.log);
        const exit = entry.exit_code === null ? '' : ` (exit ${entry.exit_code})`;
        lines.push(`${entry.success ? '✔' : '✘'} [${entry.host}] ${entry.status}${exit}`);
      }
      return reply
        .type('text/plain; charset=utf-8')
        .header('content-disposition', `inline; filename="deployment-${deployment.id}.log"`)
        .send(`${lines.join('\n')}\n`);
    },
  );
}
