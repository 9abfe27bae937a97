// GET /projects/:id/releases against a real agent's release folders: every release it lists to
// roll back to still exists on the host, the live one is what `current` points at, and rolling
// back to each listed one works.
import { readdir, readlink } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RunningAgent, startAgent } from '../helpers/agents.ts';
import { type Client, signUp, startCoordinator, type TestCoordinator } from '../helpers/coordinator.ts';
import { createTestRepo, type TestRepo } from '../helpers/git.ts';
import { expectJsonError } from '../helpers/responses.ts';

const FINAL = ['success', 'failed', 'cancelled', 'timed_out'];

let coord: TestCoordinator;
let admin: Client;
let repo: TestRepo;
let agent: RunningAgent;

async function finished(id: string): Promise<string> {
  const deadline = Date.now() + 30_000;
  while (Date.now() < deadline) {
    const status = (await admin.get(`/deploy/${id}`)).json.deployment.status as string;
    if (FINAL.includes(status)) return status;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`deployment ${id} did not end:\n${agent.output()}`);
}

async function deploy(projectId: string): Promise<{ id: string; status: string }> {
  const res = await admin.post('/deploy', { projectId });
  expect(res.status, res.text).toBe(200);
  return { id: res.json.deployId, status: await finished(res.json.deployId) };
}

beforeAll(async () => {
  coord = await startCoordinator({ AGENT_HEARTBEAT_MS: '500', SCHEDULER_INTERVAL_MS: '200' });
  admin = (await signUp(coord.url)).client;
  repo = await createTestRepo();
  await repo.commit({ 'app.txt': 'v1\n' }, 'first');
  const res = await admin.post('/agents', { name: 'web-1', labels: ['web'] });
  agent = await startAgent(coord.url, res.json.token);
}, 60_000);

afterAll(async () => {
  await agent?.stop();
  await coord?.close();
  await repo?.remove();
}, 60_000);

describe('GET /projects/:id/releases', () => {
  it('lists the successful releases the host still keeps, and the live one', async () => {
    const created = await admin.post('/projects', {
      name: 'kept',
      forge_url: repo.url,
      // Fails when app.txt says so: a failed build that still takes a slot.
      commands: ['! grep -q broken app.txt'],
      target: { agents: { labels: ['web'] } },
      releases: { keep: 2 },
    });
    expect(created.status, created.text).toBe(201);
    const projectId = created.json.project.id as string;
    let res = await admin.get(`/projects/${projectId}/releases`);
    expect(res.json).toEqual({ success: true, live: null, releases: [] });

    const a = await deploy(projectId);
    await repo.commit({ 'app.txt': 'v2\n' }, 'second');
    const b = await deploy(projectId);
    await repo.commit({ 'app.txt': 'v3\n' }, 'third');
    const c = await deploy(projectId);
    await repo.commit({ 'app.txt': 'broken\n' }, 'broken');
    const d = await deploy(projectId);
    expect([a.status, b.status, c.status, d.status]).toEqual(['success', 'success', 'success', 'failed']);

    res = await admin.get(`/projects/${projectId}/releases`);
    expect(res.status).toBe(200);
    // The newest two builds are d (failed) and c: only c is offered; a and b are (or may be) pruned.
    expect(res.json.live).toBe(c.id);
    expect(res.json.releases.map((r: { id: string }) => r.id)).toEqual([c.id]);

    // What the host really has: every listed release exists, and current is the live one.
    const folder = join(agent.workDir, 'kept');
    const onDisk = await readdir(join(folder, 'releases'));
    for (const r of res.json.releases) expect(onDisk).toContain(r.id);
    expect(await readlink(join(folder, 'current'))).toBe(`releases/${c.id}`);
    expect(onDisk).not.toContain(a.id);

    // A new build, then a rollback to c (still on the host: the previous live release is spared).
    await repo.commit({ 'app.txt': 'v5\n' }, 'fixed');
    const e = await deploy(projectId);
    expect(e.status).toBe('success');
    res = await admin.get(`/projects/${projectId}/releases`);
    expect(res.json.live).toBe(e.id);
    expect(res.json.releases.map((r: { id: string }) => r.id)).toEqual([e.id]);
    const rollback = await admin.post(`/deploy/${c.id}/rollback`);
    expect(rollback.status, rollback.text).toBe(200);
    expect(await finished(rollback.json.deployId)).toBe('success');
    res = await admin.get(`/projects/${projectId}/releases`);
    expect(res.json.live).toBe(c.id);
    expect(await readlink(join(folder, 'current'))).toBe(`releases/${c.id}`);
  }, 90_000);

  it('is empty without releases; 404 for an unknown project; readers need a session', async () => {
    const created = await admin.post('/projects', {
      name: 'plain',
      forge_url: repo.url,
      commands: ['true'],
      target: { agents: { labels: ['web'] } },
    });
    const res = await admin.get(`/projects/${created.json.project.id}/releases`);
    expect(res.json).toEqual({ success: true, live: null, releases: [] });
    expectJsonError(
      await admin.get('/projects/00000000-0000-4000-8000-000000000000/releases'),
      404,
      'Project not found',
    );
    const anonymous = await fetch(`${coord.url}/projects/${created.json.project.id}/releases`);
    expect(anonymous.status).toBe(401);
  });
});
