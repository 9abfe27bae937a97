// CSRF on the pages' forms: every route that takes a form post (`config.form`, plugins/forms.ts)
// refuses one without the session's `_csrf` token, or with a wrong one, even when everything else
// looks like the signed-in user's own browser (cookie, Origin, Sec-Fetch-Site, Referer) — and
// changes nothing; with the token from the page, the same post does what the form is for. The form
// routes are found by asking the running coordinator, so a new one without a case here fails.
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  Client,
  coordinatorFor,
  createProject,
  type HttpResponse,
  signUp,
  BROWSER_ACCEPT,
} from '../helpers/coordinator.ts';
import { FINGERPRINT, PRIVATE_KEY } from '../helpers/projects.ts';
import { expectJsonError } from '../helpers/responses.ts';
import { closedPort, startTestSmtpServer, type TestSmtpServer } from '../helpers/smtp-server.ts';
import { sql } from '../helpers/sql.ts';
import { webhookTools } from '../helpers/webhooks.ts';
import { branchPush } from '../helpers/github-examples.ts';

const EXPIRED = 'This form has expired: reload the page and try again';
const PASSWORD = 'correct horse battery staple';

type Fields = Record<string, string | string[]>;

const coord = coordinatorFor({ REGISTRATION: 'open' });
let admin: Client;
let smtp: TestSmtpServer;

beforeAll(async () => {
  admin = (await signUp(coord.current.url, `csrf-admin-${randomUUID().slice(0, 8)}@example.com`, PASSWORD))
    .client;
  smtp = await startTestSmtpServer();
  const stored = await admin.request('PUT', '/settings/smtp', {
    json: { host: '127.0.0.1', port: smtp.port, secure: false, user: null, from: 'deckhand@example.com' },
  });
  expect(stored.status, stored.text).toBe(200);
});

afterAll(async () => {
  await smtp?.close();
});

function urlencoded(fields: Fields): string {
  const body = new URLSearchParams();
  for (const [k, v] of Object.entries(fields)) for (const one of [v].flat()) body.append(k, one);
  return body.toString();
}

/** A form post as the browser sends it from `page`: same origin, navigating, cookie attached. */
function postForm(client: Client, path: string, page: string, fields: Fields, accept = BROWSER_ACCEPT) {
  const origin = coord.current.url;
  return client.request('POST', path, {
    body: urlencoded(fields),
    headers: {
      'content-type': 'application/x-www-form-urlencoded',
      accept,
      origin,
      referer: origin + page,
      'sec-fetch-site': 'same-origin',
      'sec-fetch-mode': 'navigate',
      'sec-fetch-dest': 'document',
    },
  });
}

/** The `_csrf` value the page's forms carry, read from the page as the browser gets it. */
async function tokenFrom(client: Client, page: string): Promise<string> {
  const res = await client.get(page, { headers: { accept: BROWSER_ACCEPT } });
  expect(res.status, `${page}: ${res.text.slice(0, 300)}`).toBe(200);
  const token = /name="_csrf" value="([^"]+)"/.exec(res.text)?.[1];
  if (!token) throw new Error(`no _csrf on ${page}`);
  return token;
}

const json = async (client: Client, path: string) => {
  const res = await client.get(path);
  expect(res.status, `${path}: ${res.text}`).toBe(200);
  return res.json;
};
const count = async (query: string, params: unknown[] = []) =>
  (await sql(coord.current, `select count(*)::int as n from ${query}`, params))[0].n as number;

const projectFields = (name: string, branch = 'main'): Fields => ({
  name,
  forge_url: 'https://github.com/acme/web.git',
  branch_name: branch,
  commands: ['npm ci', 'npm run build'],
  target_kind: 'labels',
  agent_labels: 'web',
});

async function newProject(overrides: Record<string, unknown> = {}) {
  const res = await createProject(admin, overrides);
  return { id: res.json.project.id as string, name: res.json.project.name as string };
}

async function queuedDeployment(projectId: string): Promise<string> {
  const res = await admin.post('/deploy', { projectId, commit: 'c'.repeat(40) });
  expect(res.status, res.text).toBe(200);
  return res.json.deployId as string;
}

/** What one form needs: who posts it, from which page, with which fields, and what it changes. */
interface Prepared {
  client?: Client;
  path: string;
  page: string;
  fields: Fields;
  /** The state the form changes, read back (compared before and after). */
  state: () => Promise<unknown>;
}

/** Every form route (as Fastify names it) and how to exercise it; fixtures made per case. */
const CASES: Record<string, () => Promise<Prepared>> = {
  // Signing in and out: login CSRF matters too (being signed in to someone else's account).
  'POST /register': async () => {
    const client = new Client(coord.current.url);
    const email = `csrf-new-${randomUUID().slice(0, 8)}@example.com`;
    return {
      client,
      path: '/register',
      page: '/register',
      fields: { email, password: PASSWORD },
      state: () => count(`users where email = ?`, [email]),
    };
  },
  'POST /login': async () => {
    const { email } = await signUp(
      coord.current.url,
      `csrf-login-${randomUUID().slice(0, 8)}@example.com`,
      PASSWORD,
    );
    const client = new Client(coord.current.url);
    return {
      client,
      path: '/login',
      page: '/login',
      fields: { email, password: PASSWORD },
      state: async () => (await client.get('/me')).status,
    };
  },
  'POST /logout': async () => {
    const { client } = await signUp(coord.current.url, undefined, PASSWORD);
    return {
      client,
      path: '/logout',
      page: '/',
      fields: {},
      state: async () => (await client.get('/me')).status,
    };
  },

  // Projects.
  'POST /projects': async () => {
    const name = `csrf-${randomUUID().slice(0, 8)}`;
    return {
      path: '/projects',
      page: '/projects/new',
      fields: projectFields(name),
      state: () => count(`projects where name = ?`, [name]),
    };
  },
  'POST /projects/:id/settings': async () => {
    const p = await newProject();
    return {
      path: `/projects/${p.id}/settings`,
      page: `/projects/${p.id}/settings`,
      fields: projectFields(p.name, 'develop'),
      state: async () => (await json(admin, `/projects/${p.id}`)).project.branch_name,
    };
  },
  'POST /projects/:id/delete': async () => {
    const p = await newProject();
    return {
      path: `/projects/${p.id}/delete`,
      page: `/projects/${p.id}/settings`,
      fields: {},
      state: () => count(`projects where id = ?`, [p.id]),
    };
  },
  'POST /projects/:id/deploy-key/rotate': async () => {
    const p = await newProject();
    return {
      path: `/projects/${p.id}/deploy-key/rotate`,
      page: `/projects/${p.id}`,
      fields: {},
      state: async () => (await json(admin, `/projects/${p.id}`)).project.deploy_key,
    };
  },
  'POST /projects/:id/webhook/rotate': async () => {
    const p = await newProject();
    return {
      path: `/projects/${p.id}/webhook/rotate`,
      page: `/projects/${p.id}`,
      fields: {},
      state: async () => (await json(admin, `/projects/${p.id}/webhook`)).webhook.secret,
    };
  },
  'POST /projects/:id/hooks': async () => {
    const p = await newProject();
    return {
      path: `/projects/${p.id}/hooks`,
      page: `/projects/${p.id}`,
      fields: { url: 'https://hooks.example.com/deckhand', events: 'deployment.finished' },
      state: async () => (await json(admin, `/projects/${p.id}/hooks`)).hooks.length,
    };
  },
  'POST /projects/:id/hooks/:hookId/delete': async () => {
    const p = await newProject();
    const made = await admin.post(`/projects/${p.id}/hooks`, { url: 'https://hooks.example.com/x' });
    expect(made.status, made.text).toBe(201);
    return {
      path: `/projects/${p.id}/hooks/${made.json.hook.id}/delete`,
      page: `/projects/${p.id}`,
      fields: {},
      state: async () => (await json(admin, `/projects/${p.id}/hooks`)).hooks.length,
    };
  },
  'POST /projects/:id/deliveries/:deliveryId/redeliver': async () => {
    const tools = webhookTools({
      get coord() {
        return coord.current;
      },
      admin,
      adminEmail: '',
    });
    const project = await tools.createProject({ branch_name: 'master' });
    const delivered = await tools.githubDelivery(project, branchPush);
    expect(delivered.status, delivered.text).toBe(200);
    const deliveries = (await json(admin, `/projects/${project.id}/deliveries`)).deliveries;
    return {
      path: `/projects/${project.id}/deliveries/${deliveries[0].id}/redeliver`,
      page: `/projects/${project.id}`,
      fields: {},
      state: () => count(`deployments where project_id = ?`, [project.id]),
    };
  },

  // Deployments.
  'POST /deploy': async () => {
    const p = await newProject();
    return {
      path: '/deploy',
      page: `/projects/${p.id}`,
      fields: { projectId: p.id, commit: 'd'.repeat(40) },
      state: () => count(`deployments where project_id = ?`, [p.id]),
    };
  },
  'POST /deploy/:id/cancel': async () => {
    const id = await queuedDeployment((await newProject()).id);
    return {
      path: `/deploy/${id}/cancel`,
      page: `/deploy/${id}`,
      fields: {},
      state: async () =>
        (await sql(coord.current, 'select status from deployments where id = ?', [id]))[0].status,
    };
  },
  'POST /deploy/:id/redeploy': async () => {
    const p = await newProject();
    const id = await queuedDeployment(p.id);
    return {
      path: `/deploy/${id}/redeploy`,
      page: `/deploy/${id}`,
      fields: {},
      state: () => count(`deployments where project_id = ?`, [p.id]),
    };
  },
  'POST /deploy/:id/rollback': async () => {
    const p = await newProject({ releases: { keep: 3 } });
    const id = await queuedDeployment(p.id);
    // Ended successfully, having built a release (what the job service records at the end).
    await sql(coord.current, `update deployments set status = 'success', finished_at = now() where id = ?`, [
      id,
    ]);
    return {
      path: `/deploy/${id}/rollback`,
      page: `/deploy/${id}`,
      fields: {},
      state: () => count(`deployments where project_id = ?`, [p.id]),
    };
  },

  // Agents.
  'POST /agents': async () => {
    const name = `csrf-agent-${randomUUID().slice(0, 8)}`;
    return {
      path: '/agents',
      page: '/agents',
      fields: { name, labels: 'web, eu' },
      state: () => count(`agents where name = ?`, [name]),
    };
  },
  'POST /agents/:id/revoke': async () => {
    const made = await admin.post('/agents', { name: `csrf-revoke-${randomUUID().slice(0, 8)}` });
    expect(made.status, made.text).toBe(201);
    const id = made.json.agent.id as string;
    return {
      path: `/agents/${id}/revoke`,
      page: '/agents',
      fields: {},
      state: async () => (await json(admin, '/agents')).agents.some((a: { id: string }) => a.id === id),
    };
  },
  'POST /agents/install': async () => {
    const name = `csrf-install-${randomUUID().slice(0, 8)}`;
    return {
      path: '/agents/install',
      page: '/agents/install',
      // Nothing listens on the port: the installation starts, then fails, off this request.
      fields: {
        host: '127.0.0.1',
        port: String(await closedPort()),
        username: 'deploy',
        private_key: PRIVATE_KEY,
        host_key_fingerprint: FINGERPRINT,
        name,
        labels: 'web',
      },
      state: () => count('agent_installs'),
    };
  },

  // Settings: mail, tokens, users, invitations, sessions.
  'POST /email/test': async () => ({
    path: '/email/test',
    page: '/settings',
    fields: { to: 'ops@example.com' },
    state: async () => smtp.messages.length,
  }),
  'POST /settings/smtp': async () => ({
    path: '/settings/smtp',
    page: '/settings',
    fields: {
      host: '127.0.0.1',
      port: String(smtp.port),
      user: '',
      password: '',
      from: `csrf-${randomUUID()}@example.com`,
    },
    state: async () => (await json(admin, '/settings/smtp')).smtp,
  }),
  'POST /settings/smtp/delete': async () => ({
    path: '/settings/smtp/delete',
    page: '/settings',
    fields: {},
    state: async () => (await json(admin, '/settings/smtp')).smtp,
  }),
  'POST /tokens': async () => {
    const name = `csrf-token-${randomUUID().slice(0, 8)}`;
    return {
      path: '/tokens',
      page: '/settings',
      fields: { name, scope: 'read', expires_at: '' },
      state: async () =>
        (await json(admin, '/tokens')).api_tokens.filter((t: { name: string }) => t.name === name).length,
    };
  },
  'POST /tokens/:id/revoke': async () => {
    const made = await admin.post('/tokens', { name: 'csrf-revoke', scope: 'read' });
    expect(made.status, made.text).toBe(201);
    const bearer = new Client(coord.current.url);
    return {
      path: `/tokens/${made.json.api_token.id}/revoke`,
      page: '/settings',
      fields: {},
      state: async () =>
        (await bearer.get('/me', { cookie: null, headers: { authorization: `Bearer ${made.json.token}` } }))
          .status,
    };
  },
  'POST /users/invitations': async () => {
    const email = `csrf-invited-${randomUUID().slice(0, 8)}@example.com`;
    return {
      path: '/users/invitations',
      page: '/settings',
      fields: { email, role: 'viewer' },
      state: () => count(`invitations where email = ?`, [email]),
    };
  },
  'POST /users/invitations/:id/revoke': async () => {
    const made = await admin.post('/users/invitations', {
      email: `csrf-revoked-${randomUUID().slice(0, 8)}@example.com`,
      role: 'viewer',
    });
    expect(made.status, made.text).toBe(201);
    const id = made.json.invitation.id as string;
    return {
      path: `/users/invitations/${id}/revoke`,
      page: '/settings',
      fields: {},
      state: async () =>
        (await json(admin, '/users/invitations')).invitations.some((i: { id: string }) => i.id === id),
    };
  },
  'POST /users/:id/role': async () => {
    const { user } = await signUp(coord.current.url, undefined, PASSWORD);
    return {
      path: `/users/${user.id}/role`,
      page: '/settings',
      fields: { role: 'deployer' },
      state: async () =>
        (await json(admin, '/users')).users.find((u: { id: string }) => u.id === user.id)?.role,
    };
  },
  'POST /users/:id/delete': async () => {
    const { user } = await signUp(coord.current.url, undefined, PASSWORD);
    return {
      path: `/users/${user.id}/delete`,
      page: '/settings',
      fields: {},
      state: () => count(`users where id = ?`, [user.id]),
    };
  },
  'POST /sessions/:id/end': async () => {
    // The admin signed in from a second browser; this one signs that one out.
    const other = new Client(coord.current.url);
    const me = await json(admin, '/me');
    const signedIn = await other.post('/login', { email: me.user.email, password: PASSWORD });
    expect(signedIn.status, signedIn.text).toBe(200);
    const sessions = (await json(admin, '/sessions')).sessions as Array<{ id: string; current: boolean }>;
    const theirs = sessions.filter((s) => !s.current).at(-1)!;
    return {
      path: `/sessions/${theirs.id}/end`,
      page: '/settings',
      fields: {},
      state: async () => (await other.get('/me')).status,
    };
  },
};

/** The POST routes of the running coordinator, as Fastify names them ('/projects/:id/delete'). */
function postRoutes(): string[] {
  const tree = coord.current.app.printRoutes({ method: 'POST', commonPrefix: false });
  const paths: string[] = [];
  const stack: string[] = [];
  for (const line of tree.split('\n')) {
    const m = /^([│ ]*)[├└]── (\S+) \(/.exec(line);
    if (!m) continue;
    const depth = m[1]!.length / 4;
    stack.length = depth;
    const full = (stack[depth - 1] ?? '') + m[2]!;
    stack.push(full);
    paths.push(full);
  }
  return paths;
}

describe('CSRF on form posts: the _csrf token is required on every form route', () => {
  it('the form routes are exactly those the cases below cover', async () => {
    // A route takes forms when it answers a form post without a token with the CSRF refusal
    // (checked before validation, so any id will do); the others refuse the content type.
    const formRoutes: string[] = [];
    for (const route of postRoutes()) {
      const path = route.replace(/:[A-Za-z]+/g, randomUUID());
      const res = await postForm(admin, path, '/', { anything: 'x' }, 'application/json');
      if (res.status === 403 && res.json?.error === EXPIRED) formRoutes.push(`POST ${route}`);
      else expect([401, 415], `${route}: ${res.status} ${res.text}`).toContain(res.status);
    }
    expect(formRoutes.sort()).toEqual(Object.keys(CASES).sort());
  });

  /** Refused: JSON callers get 403; a browser goes back to the page, which says why. */
  async function expectRefused(client: Client, prepared: Prepared, fields: Fields) {
    const asJson = await postForm(client, prepared.path, prepared.page, fields, 'application/json');
    expectJsonError(asJson, 403, EXPIRED);
    const asBrowser: HttpResponse = await postForm(client, prepared.path, prepared.page, fields);
    expect(asBrowser.status, asBrowser.text).toBe(303);
    expect(asBrowser.headers.get('location')).toBe(prepared.page);
    const back = await client.get(prepared.page, { headers: { accept: BROWSER_ACCEPT } });
    expect(back.text).toContain(EXPIRED);
  }

  for (const [route, prepare] of Object.entries(CASES)) {
    it(`${route}: refused without _csrf or with a wrong one, nothing changed; works with the page's token`, async () => {
      const prepared = await prepare();
      const client = prepared.client ?? admin;
      const token = await tokenFrom(client, prepared.page);
      const before = await prepared.state();

      await expectRefused(client, prepared, prepared.fields);
      expect(await prepared.state()).toEqual(before);
      // A wrong token of the right shape (another session's, say), and an empty one.
      const wrong = token.slice(0, -1) + (token.endsWith('A') ? 'B' : 'A');
      await expectRefused(client, prepared, { ...prepared.fields, _csrf: wrong });
      await expectRefused(client, prepared, { ...prepared.fields, _csrf: '' });
      expect(await prepared.state()).toEqual(before);

      const ok = await postForm(client, prepared.path, prepared.page, {
        ...prepared.fields,
        _csrf: await tokenFrom(client, prepared.page),
      });
      // A redirect, or the page showing once what was created (a token, a signing secret).
      expect([200, 201, 303], ok.text.slice(0, 500)).toContain(ok.status);
      if (ok.status === 303) {
        const next = await client.get(ok.headers.get('location')!, { headers: { accept: BROWSER_ACCEPT } });
        expect(next.text).not.toContain(EXPIRED);
      }
      if (route === 'POST /email/test') await smtp.waitForMessage();
      expect(await prepared.state()).not.toEqual(before);
    });
  }
});
