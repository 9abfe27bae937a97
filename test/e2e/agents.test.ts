// Deployments really run on the target hosts: real `deckhand-agent` processes over real
// WebSockets to a real coordinator, checking out real git repositories, with real PostgreSQL.
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { sign } from '@octokit/webhooks-methods';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { CloseCode, PROTOCOL_VERSION } from '../../protocol/src/index.ts';
import { type RunningAgent, startAgent } from '../helpers/agents.ts';
import { type Client, signUp, startCoordinator, type TestCoordinator } from '../helpers/coordinator.ts';
import { createTestRepo, type TestRepo } from '../helpers/git.ts';

const exec = promisify(execFile);
const FINAL = ['success', 'failed', 'cancelled', 'timed_out'];

let coordinator: TestCoordinator;
let admin: Client;
let repo: TestRepo;
const agents: RunningAgent[] = [];

async function registerAgent(name: string, labels: string[]): Promise<string> {
  const res = await admin.post('/agents', { name, labels });
  expect(res.status).toBe(201);
  return res.json.token as string;
}

async function launch(name: string, labels: string[]): Promise<RunningAgent> {
  const agent = await startAgent(coordinator.url, await registerAgent(name, labels));
  agents.push(agent);
  return agent;
}

async function waitForAgentsOnline(names: string[]): Promise<void> {
  const deadline = Date.now() + 20_000;
  while (Date.now() < deadline) {
    const res = await admin.get('/agents');
    const online = (res.json.agents as Array<{ name: string; online: boolean }>)
      .filter((a) => a.online)
      .map((a) => a.name);
    if (names.every((n) => online.includes(n))) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(
    `agents ${names.join(', ')} did not come online:\n${agents.map((a) => a.output()).join('\n---\n')}`,
  );
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- the deployment detail JSON
async function waitForEnd(deployId: string, timeoutMs = 30_000): Promise<any> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const res = await admin.get(`/deploy/${deployId}`);
    if (FINAL.includes(res.json.deployment.status)) return res.json;
    await new Promise((r) => setTimeout(r, 100));
  }
  const last = await admin.get(`/deploy/${deployId}`);
  throw new Error(
    `deployment did not end: ${JSON.stringify(last.json)}\n${agents.map((a) => a.output()).join('\n---\n')}`,
  );
}

async function createProject(body: Record<string, unknown>): Promise<{ id: string; secret: string }> {
  const res = await admin.post('/projects', { forge_url: repo.url, branch_name: 'main', ...body });
  expect(res.status).toBe(201);
  return { id: res.json.project.id, secret: res.json.webhook.secret };
}

beforeAll(async () => {
  coordinator = await startCoordinator({ AGENT_HEARTBEAT_MS: '500', SCHEDULER_INTERVAL_MS: '200' });
  ({ client: admin } = await signUp(coordinator.url));
  repo = await createTestRepo();
  await repo.commit({ 'app.txt': 'version 1\n' }, 'first');
});

afterAll(async () => {
  await Promise.all(agents.map((a) => a.stop()));
  await coordinator?.close();
  await repo?.remove();
}, 60_000);

describe('a deployment across two agents', () => {
  it('runs on every host, checks out the commit, and ends success with per-command logs in order', async () => {
    const a1 = await launch('web-1', ['web']);
    await launch('web-2', ['web']);
    await waitForAgentsOnline(['web-1', 'web-2']);
    const sha = await repo.commit({ 'app.txt': 'version 2\n' }, 'second');
    const { id } = await createProject({
      name: 'site',
      commands: [
        'cat app.txt',
        'printf "line 1\\nline 2\\n"; echo oops >&2',
        'echo "$GREETING $API_KEY $DECKHAND_COMMIT $DECKHAND_PROJECT"',
      ],
      target: { agents: { labels: ['web'] } },
      env: { GREETING: 'hello' },
      secrets: { API_KEY: 'sk-123' },
    });
    const res = await admin.post('/deploy', { projectId: id });
    expect(res.status).toBe(200);
    const detail = await waitForEnd(res.json.deployId);
    expect(detail.deployment).toMatchObject({ status: 'success', commit: sha, hosts: ['web-1', 'web-2'] });
    expect(detail.deployment.finished_at).toMatch(/Z$/);
    for (const host of ['web-1', 'web-2']) {
      const logs = detail.logs.filter((l: { host: string }) => l.host === host);
      expect(logs.map((l: { cmd: string }) => l.cmd)).toEqual([
        `git checkout --force --detach ${sha}`,
        'cat app.txt',
        'printf "line 1\\nline 2\\n"; echo oops >&2',
        'echo "$GREETING $API_KEY $DECKHAND_COMMIT $DECKHAND_PROJECT"',
      ]);
      expect(
        logs.every((l: { status: string; success: boolean }) => l.status === 'success' && l.success),
      ).toBe(true);
      expect(logs[1].log).toBe('version 2\n');
      expect(logs[2].log).toContain('line 1\nline 2\n');
      expect(logs[2].log).toContain('oops\n');
      // The secret reaches the command, and never the log: it is masked on the host.
      expect(logs[3].log).toBe(`hello [MASKED] ${sha} site\n`);
    }
    const starts = detail.logs.map((l: { started_at: string }) => l.started_at);
    expect([...starts].sort()).toEqual(starts);
    // The host really checked out that commit.
    const { stdout } = await exec('git', ['rev-parse', 'HEAD'], { cwd: join(a1.workDir, 'site') });
    expect(stdout.trim()).toBe(sha);
  });

  it('stops at a failing command: the rest are skipped and the deployment fails with the reason', async () => {
    const { id } = await createProject({
      name: 'broken',
      commands: ['echo before', 'exit 3', 'echo never'],
      target: { agents: { names: ['web-1'] } },
    });
    const res = await admin.post('/deploy', { projectId: id });
    const detail = await waitForEnd(res.json.deployId);
    expect(detail.deployment.status).toBe('failed');
    expect(detail.deployment.reason).toContain('web-1');
    expect(detail.deployment.reason).toContain('exit 3');
    const byCmd = Object.fromEntries(detail.logs.map((l: { cmd: string }) => [l.cmd, l]));
    expect(byCmd['echo before']).toMatchObject({ status: 'success', success: true, log: 'before\n' });
    expect(byCmd['exit 3']).toMatchObject({ status: 'failed', success: false, exit_code: 3 });
    expect(byCmd['echo never']).toMatchObject({ status: 'skipped', success: false, log: '' });
    expect(byCmd['echo never'].started_at).toBe(byCmd['echo never'].finished_at);
  });
});

describe('agent presence', () => {
  it('GET /agents shows who is connected, their version and when they were last seen, live', async () => {
    const agent = await launch('presence-1', ['presence']);
    await waitForAgentsOnline(['presence-1']);
    const before = (await admin.get('/agents')).json.agents.find(
      (a: { name: string }) => a.name === 'presence-1',
    );
    expect(before).toMatchObject({ online: true, version: '0.1.0', labels: ['presence'] });
    expect(Date.now() - Date.parse(before.last_seen_at)).toBeLessThan(5_000);
    await agent.stop();
    const deadline = Date.now() + 5_000;
    let after = before;
    while (after.online && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 100));
      after = (await admin.get('/agents')).json.agents.find((a: { name: string }) => a.name === 'presence-1');
    }
    expect(after.online).toBe(false);
  });
});

describe('a deployment waiting for an offline host', () => {
  it('waits queued with a reason naming the host, and runs when it connects', async () => {
    const token = await registerAgent('late-1', ['late']);
    const { id } = await createProject({
      name: 'late',
      commands: ['echo ran'],
      target: { agents: { labels: ['late'] } },
    });
    const res = await admin.post('/deploy', { projectId: id });
    await new Promise((r) => setTimeout(r, 600));
    const waiting = await admin.get(`/deploy/${res.json.deployId}`);
    expect(waiting.json.deployment.status).toBe('queued');
    expect(waiting.json.deployment.reason).toBe('Waiting for agent late-1 (offline)');
    agents.push(await startAgent(coordinator.url, token));
    const detail = await waitForEnd(res.json.deployId);
    expect(detail.deployment.status).toBe('success');
    expect(detail.logs.at(-1)).toMatchObject({ cmd: 'echo ran', log: 'ran\n' });
  });
});

describe('a signed push', () => {
  it('deploys exactly the pushed commit, even after the branch moved on', async () => {
    const pushed = await repo.commit({ 'app.txt': 'pushed\n' }, 'pushed');
    await repo.commit({ 'app.txt': 'later\n' }, 'later');
    const { id, secret } = await createProject({
      name: 'hooked',
      commands: ['cat app.txt'],
      target: { agents: { names: ['web-2'] } },
    });
    const body = JSON.stringify({ ref: 'refs/heads/main', after: pushed, pusher: { name: 'octo' } });
    const res = await fetch(`${coordinator.url}/webhook/${id}`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        'x-github-event': 'push',
        'x-github-delivery': 'e2e-1',
        'x-hub-signature-256': await sign(secret, body),
      },
      body,
    });
    expect(await res.text()).toBe('Deployment triggered');
    const list = await admin.get(`/deployments?project_id=${id}`);
    const detail = await waitForEnd(list.json.deployments[0].id);
    expect(detail.deployment).toMatchObject({ status: 'success', commit: pushed, trigger: 'webhook' });
    expect(detail.logs[0].cmd).toBe(`git checkout --force --detach ${pushed}`);
    expect(detail.logs[1].log).toBe('pushed\n');
  });
});

describe('watching a deployment live', () => {
  it('streams output as server-sent events while the command runs, and resumes from Last-Event-ID', async () => {
    const { id } = await createProject({
      name: 'live',
      commands: ['for i in 1 2 3 4 5; do echo "tick $i"; sleep 0.3; done'],
      target: { agents: { names: ['web-1'] } },
    });
    const res = await admin.post('/deploy', { projectId: id });
    const deployId = res.json.deployId as string;
    const stream = await fetch(`${coordinator.url}/deploy/${deployId}/events`, {
      headers: { cookie: admin.cookie! },
    });
    expect(stream.status).toBe(200);
    expect(stream.headers.get('content-type')).toMatch(/^text\/event-stream/);
    const reader = stream.body!.getReader();
    const decoder = new TextDecoder();
    let buffer = '';
    let text = '';
    let firstOutputAt = 0;
    let lastId = '';
    const events: string[] = [];
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let end: number;
      while ((end = buffer.indexOf('\n\n')) >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        const field = (name: string) =>
          block
            .split('\n')
            .find((l) => l.startsWith(`${name}: `))
            ?.slice(name.length + 2);
        const event = field('event');
        if (!event) continue;
        events.push(event);
        lastId = field('id') ?? lastId;
        const data = JSON.parse(field('data')!);
        if (event === 'output' && data.seq === 1) {
          firstOutputAt ||= Date.now();
          text += data.text;
        }
      }
    }
    const detail = await waitForEnd(deployId);
    const finishedAt = Date.parse(detail.deployment.finished_at);
    expect(text).toBe('tick 1\ntick 2\ntick 3\ntick 4\ntick 5\n');
    // Live: the first line arrived well before the command ended.
    expect(finishedAt - firstOutputAt).toBeGreaterThan(700);
    expect(events[0]).toBe('deployment');
    expect(events.at(-1)).toBe('end');
    // Resuming from the last id sends nothing again but the state and the end.
    const again = await fetch(`${coordinator.url}/deploy/${deployId}/events`, {
      headers: { cookie: admin.cookie!, 'last-event-id': lastId },
    });
    const rest = await again.text();
    expect(rest).not.toContain('event: output');
    expect(rest).toContain('event: end');
  });
});

describe('the agent endpoint refuses', () => {
  const wsUrl = () => `${coordinator.url.replace('http', 'ws')}/agent/ws`;

  it('a bad token, before the upgrade', async () => {
    const status = await new Promise<number>((resolve) => {
      const ws = new WebSocket(wsUrl(), { headers: { authorization: 'Bearer dha_forged' } });
      ws.on('unexpected-response', (_req, res) => resolve(res.statusCode ?? 0));
      ws.on('open', () => resolve(101));
    });
    expect(status).toBe(401);
  });

  it('a protocol version mismatch, with a reason that says what to do', async () => {
    const token = await registerAgent('old-1', ['old']);
    const ws = new WebSocket(wsUrl(), { headers: { authorization: `Bearer ${token}` } });
    const frames: string[] = [];
    ws.on('message', (d) => frames.push(d.toString()));
    await new Promise((r) => ws.on('open', r));
    ws.send(
      JSON.stringify({
        type: 'hello',
        protocolVersion: PROTOCOL_VERSION - 1,
        agentVersion: '0.0.1',
        hostname: 'h',
        labels: [],
        runningJobs: [],
      }),
    );
    const code = await new Promise<number>((r) => ws.on('close', (c) => r(c)));
    expect(code).toBe(CloseCode.VERSION_MISMATCH);
    expect(JSON.parse(frames[0]!)).toMatchObject({ type: 'reject' });
    const reason = JSON.parse(frames[0]!).reason as string;
    expect(reason).toMatch(/Upgrade the agent/);
    // How: the file to download, and the CLI command for an agent installed over SSH.
    const base = coordinator.url;
    expect(reason).toContain(
      `download it from ${base}/agent/download (curl -fsSLo deckhand-agent.js ${base}/agent/download)`,
    );
    expect(reason).toContain('deckhand agents upgrade --host h --user <ssh user> --name old-1');
  });

  it('a malformed frame, closing only that connection', async () => {
    const token = await registerAgent('rogue-1', ['rogue']);
    const ws = new WebSocket(wsUrl(), { headers: { authorization: `Bearer ${token}` } });
    await new Promise((r) => ws.on('open', r));
    ws.send('{"type":"hello", nope');
    const code = await new Promise<number>((r) => ws.on('close', (c) => r(c)));
    expect(code).toBe(CloseCode.BAD_FRAME);
    // The coordinator and the other agents carry on.
    await waitForAgentsOnline(['web-1', 'web-2']);
    expect((await admin.get('/healthz')).status).toBe(200);
  });
});
