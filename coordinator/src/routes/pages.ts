// Pages that have no JSON resource of their own: the dashboard at `/`. (Every other page lives at
// its resource's URL, in that resource's route file: API.md "One URL per resource".)
import type { FastifyInstance } from 'fastify';
import { latestDeployments } from '../modules/dashboard/dashboard.repository.ts';
import { renderPage } from '../plugins/negotiation.ts';

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
}
