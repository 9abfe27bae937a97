// Checkouts over ssh with the project's deploy key: a real OpenSSH server serves a real bare
// repository, the coordinator resolves the branch head with `git ls-remote` over ssh and a real
// agent clones over ssh, both with the project's key and strictly checking the forge's host key
// against the project's known_hosts.
import { readFile } from 'node:fs/promises';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { ed25519KeyPair } from '../../coordinator/src/modules/ssh/ed25519-key.ts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RunningAgent, startAgent } from '../helpers/agents.ts';
import { type Client, signUp, startCoordinator, type TestCoordinator } from '../helpers/coordinator.ts';
import { createTestRepo, type TestRepo } from '../helpers/git.ts';
import { startSshd, type TestSshd } from '../helpers/sshd.ts';

const FINAL = ['success', 'failed', 'cancelled', 'timed_out'];
const AGENT = 'ssh-1';

let coordinator: TestCoordinator | undefined;
let admin: Client;
let repo: TestRepo | undefined;
let agent: RunningAgent | undefined;
let sshd: TestSshd | undefined;
let head: string;
/** The project whose deploy key the server accepts, and its forge_url. */
let project: { id: string; forgeUrl: string };

async function diagnostics(): Promise<string> {
  return [`--- agent\n${agent?.output() ?? ''}`, `--- sshd\n${(await sshd?.log()) ?? ''}`].join('\n');
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- the deployment detail JSON
async function waitForEnd(deployId: string, timeoutMs = 20_000): Promise<any> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const res = await admin.get(`/deploy/${deployId}`);
    if (FINAL.includes(res.json.deployment.status)) return res.json;
    await new Promise((r) => setTimeout(r, 100));
  }
  const last = await admin.get(`/deploy/${deployId}`);
  throw new Error(`deployment did not end: ${JSON.stringify(last.json)}\n${await diagnostics()}`);
}

async function deploy(projectId: string, extra: Record<string, unknown> = {}): Promise<string> {
  const res = await admin.post('/deploy', { projectId, ...extra });
  expect(res.status, res.text).toBe(200);
  return res.json.deployId as string;
}

async function waitForAgentOnline(): Promise<void> {
  const deadline = Date.now() + 20_000;
  while (Date.now() < deadline) {
    const res = await admin.get('/agents');
    if (
      (res.json.agents as Array<{ name: string; online: boolean }>).some((a) => a.name === AGENT && a.online)
    )
      return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`agent ${AGENT} did not come online:\n${agent?.output() ?? ''}`);
}

/** A known_hosts line for the server's address with some other host key: the wrong one. */
function wrongHostKeyLine(port: number): string {
  const [type, key] = ed25519KeyPair('deckhand-test').public.trim().split(/\s+/);
  return `[127.0.0.1]:${port} ${type} ${key}`;
}

/** The test user's own known_hosts, which no checkout may add to (null: there is none). */
async function userKnownHosts(): Promise<string | null> {
  return readFile(join(homedir(), '.ssh', 'known_hosts'), 'utf8').catch(() => null);
}

async function createProject(name: string, forgeUrl: string, knownHosts: string | null): Promise<string> {
  const res = await admin.post('/projects', {
    name,
    forge_url: forgeUrl,
    branch_name: 'main',
    commands: ['cat app.txt'],
    target: { agents: { names: [AGENT] } },
    checkout: { known_hosts: knownHosts },
  });
  expect(res.status, res.text).toBe(201);
  return res.json.project.id as string;
}

beforeAll(async () => {
  coordinator = await startCoordinator({ AGENT_HEARTBEAT_MS: '500', SCHEDULER_INTERVAL_MS: '200' });
  ({ client: admin } = await signUp(coordinator.url));
  repo = await createTestRepo();
  head = await repo.commit({ 'app.txt': 'served over ssh\n' }, 'first');
  const registered = await admin.post('/agents', { name: AGENT, labels: ['ssh'] });
  expect(registered.status, registered.text).toBe(201);
  agent = await startAgent(coordinator.url, registered.json.token as string);
  await waitForAgentOnline();

  // The server's address is known only once it runs, and it must already trust the project's key:
  // create the project with a placeholder remote, start the server with its key, then point the
  // project at the server.
  const id = await createProject('over-ssh', 'ssh://root@127.0.0.1:1/placeholder.git', null);
  const created = await admin.get(`/projects/${id}`);
  const publicKey = created.json.project.deploy_key.public_key as string;
  expect(publicKey).toMatch(/^ssh-ed25519 AAAA/);
  sshd = await startSshd({ authorizedKeys: [publicKey] });
  const forgeUrl = `ssh://${sshd.user}@127.0.0.1:${sshd.port}${repo.url}`;
  const patched = await admin.request('PATCH', `/projects/${id}`, {
    json: { forge_url: forgeUrl, checkout: { known_hosts: sshd.hostKeyLine } },
  });
  expect(patched.status, patched.text).toBe(200);
  expect(patched.json.project.deploy_key.public_key).toBe(publicKey);
  project = { id, forgeUrl };
});

afterAll(async () => {
  await Promise.allSettled([agent?.stop(), sshd?.stop()]);
  await coordinator?.close();
  await repo?.remove();
}, 30_000);

describe('a project checked out over ssh with its deploy key', () => {
  it('resolves the branch head over ssh and the agent checks it out with the key', async () => {
    const detail = await waitForEnd(await deploy(project.id));
    expect(detail.deployment, await diagnostics()).toMatchObject({ status: 'success', commit: head });
    expect(detail.logs.map((l: { cmd: string }) => l.cmd)).toEqual([
      `git checkout --force --detach ${head}`,
      'cat app.txt',
    ]);
    expect(detail.logs[0]).toMatchObject({ status: 'success', success: true });
    expect(detail.logs[1]).toMatchObject({ status: 'success', log: 'served over ssh\n' });
    // It really went over ssh with the deploy key.
    expect(await sshd!.log()).toContain(`Accepted publickey for ${sshd!.user} from 127.0.0.1`);
  });

  it('fails to resolve the branch when the host key does not match, and accepts nothing', async () => {
    const wrong = wrongHostKeyLine(sshd!.port);
    const before = await userKnownHosts();
    const id = await createProject('wrong-host-key', project.forgeUrl, wrong);
    const detail = await waitForEnd(await deploy(id));
    expect(detail.deployment.status).toBe('failed');
    expect(detail.deployment.commit).toBeNull();
    expect(detail.deployment.reason).toMatch(/^Could not read branch main of ssh:\/\/[^@]+@127\.0\.0\.1:/);
    expect(detail.deployment.reason).toMatch(/Host key verification failed/);
    expect(detail.logs).toEqual([]);
    // Nothing was auto-accepted: neither into the project's known_hosts nor the user's own.
    const after = await admin.get(`/projects/${id}`);
    expect(after.json.project.checkout.known_hosts).toBe(wrong);
    expect(await userKnownHosts()).toBe(before);
  });

  it("fails the agent's checkout of an explicit commit when the host key does not match", async () => {
    const wrong = wrongHostKeyLine(sshd!.port);
    const before = await userKnownHosts();
    const id = await createProject('wrong-host-key-commit', project.forgeUrl, wrong);
    const detail = await waitForEnd(await deploy(id, { commit: head }));
    expect(detail.deployment).toMatchObject({ status: 'failed', commit: head });
    expect(detail.deployment.reason).toContain(AGENT);
    expect(detail.logs[0]).toMatchObject({
      cmd: `git checkout --force --detach ${head}`,
      status: 'failed',
      success: false,
    });
    expect(detail.logs[0].log).toMatch(/Host key verification failed/);
    expect(detail.logs[1]).toMatchObject({ cmd: 'cat app.txt', status: 'skipped' });
    const after = await admin.get(`/projects/${id}`);
    expect(after.json.project.checkout.known_hosts).toBe(wrong);
    expect(await userKnownHosts()).toBe(before);
  });

  it('fails when the server does not know the deploy key (rotated, the new one not added)', async () => {
    const rotated = await admin.post(`/projects/${project.id}/deploy-key/rotate`);
    expect(rotated.status, rotated.text).toBe(200);
    const detail = await waitForEnd(await deploy(project.id));
    expect(detail.deployment.status).toBe('failed');
    expect(detail.deployment.reason).toMatch(/^Could not read branch main of /);
    expect(detail.deployment.reason).toMatch(/Permission denied \(publickey\)/);
    expect(detail.logs).toEqual([]);
  });
});
