// Pages that have no JSON resource of their own: the dashboard at `/` and a deployment's raw log.
// (Every other page lives at its resource's URL, in that resource's route file: API.md "One URL
// per resource".)
import type { FastifyInstance } from 'fastify';
import Type from 'typebox';
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
