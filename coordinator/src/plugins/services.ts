// The application's services, built once per app and reachable from routes as `app.services`.
import type { MikroORM } from '@mikro-orm/postgresql';
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import { AgentService } from '../modules/agent/agent.service.ts';
import type { SecretBox } from '../modules/common/crypto.ts';
import { DeploymentService } from '../modules/deployment/deployment.service.ts';
import type { Mailer } from '../modules/mail/mailer.ts';
import { ProjectService } from '../modules/project/project.service.ts';
import { type RegistrationPolicy, UserService } from '../modules/user/user.service.ts';
import { WebhookService } from '../modules/webhook/webhook.service.ts';

export interface Services {
  orm: MikroORM;
  users: UserService;
  projects: ProjectService;
  agents: AgentService;
  deployments: DeploymentService;
  webhooks: WebhookService;
  mailer: Mailer;
}

declare module 'fastify' {
  interface FastifyInstance {
    services: Services;
  }
}

export interface ServiceOptions {
  orm: MikroORM;
  box: SecretBox;
  mailer: Mailer;
  registration: RegistrationPolicy;
  sessionTtlMs: number;
  publicUrl: () => string;
}

export function createServices(o: ServiceOptions): Services {
  const users = new UserService(o.orm, o.registration, o.sessionTtlMs);
  const projects = new ProjectService(o.orm, o.box, (id) => `${o.publicUrl()}/webhook/${id}`);
  const agents = new AgentService(o.orm);
  const deployments = new DeploymentService(o.orm, agents);
  const webhooks = new WebhookService(o.orm, projects, deployments);
  return { orm: o.orm, users, projects, agents, deployments, webhooks, mailer: o.mailer };
}

export default fp(
  async (app: FastifyInstance, services: Services) => {
    app.decorate('services', services);
  },
  { name: 'services' },
);
