// The project pages: "new project" (GET /projects/new, posted to POST /projects), the project's
// page (GET /projects/:id in a browser: rendered here, routed in projects.ts) and its settings
// (GET /projects/:id/settings), with the form posts that have no HTML-form-shaped JSON route
// (PATCH and DELETE /projects/:id, DELETE of an outgoing webhook). Each calls the same service as its JSON route. The project
// form's fields are turned into the JSON body by `projectForm` (the same for creating and
// editing, except that an edit sends every field so emptying one clears it). Secret values are
// write-only: the form never carries them back, an empty one keeps what is stored.
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import Type from 'typebox';
import { hasRole } from '../modules/common/actor.ts';
import { HOOK_EVENTS } from '../modules/notification/notification.entity.ts';
import { BadRequestError } from '../modules/common/errors.ts';
import { type ProjectJson, UpdateProjectBody } from '../modules/project/project.schema.ts';
import { requireActor } from '../plugins/auth.ts';
import { acceptForms, field, fieldList, type FormFields, formDone } from '../plugins/forms.ts';
import { renderPage } from '../plugins/negotiation.ts';

const IdParams = Type.Object({ id: Type.String({ maxLength: 64 }) });
/** Deployments per page of the project's history. */
export const HISTORY_PAGE = 20;
/** Prefix of the edit form's per-secret fields (`set_secret:NAME`): empty keeps the value. */
const SET_SECRET = 'set_secret:';

/** "a, b c" → ['a', 'b', 'c'] */
function words(value: string): string[] {
  return value
    .split(/[\s,]+/)
    .map((s) => s.trim())
    .filter(Boolean);
}

/** A whole number as a number, anything else as typed (so the schema names the field). */
function numberOr(value: string): number | string {
  return /^\d+$/.test(value) ? Number(value) : value;
}

/** NAME=value lines (blank lines and # comments skipped) as an object. */
function assignments(text: string, what: string): Record<string, string> {
  const out: Record<string, string> = {};
  text.split(/\r?\n/).forEach((line, i) => {
    if (!line.trim() || line.trimStart().startsWith('#')) return;
    const eq = line.indexOf('=');
    if (eq <= 0) throw new BadRequestError(`${what}, line ${i + 1}: expected NAME=value`);
    out[line.slice(0, eq).trim()] = line.slice(eq + 1);
  });
  return out;
}

/** The project form's fields as the JSON body of POST /projects (`edit`: of PATCH /projects/:id). */
export function projectForm(fields: FormFields, edit = false): Record<string, unknown> {
  const text = (name: string) => field(fields, name).trim();
  const body: Record<string, unknown> = {
    name: text('name'),
    forge_url: text('forge_url'),
    commands: fieldList(fields, 'commands'),
  };
  const branch = text('branch_name');
  if (branch || edit) body.branch_name = branch || 'main';
  const patterns = words(field(fields, 'branch_patterns'));
  if (patterns.length || edit) body.branch_patterns = patterns;

  // The mistakes a form invites, said plainly (the schema checks the rest). Each message starts
  // with the field's JSON name, which the page uses to mark the field.
  if (!/^[A-Za-z0-9][A-Za-z0-9._-]*$/.test(String(body.name))) {
    throw new BadRequestError('name: letters, digits, ".", "_" and "-", starting with a letter or digit');
  }
  if ((body.commands as string[]).length === 0)
    throw new BadRequestError('commands: add at least one command');
  const kind = text('target_kind');
  if (kind === 'ssh') {
    for (const [name, what] of [
      ['ssh_host', 'the SSH host'],
      ['ssh_username', 'the SSH user'],
      ['ssh_fingerprint', 'the host key fingerprint (Fetch host key shows it)'],
    ] as const) {
      if (!text(name)) throw new BadRequestError(`target: give ${what}`);
    }
    const port = text('ssh_port');
    const key = field(fields, 'ssh_private_key').trim();
    body.target = {
      ssh: {
        host: text('ssh_host'),
        ...(port ? { port: numberOr(port) } : {}),
        username: text('ssh_username'),
        ...(key ? { private_key: `${key}\n` } : {}),
        host_key_fingerprint: text('ssh_fingerprint'),
      },
    };
  } else if (kind === 'names') {
    const names = words(field(fields, 'agent_names'));
    if (!names.length) throw new BadRequestError('target: name at least one agent, or choose another target');
    body.target = { agents: { names } };
  } else {
    const labels = words(field(fields, 'agent_labels'));
    if (!labels.length)
      throw new BadRequestError('target: give at least one agent label, or choose another target');
    body.target = { agents: { labels } };
  }

  const env = assignments(field(fields, 'env'), 'Environment');
  if (Object.keys(env).length || edit) body.env = env;
  const added = assignments(field(fields, 'new_secrets'), 'New secrets');
  if (edit) {
    const secrets: Record<string, string | null> = {};
    for (const [name, value] of Object.entries(fields)) {
      const v = Array.isArray(value) ? value[0]! : value;
      if (name.startsWith(SET_SECRET) && v !== '') secrets[name.slice(SET_SECRET.length)] = v;
    }
    for (const name of fieldList(fields, 'remove_secret')) secrets[name] = null;
    Object.assign(secrets, added);
    if (Object.keys(secrets).length) body.secrets = secrets;
  } else if (Object.keys(added).length) {
    body.secrets = added;
  }

  const credentials = text('checkout_credentials');
  const knownHosts = field(fields, 'known_hosts').trim();
  if (credentials || knownHosts || edit) {
    body.checkout = {
      ...(credentials ? { credentials } : {}),
      ...(knownHosts || edit ? { known_hosts: knownHosts ? `${knownHosts}\n` : null } : {}),
    };
  }

  if (field(fields, 'releases_enabled') === 'on') {
    const keep = text('releases_keep');
    const check = field(fields, 'releases_health_check').trim();
    body.releases = { ...(keep ? { keep: numberOr(keep) } : {}), health_check: check || null };
  } else if (edit) {
    body.releases = null;
  }

  const emails = words(field(fields, 'notify_emails'));
  const on = text('notify_on');
  if (emails.length || edit) body.notifications = { emails, ...(on ? { on } : {}) };

  const provider = text('commit_status_provider');
  if (provider) {
    const token = field(fields, 'commit_status_token').trim();
    const apiUrl = text('commit_status_api_url');
    body.commit_status = { provider, api_url: apiUrl || null, ...(token ? { token } : {}) };
  } else if (edit) {
    body.commit_status = null;
  }

  const concurrency = text('concurrency');
  if (concurrency) body.concurrency = concurrency;
  const deploymentSeconds = text('deployment_seconds');
  const commandSeconds = text('command_seconds');
  if (deploymentSeconds || commandSeconds || edit) {
    body.timeouts = {
      ...(deploymentSeconds || edit
        ? { deployment_seconds: deploymentSeconds ? numberOr(deploymentSeconds) : null }
        : {}),
      ...(commandSeconds || edit
        ? { command_seconds: commandSeconds ? numberOr(commandSeconds) : null }
        : {}),
    };
  }
  return body;
}

/** The project's page: summary, Deploy, history (paged with `before`), releases, webhook, deliveries. */
export async function renderProjectPage(
  app: FastifyInstance,
  request: FastifyRequest,
  reply: FastifyReply,
  project: ProjectJson,
  before: string | undefined,
): Promise<FastifyReply> {
  const { deployments, webhooks, notifications } = app.services;
  const actor = requireActor(request);
  const [page, releases, deliveries, hooks] = await Promise.all([
    deployments.list({ projectId: project.id, limit: HISTORY_PAGE + 1, before }),
    project.releases ? deployments.keptReleases(project.id, project.releases.keep) : null,
    webhooks.listDeliveries(project.id, 10),
    notifications.listHooks(project.id),
  ]);
  return renderPage(reply, 'project', {
    project,
    deployments: page.slice(0, HISTORY_PAGE),
    older: page.length > HISTORY_PAGE ? page[HISTORY_PAGE - 1]!.id : null,
    paged: Boolean(before),
    releases,
    deliveries,
    hooks,
    hookEvents: HOOK_EVENTS,
    webhookUrl: app.services.projects.webhookUrl(project.id),
    admin: hasRole(actor, 'admin'),
    deployer: hasRole(actor, 'deployer'),
  });
}

export default async function projectPageRoutes(instance: FastifyInstance) {
  const app = instance.withTypeProvider<TypeBoxTypeProvider>();
  const { projects, agents } = app.services;
  acceptForms(instance);

  const formPage = async (reply: FastifyReply, project: ProjectJson | null) => {
    const agentList = await agents.list();
    const labels = [...new Set(agentList.flatMap((a) => a.labels))].sort();
    return renderPage(reply, 'project-form', {
      project,
      agentNames: agentList.map((a) => a.name),
      agentLabels: labels,
    });
  };

  app.get('/projects/new', { config: { auth: 'admin' }, schema: { hide: true } }, async (_request, reply) =>
    formPage(reply, null),
  );

  app.get(
    '/projects/:id/settings',
    { config: { auth: 'admin' }, schema: { hide: true, params: IdParams } },
    async (request, reply) => formPage(reply, await projects.get(request.params.id)),
  );

  // PATCH /projects/:id as a form.
  app.post(
    '/projects/:id/settings',
    {
      config: { auth: 'admin', form: (fields) => projectForm(fields, true) },
      schema: { hide: true, params: IdParams, body: UpdateProjectBody },
    },
    async (request, reply) => {
      const project = await projects.update(request.params.id, request.body, requireActor(request));
      return formDone(request, reply, `/projects/${project.id}`, 'Settings saved');
    },
  );

  // DELETE /projects/:id/hooks/:hookId as a form.
  app.post(
    '/projects/:id/hooks/:hookId/delete',
    {
      config: { auth: 'admin', form: true },
      schema: {
        hide: true,
        params: Type.Object({ id: Type.String({ maxLength: 64 }), hookId: Type.String({ maxLength: 64 }) }),
      },
    },
    async (request, reply) => {
      const { id, hookId } = request.params;
      await app.services.notifications.deleteHook(id, hookId, requireActor(request));
      return formDone(request, reply, `/projects/${id}#hooks`, 'Outgoing webhook deleted');
    },
  );

  // DELETE /projects/:id as a form.
  app.post(
    '/projects/:id/delete',
    { config: { auth: 'admin', form: true }, schema: { hide: true, params: IdParams } },
    async (request, reply) => {
      const project = await projects.get(request.params.id);
      await projects.delete(project.id, requireActor(request));
      return formDone(request, reply, '/', `Project ${project.name} deleted`);
    },
  );
}
