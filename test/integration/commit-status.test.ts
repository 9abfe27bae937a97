// Commit statuses: each deployment's state reported to its commit on GitHub, Gitea/Forgejo or
// GitLab, checked against a real local HTTP server standing in for the forge — URL, credentials,
// body, and the order pending → running → the end.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseForgeUrl } from '../../coordinator/src/modules/notification/commit-status.ts';
import {
  type Client,
  createProject,
  sampleProject,
  signUp,
  startCoordinator,
  type TestCoordinator,
} from '../helpers/coordinator.ts';
import { startHttpReceiver, type HttpReceiver } from '../helpers/http-receiver.ts';
import {
  endDeployment,
  eventually,
  FAST_NOTIFY,
  markRunning,
  notificationsOf,
} from '../helpers/notifications.ts';
import { patch } from '../helpers/projects.ts';
import { expectJsonError } from '../helpers/responses.ts';
import { sql } from '../helpers/sql.ts';

const PUBLIC_URL = 'https://deploy.example.com';
const SHA = 'a1b2c3d4e5f60718293a4b5c6d7e8f9012345678';
const TOKEN = 'forge-token-very-secret-123';
let coord: TestCoordinator;
let admin: Client;
let forge: HttpReceiver;

beforeAll(async () => {
  forge = await startHttpReceiver(() => ({ status: 201 }));
  coord = await startCoordinator({ ...FAST_NOTIFY, PUBLIC_URL });
  ({ client: admin } = await signUp(coord.url));
});

afterAll(async () => {
  await coord?.close();
  await forge?.close();
});

async function deploy(projectId: string): Promise<string> {
  const res = await admin.post('/deploy', { projectId, commit: SHA });
  expect(res.status, res.text).toBe(200);
  return res.json.deployId;
}

/** Requests the forge received for paths starting with `prefix`, as [state, body]. */
function statuses(prefix: string) {
  return forge.requests
    .filter((r) => r.url.startsWith(prefix))
    .map((r) => ({ ...r, json: JSON.parse(r.body) }));
}

async function runThrough(
  projectId: string,
  prefix: string,
  end: 'success' | 'failed',
  reason: string | null,
): Promise<{ id: string; sent: ReturnType<typeof statuses> }> {
  const id = await deploy(projectId);
  await eventually(async () => statuses(prefix).length >= 1);
  await markRunning(coord, id);
  await eventually(async () => statuses(prefix).length >= 2);
  await endDeployment(coord, id, end, reason);
  await eventually(async () => statuses(prefix).length >= 3);
  await new Promise((r) => setTimeout(r, 250));
  return { id, sent: statuses(prefix) };
}

describe('GitHub', () => {
  it('POST {api}/repos/{owner}/{repo}/statuses/{sha} with a Bearer token: pending, pending, success', async () => {
    // GitHub Enterprise: the API lives at https://host/api/v3, derived from forge_url.
    const origin = forge.url;
    const p = (
      await createProject(admin, {
        forge_url: `${origin}/acme/web.git`,
        commit_status: { provider: 'github', token: TOKEN },
      })
    ).json.project;
    expect(p.commit_status).toEqual({ provider: 'github', api_url: null, has_token: true });
    const { id, sent } = await runThrough(p.id, '/api/v3/', 'success', null);
    expect(sent.map((r) => r.url)).toEqual(Array(3).fill(`/api/v3/repos/acme/web/statuses/${SHA}`));
    expect(sent.map((r) => r.json.state)).toEqual(['pending', 'pending', 'success']);
    for (const r of sent) {
      expect(r.method).toBe('POST');
      expect(r.headers.authorization).toBe(`Bearer ${TOKEN}`);
      expect(r.headers.accept).toBe('application/vnd.github+json');
      expect(r.headers['content-type']).toBe('application/json');
      expect(r.json).toMatchObject({
        context: `deckhand/${p.name}`,
        target_url: `${PUBLIC_URL}/deploy/${id}`,
      });
      expect(Object.keys(r.json).sort()).toEqual(['context', 'description', 'state', 'target_url']);
    }
    // queued: what it waits for (or a default, if the scheduler has not said yet)
    expect(sent.map((r) => r.json.description)).toEqual([
      expect.stringMatching(/^Waiting/),
      'Deploying',
      'Deployed',
    ]);
  });

  it('api_url overrides the API root; a failure is "failure" with the reason as description', async () => {
    const p = (
      await createProject(admin, {
        forge_url: 'git@github.com:acme/site.git',
        commit_status: { provider: 'github', token: TOKEN, api_url: `${forge.url}/gh-api/` },
      })
    ).json.project;
    expect(p.commit_status.api_url).toBe(`${forge.url}/gh-api`);
    const reason = `Command failed on web-1: npm test (exit 1) ${'x'.repeat(200)}`;
    const { sent } = await runThrough(p.id, '/gh-api/', 'failed', reason);
    expect(sent.map((r) => r.url)).toEqual(Array(3).fill(`/gh-api/repos/acme/site/statuses/${SHA}`));
    expect(sent.map((r) => r.json.state)).toEqual(['pending', 'pending', 'failure']);
    expect(sent[2]!.json.description).toHaveLength(140);
    expect(sent[2]!.json.description.startsWith('Command failed on web-1: npm test (exit 1)')).toBe(true);
  });
});

describe('Gitea and Forgejo', () => {
  it('POST {host}/api/v1/repos/{owner}/{repo}/statuses/{sha} with "token": pending, pending, failure', async () => {
    const p = (
      await createProject(admin, {
        forge_url: `${forge.url}/team/app`,
        commit_status: { provider: 'gitea', token: TOKEN },
      })
    ).json.project;
    const { id, sent } = await runThrough(p.id, '/api/v1/', 'failed', 'Command failed');
    expect(sent.map((r) => r.url)).toEqual(Array(3).fill(`/api/v1/repos/team/app/statuses/${SHA}`));
    expect(sent.map((r) => r.json.state)).toEqual(['pending', 'pending', 'failure']);
    for (const r of sent) {
      expect(r.headers.authorization).toBe(`token ${TOKEN}`);
      expect(r.json).toMatchObject({
        context: `deckhand/${p.name}`,
        target_url: `${PUBLIC_URL}/deploy/${id}`,
      });
    }
    expect(sent[2]!.json.description).toBe('Command failed');
  });
});

describe('GitLab', () => {
  it('POST {host}/api/v4/projects/{encoded path}/statuses/{sha} with PRIVATE-TOKEN: pending, running, success', async () => {
    const p = (
      await createProject(admin, {
        forge_url: `${forge.url}/group/sub/web.git`,
        commit_status: { provider: 'gitlab', token: TOKEN },
      })
    ).json.project;
    const { id, sent } = await runThrough(p.id, '/api/v4/', 'success', null);
    expect(sent.map((r) => r.url)).toEqual(
      Array(3).fill(`/api/v4/projects/group%2Fsub%2Fweb/statuses/${SHA}`),
    );
    expect(sent.map((r) => r.json.state)).toEqual(['pending', 'running', 'success']);
    for (const r of sent) {
      expect(r.headers['private-token']).toBe(TOKEN);
      expect(r.headers.authorization).toBeUndefined();
      expect(r.json).toMatchObject({
        name: `deckhand/${p.name}`,
        ref: 'main',
        target_url: `${PUBLIC_URL}/deploy/${id}`,
      });
    }
  });

  it('a cancelled deployment is "canceled"', async () => {
    const p = (
      await createProject(admin, {
        forge_url: `${forge.url}/ops/cancel-me.git`,
        commit_status: { provider: 'gitlab', token: TOKEN },
      })
    ).json.project;
    const id = await deploy(p.id);
    await eventually(async () => statuses('/api/v4/projects/ops%2Fcancel-me/').length >= 1);
    expect((await admin.post(`/deploy/${id}/cancel`)).status).toBe(200);
    await eventually(async () => statuses('/api/v4/projects/ops%2Fcancel-me/').length >= 2);
    expect(statuses('/api/v4/projects/ops%2Fcancel-me/').map((r) => r.json.state)).toEqual([
      'pending',
      'canceled',
    ]);
  });
});

describe('settings and failures', () => {
  it('the token is write-only, kept when omitted, stored encrypted; removing stops the reports', async () => {
    const p = (
      await createProject(admin, {
        forge_url: 'https://github.com/acme/web.git',
        commit_status: { provider: 'github', token: TOKEN },
      })
    ).json.project;
    for (const res of [await admin.get(`/projects/${p.id}`), await admin.get('/projects')]) {
      expect(res.text).not.toContain(TOKEN);
    }
    const [row] = await sql(coord, 'select commit_status_token_encrypted from projects where id = ?', [p.id]);
    expect(row.commit_status_token_encrypted).toMatch(/^v1:/);
    expect(row.commit_status_token_encrypted).not.toContain(TOKEN);
    const kept = await patch(admin, `/projects/${p.id}`, {
      commit_status: { provider: 'github', api_url: null },
    });
    expect(kept.json.project.commit_status).toEqual({ provider: 'github', api_url: null, has_token: true });
    expectJsonError(
      await patch(admin, `/projects/${p.id}`, { commit_status: { provider: 'gitlab' } }),
      400,
      'commit_status.token is required',
    );
    const removed = await patch(admin, `/projects/${p.id}`, { commit_status: null });
    expect(removed.json.project.commit_status).toBeNull();
  });

  it('needs a forge_url naming a repository, and an http(s) api_url', async () => {
    expectJsonError(
      await admin.post(
        '/projects',
        sampleProject({ forge_url: '/srv/git/web.git', commit_status: { provider: 'gitea', token: TOKEN } }),
      ),
      400,
    );
    expectJsonError(
      await admin.post(
        '/projects',
        sampleProject({ commit_status: { provider: 'gitea', token: TOKEN, api_url: 'ftp://x.example/api' } }),
      ),
      400,
    );
    expectJsonError(
      await admin.post(
        '/projects',
        sampleProject({ commit_status: { provider: 'bitbucket', token: TOKEN } }),
      ),
      400,
    );
  });

  it('a refusal (401) is recorded and not retried; the deployment is unchanged', async () => {
    const p = (
      await createProject(admin, {
        forge_url: `${forge.url}/acme/refused.git`,
        commit_status: { provider: 'gitea', token: 'wrong' },
      })
    ).json.project;
    const previous = forge.respond;
    forge.respond = (req, i) =>
      req.url.includes('/acme/refused/')
        ? { status: 401, body: '{"message":"token is required"}' }
        : previous(req, i);
    try {
      const id = await deploy(p.id);
      await endDeployment(coord, id, 'success', null);
      const list = await eventually(async () => {
        const all = await notificationsOf(admin, p.id, 'commit_status');
        return all.length > 0 && all.every((n: { state: string }) => n.state !== 'pending') ? all : null;
      });
      const last = list[0];
      expect(last).toMatchObject({ state: 'failed', attempts: 1, deployment_status: 'success' });
      expect(last.last_error).toBe('HTTP 401: {"message":"token is required"}');
      expect((await admin.get(`/deploy/${id}`)).json.deployment.status).toBe('success');
    } finally {
      forge.respond = previous;
    }
  });
});

describe('forge_url → repository', () => {
  it.each([
    [
      'https://github.com/acme/web.git',
      { origin: 'https://github.com', host: 'github.com', path: 'acme/web' },
    ],
    [
      'http://gitea.local:3000/acme/web',
      { origin: 'http://gitea.local:3000', host: 'gitea.local', path: 'acme/web' },
    ],
    [
      'git@gitlab.com:group/sub/web.git',
      { origin: 'https://gitlab.com', host: 'gitlab.com', path: 'group/sub/web' },
    ],
    [
      'ssh://git@code.example:2222/acme/web.git',
      { origin: 'https://code.example', host: 'code.example', path: 'acme/web' },
    ],
    ['/srv/git/web.git', null],
    ['file:///srv/git/web.git', null],
    ['https://github.com/acme', null],
  ])('%s', (url, expected) => {
    expect(parseForgeUrl(url)).toEqual(expected);
  });
});
