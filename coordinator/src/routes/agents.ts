// Agents (API.md "Agents"): admins register and revoke them; the token is shown once. Admins can
// also install one on a host over SSH from here (POST /agents/install, then its progress at
// GET /agents/installs/:id, from the database, on any coordinator process; modules/agent-install).
import { checkAgentUrl, InstallError, parsePrivateKey } from '@deckhand/installer';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import Type from 'typebox';
import { AgentLabels, AgentName } from '../modules/agent/agent.schema.ts';
import { AgentBundle } from '../modules/agent-bundle/agent-bundle.ts';
import { AgentInstalls } from '../modules/agent-install/agent-installs.ts';
import { BadRequestError, ConflictError } from '../modules/common/errors.ts';
import { errors, NullableTimestamp, Ok, Uuid } from '../modules/common/schemas.ts';
import { SshHost, SshPort } from '../modules/project/project.schema.ts';
import { requireActor } from '../plugins/auth.ts';
import { acceptForms, field, type FormFields, formDone, isBrowserForm } from '../plugins/forms.ts';
import { renderPage, wantsHtml } from '../plugins/negotiation.ts';
import { agentSetup, servedAgentVersion, versionOlder } from '../views/agent-setup.ts';

const AgentJson = Type.Object({
  id: Uuid,
  name: Type.String(),
  labels: Type.Array(Type.String()),
  online: Type.Boolean(),
  version: Type.Union([Type.String(), Type.Null()]),
  last_seen_at: NullableTimestamp,
});

/** The "Add agent" form: labels typed as one field, separated by commas or spaces. */
function agentForm(fields: FormFields) {
  const labels = field(fields, 'labels')
    .split(/[\s,]+/)
    .filter((l) => l !== '');
  return { name: field(fields, 'name').trim(), labels };
}

const PlainPath = Type.String({ minLength: 1, maxLength: 255, pattern: '^[A-Za-z0-9_./~+-]+$' });
const InstallBody = Type.Object(
  {
    host: SshHost,
    port: Type.Optional(SshPort),
    username: Type.String({ minLength: 1, maxLength: 64, pattern: '^[A-Za-z0-9._][A-Za-z0-9._-]*$' }),
    private_key: Type.String({
      minLength: 1,
      maxLength: 16_384,
      description: 'OpenSSH or PEM, no passphrase; used for this installation only, never stored',
    }),
    host_key_fingerprint: Type.String({
      pattern: '^SHA256:[A-Za-z0-9+/]{43}=?$',
      description: 'The host key to accept, as POST /projects/host-key showed it and the host confirms',
    }),
    name: AgentName,
    labels: Type.Optional(AgentLabels),
    agent_url: Type.Optional(
      Type.String({ maxLength: 2000, description: 'How the agent reaches this coordinator (PUBLIC_URL)' }),
    ),
    insecure: Type.Optional(Type.Boolean({ description: 'Allow the agent plain http:// beyond loopback' })),
    dir: Type.Optional(PlainPath),
    node: Type.Optional(PlainPath),
    wait_seconds: Type.Optional(Type.Integer({ minimum: 5, maximum: 600 })),
  },
  { additionalProperties: false },
);

/** The "Install on a host over SSH" form: empty fields are left out, labels as in "Add agent". */
function installForm(fields: FormFields) {
  const text = (name: string) => field(fields, name).trim();
  const optional = (name: string) => (text(name) ? { [name]: text(name) } : {});
  const port = text('port');
  return {
    host: text('host'),
    ...(port ? { port: /^\d+$/.test(port) ? Number(port) : port } : {}),
    username: text('username'),
    // Kept as typed (a key's line breaks matter); browsers send CRLF.
    private_key: field(fields, 'private_key').replaceAll('\r\n', '\n'),
    host_key_fingerprint: text('host_key_fingerprint'),
    name: text('name'),
    labels: text('labels')
      .split(/[\s,]+/)
      .filter((l) => l !== ''),
    ...optional('agent_url'),
    ...(field(fields, 'insecure') === 'on' ? { insecure: true } : {}),
    ...optional('dir'),
    ...optional('node'),
  };
}

export default async function agentRoutes(
  instance: FastifyInstance,
  opts: { publicUrl?: () => string; bundle?: AgentBundle; heartbeatMs?: number } = {},
) {
  const app = instance.withTypeProvider<TypeBoxTypeProvider>();
  const agents = app.services.agents;
  const installs = new AgentInstalls({
    orm: app.services.orm,
    agents,
    bundle: opts.bundle ?? new AgentBundle(),
    log: app.log.child({ component: 'agent-install' }),
    heartbeatMs: opts.heartbeatMs ?? 10_000,
  });
  app.addHook('onClose', () => installs.close());
  acceptForms(instance);

  app.post(
    '/agents',
    {
      config: { auth: 'admin', form: agentForm },
      schema: {
        tags: ['agents'],
        body: Type.Object({ name: AgentName, labels: Type.Optional(AgentLabels) }),
        response: {
          201: Ok({
            agent: Type.Object({ id: Uuid, name: Type.String(), labels: Type.Array(Type.String()) }),
            token: Type.String(),
          }),
          ...errors(400, 401, 403, 409),
        },
      },
    },
    async (request, reply) => {
      const created = await agents.create(request.body, requireActor(request));
      if (isBrowserForm(request)) {
        // The token exists only in this answer (it is stored as a hash): the page shows it once,
        // and is not a redirect, so the token never sits in a cookie or a URL.
        const url = opts.publicUrl?.() ?? `${request.protocol}://${request.host}`;
        return renderPage(reply.code(201), 'agent-created', {
          agent: created.agent,
          setup: agentSetup(url, created.token),
        });
      }
      return reply.code(201).send({ success: true, ...created });
    },
  );

  app.get(
    '/agents',
    {
      schema: { tags: ['agents'], response: { 200: Ok({ agents: Type.Array(AgentJson) }), ...errors(401) } },
    },
    async (request, reply) => {
      const list = await agents.list();
      if (wantsHtml(request)) {
        const served = await servedAgentVersion();
        return renderPage(reply, 'agents', {
          agents: list.map((a) => ({ ...a, outdated: versionOlder(a.version, served) })),
          served,
        });
      }
      return { success: true as const, agents: list };
    },
  );

  app.delete(
    '/agents/:id',
    {
      config: { auth: 'admin' },
      schema: {
        tags: ['agents'],
        params: Type.Object({ id: Type.String() }),
        response: { 200: Ok({}), ...errors(401, 403, 404) },
      },
    },
    async (request) => {
      await agents.delete(request.params.id, requireActor(request));
      return { success: true as const };
    },
  );

  // Revoke from the agents page (a form cannot send DELETE): the same service, then back to the list.
  app.post(
    '/agents/:id/revoke',
    {
      config: { auth: 'admin', form: true },
      schema: { hide: true, params: Type.Object({ id: Type.String() }) },
    },
    async (request, reply) => {
      const list = await agents.list();
      const name = list.find((a) => a.id === request.params.id)?.name;
      await agents.delete(request.params.id, requireActor(request));
      if (isBrowserForm(request)) return formDone(request, reply, '/agents', `Agent ${name ?? ''} revoked`);
      return { success: true as const };
    },
  );

  // The install form (admins): host, key, pinned host key, name and labels.
  app.get('/agents/install', { config: { auth: 'admin' }, schema: { hide: true } }, async (request, reply) =>
    renderPage(reply, 'agent-install-form', {
      agentUrl: opts.publicUrl?.() ?? `${request.protocol}://${request.host}`,
    }),
  );

  app.post(
    '/agents/install',
    {
      config: { auth: 'admin', form: installForm },
      schema: {
        tags: ['agents'],
        summary:
          'Install an agent on a host over SSH: register it, upload the agent, start it, wait until it is online',
        body: InstallBody,
        response: {
          202: Ok({
            install: Type.Object(
              { id: Uuid, status: Type.String(), url: Type.String() },
              { additionalProperties: true },
            ),
          }),
          ...errors(400, 401, 403, 409),
        },
      },
    },
    async (request, reply) => {
      const b = request.body;
      const fallbackUrl = opts.publicUrl?.() ?? `${request.protocol}://${request.host}`;
      let agentUrl: string;
      let privateKey: string;
      try {
        agentUrl = checkAgentUrl(b.agent_url ?? fallbackUrl, b.insecure === true);
        privateKey = parsePrivateKey(b.private_key, 'The private key');
      } catch (err) {
        if (err instanceof InstallError) throw new BadRequestError(err.message);
        throw err;
      }
      // Refused before anything runs, rather than after connecting.
      if ((await agents.list()).some((a) => a.name === b.name))
        throw new ConflictError('An agent with this name already exists');
      const run = await installs.start(
        {
          host: b.host.replace(/^\[(.*)\]$/, '$1'),
          port: b.port ?? 22,
          username: b.username,
          privateKey,
          fingerprint: b.host_key_fingerprint,
          name: b.name,
          labels: [...new Set(b.labels ?? [])],
          agentUrl,
          insecure: b.insecure === true,
          dir: b.dir ?? null,
          node: b.node ?? null,
          waitMs: (b.wait_seconds ?? 60) * 1000,
        },
        requireActor(request),
      );
      const url = `/agents/installs/${run.id}`;
      if (isBrowserForm(request)) return reply.redirect(url, 303);
      return reply
        .code(202)
        .header('location', url)
        .send({ success: true as const, install: { ...run, url } });
    },
  );

  app.get(
    '/agents/installs/:id',
    {
      config: { auth: 'admin' },
      schema: {
        tags: ['agents'],
        summary: "An installation's progress: its steps, what the installer said, and how it ended",
        params: Type.Object({ id: Type.String({ maxLength: 64 }) }),
        response: {
          200: Ok({
            install: Type.Object({ id: Uuid, status: Type.String() }, { additionalProperties: true }),
          }),
          ...errors(401, 403, 404),
        },
      },
    },
    async (request, reply) => {
      const run = await installs.get(request.params.id);
      if (wantsHtml(request)) return renderPage(reply, 'agent-install', { install: run });
      return { success: true as const, install: run };
    },
  );
}
