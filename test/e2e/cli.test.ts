// The `deckhand` command-line client, as a CI job runs it: the real process against a real
// coordinator, a real agent and a real git repository, authenticated with a real API token.
// Checks what it prints and how it exits for every way a deployment can end, for Ctrl-C (with and
// without --cancel-on-interrupt), for a dropped connection (resumed with Last-Event-ID), and for
// the mistakes a user makes (bad token, unknown project).
import { type ChildProcess, spawn } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RunningAgent, startAgent } from '../helpers/agents.ts';
import { type Client, signUp, startCoordinator, type TestCoordinator } from '../helpers/coordinator.ts';
import { createTestRepo, type TestRepo } from '../helpers/git.ts';
import { repoRoot } from '../helpers/processes.ts';
import { startTcpProxy, type TcpProxy } from '../helpers/tcp-proxy.ts';

const FINAL = ['success', 'failed', 'cancelled', 'timed_out'];
const AGENT = 'cli-host';
const UUID = /[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/;

let coordinator: TestCoordinator;
let admin: Client;
let token: string;
let repo: TestRepo;
let sha: string;
let agent: RunningAgent;
const running: ChildProcess[] = [];

interface CliRun {
  child: ChildProcess;
  stdout(): string;
  stderr(): string;
  exited: Promise<number | null>;
}

/** Runs `deckhand …` with only the environment given (plus PATH and HOME): no TTY, so plain output. */
function cli(args: string[], env: Record<string, string> = {}): CliRun {
  const child = spawn(process.execPath, ['cli/bin/deckhand.js', ...args], {
    cwd: repoRoot,
    env: {
      PATH: process.env.PATH,
      HOME: process.env.HOME,
      DECKHAND_URL: coordinator.url,
      DECKHAND_TOKEN: token,
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  running.push(child);
  let out = '';
  let err = '';
  child.stdout!.setEncoding('utf8').on('data', (d: string) => (out += d));
  child.stderr!.setEncoding('utf8').on('data', (d: string) => (err += d));
  const exited = new Promise<number | null>((resolve) => child.on('close', (code) => resolve(code)));
  return { child, stdout: () => out, stderr: () => err, exited };
}

async function runCli(args: string[], env: Record<string, string> = {}) {
  const run = cli(args, env);
  const code = await run.exited;
  return { code, stdout: run.stdout(), stderr: run.stderr() };
}

async function waitFor(
  what: string,
  check: () => boolean | Promise<boolean>,
  run?: CliRun,
  timeoutMs = 20_000,
) {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await check()) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(
    `timed out waiting for ${what}${run ? `\nstdout:\n${run.stdout()}\nstderr:\n${run.stderr()}` : ''}\nagent:\n${agent.output().slice(-3000)}`,
  );
}

function deployIdOf(stdout: string): string {
  const m = new RegExp(`Deployment (${UUID.source}) of`).exec(stdout);
  if (!m) throw new Error(`no deployment id in:\n${stdout}`);
  return m[1]!;
}

async function statusOf(id: string): Promise<string> {
  return (await admin.get(`/deploy/${id}`)).json.deployment.status as string;
}

async function waitForEnd(id: string): Promise<string> {
  let status = '';
  await waitFor(`deployment ${id} to end`, async () => FINAL.includes((status = await statusOf(id))));
  return status;
}

let projectCount = 0;
async function createProject(commands: string[], extra: Record<string, unknown> = {}) {
  const name = `cli-${++projectCount}`;
  const res = await admin.post('/projects', {
    name,
    forge_url: repo.url,
    branch_name: 'main',
    commands,
    target: { agents: { labels: ['cli'] } },
    ...extra,
  });
  expect(res.status, res.text).toBe(201);
  return { id: res.json.project.id as string, name };
}

/** Indexes of each needle in the haystack, in order (each searched after the previous). */
function expectInOrder(haystack: string, needles: string[]) {
  let at = 0;
  for (const needle of needles) {
    const i = haystack.indexOf(needle, at);
    expect(i, `"${needle}" after offset ${at} in:\n${haystack}`).toBeGreaterThanOrEqual(0);
    at = i + needle.length;
  }
}

beforeAll(async () => {
  coordinator = await startCoordinator({ AGENT_HEARTBEAT_MS: '300', SCHEDULER_INTERVAL_MS: '100' });
  ({ client: admin } = await signUp(coordinator.url));
  const created = await admin.post('/tokens', { name: 'ci', scope: 'deploy' });
  expect(created.status, created.text).toBe(201);
  token = created.json.token;
  repo = await createTestRepo();
  sha = await repo.commit({ 'app.txt': 'version 1\n' }, 'first');
  const reg = await admin.post('/agents', { name: AGENT, labels: ['cli'] });
  expect(reg.status, reg.text).toBe(201);
  agent = await startAgent(coordinator.url, reg.json.token);
  await waitFor('the agent to come online', async () => {
    const res = await admin.get('/agents');
    return (res.json.agents as Array<{ name: string; online: boolean }>).some(
      (a) => a.name === AGENT && a.online,
    );
  });
});

afterAll(async () => {
  for (const child of running)
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  await agent?.stop();
  await coordinator?.close();
  await repo?.remove();
}, 60_000);

describe('deckhand deploy --wait', () => {
  let successId: string;
  let failedId: string;

  it('streams each command live, in order, and exits 0 on success', async () => {
    const { name } = await createProject(['echo first', 'echo second; sleep 0.3; echo third', 'cat app.txt']);
    const { code, stdout, stderr } = await runCli(['deploy', '--project', name, '--wait']);
    expect(code, stdout + stderr).toBe(0);
    successId = deployIdOf(stdout);
    expectInOrder(stdout, [
      `Deployment ${successId} of ${name} triggered`,
      `${coordinator.url}/deploy/${successId}`,
      `▶ [${AGENT}] git checkout --force --detach ${sha}`,
      `✔ [${AGENT}] success (exit 0, `,
      `▶ [${AGENT}] echo first\nfirst\n✔ [${AGENT}] success (exit 0, `,
      `▶ [${AGENT}] echo second; sleep 0.3; echo third\nsecond\nthird\n✔ [${AGENT}] success (exit 0, `,
      `▶ [${AGENT}] cat app.txt\nversion 1\n✔ [${AGENT}] success (exit 0, `,
      '✔ Deployment success in ',
    ]);
    expect(stdout).not.toContain(token);
    expect(stderr).not.toContain(token);
    // Plain output: no escape sequences off a terminal.
    expect(stdout).not.toContain('\u001b[');
  });

  it('exits 1 when a command fails, with the reason; later commands are skipped', async () => {
    const { name } = await createProject(['echo before', 'echo boom >&2; exit 3', 'echo never']);
    const { code, stdout, stderr } = await runCli(['deploy', '--project', name, '--wait']);
    expect(code, stdout + stderr).toBe(1);
    failedId = deployIdOf(stdout);
    const detail = (await admin.get(`/deploy/${failedId}`)).json;
    expect(detail.deployment.status).toBe('failed');
    expect(detail.deployment.reason).toBeTruthy();
    expectInOrder(stdout, [
      `▶ [${AGENT}] echo boom >&2; exit 3\nboom\n✖ [${AGENT}] failed (exit 3, `,
      `○ [${AGENT}] skipped: echo never`,
      `✖ Deployment failed in `,
      `: ${detail.deployment.reason}`,
    ]);
    expect(stdout).not.toContain('\nnever\n');
  });

  it('exits 2 when the deployment is cancelled (here through the API)', async () => {
    const { name } = await createProject(['sleep 30']);
    const run = cli(['deploy', '--project', name, '--wait']);
    await waitFor('the command to start', () => run.stdout().includes(`▶ [${AGENT}] sleep 30`), run);
    const id = deployIdOf(run.stdout());
    expect((await admin.post(`/deploy/${id}/cancel`)).status).toBe(200);
    expect(await run.exited, run.stdout() + run.stderr()).toBe(2);
    expectInOrder(run.stdout(), [`✖ [${AGENT}] cancelled`, '✖ Deployment cancelled in ', ': Cancelled by ']);
  });

  it('exits 3 when a command times out', async () => {
    const { name } = await createProject(['sleep 10'], { timeouts: { command_seconds: 1 } });
    const started = Date.now();
    const { code, stdout, stderr } = await runCli(['deploy', '--project', name, '--wait']);
    expect(code, stdout + stderr).toBe(3);
    expect(Date.now() - started).toBeLessThan(9_000);
    expectInOrder(stdout, [`▶ [${AGENT}] sleep 10`, `✖ [${AGENT}] timed_out`, '✖ Deployment timed_out in ']);
  });

  it('--json prints one JSON object per event, then the final deployment', async () => {
    const { name } = await createProject(['echo json-out']);
    const { code, stdout, stderr } = await runCli(['deploy', '--project', name, '--wait', '--json']);
    expect(code, stdout + stderr).toBe(0);
    const lines = stdout.trimEnd().split('\n');
    const objects = lines.map((l) => JSON.parse(l));
    expect(objects[0]).toMatchObject({ event: 'triggered', data: { success: true, project: { name } } });
    const id = objects[0].data.deployId as string;
    expect(objects[0].data.url).toBe(`${coordinator.url}/deploy/${id}`);
    const events = objects.slice(1, -1);
    expect(events.map((e) => e.event)).toContain('deployment');
    expect(events.filter((e) => e.event === 'entry').map((e) => e.data.cmd)).toEqual([
      `git checkout --force --detach ${sha}`,
      `git checkout --force --detach ${sha}`,
      'echo json-out',
      'echo json-out',
    ]);
    expect(
      events
        .filter((e) => e.event === 'output')
        .map((e) => e.data.text)
        .join(''),
    ).toContain('json-out\n');
    for (const e of events) expect(typeof e.id).toBe('string');
    expect(events.at(-1)).toMatchObject({ event: 'end', data: { id, status: 'success' } });
    expect(objects.at(-1)).toMatchObject({
      success: true,
      exit_code: 0,
      deployment: { id, status: 'success' },
    });
  });

  it('without --wait prints the id and URL and exits 0 at once; --json gives them as JSON', async () => {
    const { name, id: projectId } = await createProject(['echo quick']);
    const plain = await runCli(['deploy', '--project', projectId]);
    expect(plain.code, plain.stderr).toBe(0);
    const id = deployIdOf(plain.stdout);
    expect(plain.stdout).toBe(`Deployment ${id} of ${name} triggered\n${coordinator.url}/deploy/${id}\n`);
    await waitForEnd(id);
    const json = await runCli(['deploy', '--project', name, '--json']);
    expect(json.code, json.stderr).toBe(0);
    const answer = JSON.parse(json.stdout);
    expect(answer).toMatchObject({ success: true, project: { id: projectId, name } });
    expect(answer.url).toBe(`${coordinator.url}/deploy/${answer.deployId}`);
    await waitForEnd(answer.deployId);
  });

  it('resumes the live events after a dropped connection, without gaps or repeats', async () => {
    const proxy: TcpProxy = await startTcpProxy(Number(new URL(coordinator.url).port));
    try {
      const { name } = await createProject(['for i in $(seq 1 30); do echo line-$i; sleep 0.1; done']);
      const run = cli(['deploy', '--project', name, '--wait'], { DECKHAND_URL: proxy.url });
      await waitFor('some output', () => run.stdout().includes('line-5\n'), run);
      proxy.cut();
      await new Promise((r) => setTimeout(r, 1_500));
      proxy.restore();
      expect(await run.exited, run.stdout() + run.stderr()).toBe(0);
      const lines = run.stdout().match(/^line-\d+$/gm);
      expect(lines).toEqual(Array.from({ length: 30 }, (_, i) => `line-${i + 1}`));
      expect(run.stderr()).toContain('Connection lost');
      expect(run.stdout()).toContain('✔ Deployment success in ');
    } finally {
      await proxy.close();
    }
  });

  it('Ctrl-C leaves the deployment running and says so (exit 130)', async () => {
    const { name } = await createProject(['sleep 30']);
    const run = cli(['deploy', '--project', name, '--wait']);
    await waitFor('the command to start', () => run.stdout().includes(`▶ [${AGENT}] sleep 30`), run);
    const id = deployIdOf(run.stdout());
    run.child.kill('SIGINT');
    expect(await run.exited, run.stdout() + run.stderr()).toBe(130);
    expect(run.stderr()).toContain(`deployment ${id} was not cancelled, it is still running`);
    await new Promise((r) => setTimeout(r, 500));
    expect(await statusOf(id)).toBe('running');
    await admin.post(`/deploy/${id}/cancel`);
    expect(await waitForEnd(id)).toBe('cancelled');
  });

  it('--cancel-on-interrupt: Ctrl-C cancels the deployment, waits for it, then exits 130', async () => {
    const { name } = await createProject(['sleep 30']);
    const run = cli(['deploy', '--project', name, '--wait', '--cancel-on-interrupt']);
    await waitFor('the command to start', () => run.stdout().includes(`▶ [${AGENT}] sleep 30`), run);
    const id = deployIdOf(run.stdout());
    run.child.kill('SIGINT');
    expect(await run.exited, run.stdout() + run.stderr()).toBe(130);
    // Confirmed before the CLI exited: no waiting needed here.
    expect(await statusOf(id)).toBe('cancelled');
    expect(run.stderr()).toContain(`Interrupted: cancelling deployment ${id}`);
    expectInOrder(run.stdout(), [`✖ [${AGENT}] cancelled`, '✖ Deployment cancelled in ']);
  });

  it('status prints the deployment and exits as it ended; --json is the API answer', async () => {
    const ok = await runCli(['status', successId]);
    expect(ok.code, ok.stderr).toBe(0);
    expectInOrder(ok.stdout, [
      `Deployment  ${successId}`,
      `URL         ${coordinator.url}/deploy/${successId}`,
      'Status      success',
      `Commit      ${sha} (branch main)`,
      `Hosts       ${AGENT}`,
      'Finished    ',
      '(took ',
      'Commands',
      `[${AGENT}]  success  exit 0`,
      'echo first',
    ]);
    const failed = await runCli(['status', failedId]);
    expect(failed.code).toBe(1);
    const detail = (await admin.get(`/deploy/${failedId}`)).json;
    expect(failed.stdout).toContain(`Reason      ${detail.deployment.reason}`);
    expect(failed.stdout).toMatch(/failed +exit 3 +[\d.]+s +echo boom/);
    expect(failed.stdout).toMatch(/skipped +echo never/);
    const json = await runCli(['status', failedId, '--json']);
    expect(json.code).toBe(1);
    expect(JSON.parse(json.stdout)).toMatchObject({
      success: true,
      deployment: { id: failedId, status: 'failed' },
    });
  });

  it('status of a running deployment exits 0', async () => {
    const { name } = await createProject(['sleep 30']);
    const { stdout } = await runCli(['deploy', '--project', name]);
    const id = deployIdOf(stdout);
    await waitFor('it to run', async () => (await statusOf(id)) === 'running');
    const res = await runCli(['status', id]);
    expect(res.code, res.stderr).toBe(0);
    expect(res.stdout).toContain('Status      running');
    expect(res.stdout).toContain('Elapsed');
    const cancelled = await runCli(['cancel', id]);
    expect(cancelled.code, cancelled.stderr).toBe(0);
    expect(cancelled.stdout).toMatch(
      new RegExp(`(Cancel requested: deployment ${id}|Deployment ${id} cancelled)`),
    );
    expect(await waitForEnd(id)).toBe('cancelled');
    const again = await runCli(['cancel', id]);
    expect(again.code).toBe(69);
    expect(again.stderr).toContain('409: The deployment already ended (cancelled)');
  });

  it('logs prints the stored output per command; --follow streams to the end', async () => {
    const res = await runCli(['logs', successId]);
    expect(res.code, res.stderr).toBe(0);
    expectInOrder(res.stdout, [
      `▶ [${AGENT}] echo first\nfirst\n✔ [${AGENT}] success (exit 0, `,
      `▶ [${AGENT}] echo second; sleep 0.3; echo third\nsecond\nthird\n`,
      '✔ Deployment success in ',
    ]);
    const followed = await runCli(['logs', failedId, '--follow']);
    expect(followed.code).toBe(1);
    expectInOrder(followed.stdout, [
      `▶ [${AGENT}] echo before\nbefore\n`,
      'boom\n',
      '✖ Deployment failed in ',
    ]);
    const json = await runCli(['logs', successId, '--json']);
    expect(JSON.parse(json.stdout).logs.map((l: { cmd: string }) => l.cmd)).toContain('echo first');
  });
});

describe('deckhand projects and mistakes', () => {
  it('projects prints a table of name, branch and id', async () => {
    const { id, name } = await createProject(['true']);
    const { code, stdout } = await runCli(['projects']);
    expect(code).toBe(0);
    const lines = stdout.trimEnd().split('\n');
    expect(lines[0]).toMatch(/^NAME +BRANCH +ID$/);
    expect(lines.some((l) => new RegExp(`^${name} +main +${id}$`).test(l))).toBe(true);
    const json = await runCli(['projects', '--json']);
    expect(JSON.parse(json.stdout).projects.map((p: { id: string }) => p.id)).toContain(id);
  });

  it('a bad token: a clear message, exit 64, the token never printed', async () => {
    const bogus = 'dht_not-a-real-token-0123456789';
    const { code, stdout, stderr } = await runCli(['projects'], { DECKHAND_TOKEN: bogus });
    expect(code).toBe(64);
    expect(stderr).toBe(
      'deckhand: 401: Invalid, expired or revoked API token — create one with POST /tokens\n',
    );
    expect(stdout + stderr).not.toContain(bogus);
  });

  it('a revoked token is refused the same way', async () => {
    const created = await admin.post('/tokens', { name: 'short-lived', scope: 'deploy' });
    await admin.request('DELETE', `/tokens/${created.json.api_token.id}`);
    const { code, stderr } = await runCli(['projects'], { DECKHAND_TOKEN: created.json.token });
    expect(code).toBe(64);
    expect(stderr).toContain('401: Invalid, expired or revoked API token');
  });

  it('a read-scope token cannot deploy: 403, exit 64', async () => {
    const { name } = await createProject(['true']);
    const created = await admin.post('/tokens', { name: 'reader', scope: 'read' });
    const { code, stderr } = await runCli(['deploy', '--project', name], {
      DECKHAND_TOKEN: created.json.token,
    });
    expect(code).toBe(64);
    expect(stderr).toMatch(/^deckhand: 403: /);
  });

  it('an unknown project: exit 64, naming the known ones', async () => {
    const { code, stderr } = await runCli(['deploy', '--project', 'no-such-project', '--wait']);
    expect(code).toBe(64);
    expect(stderr).toMatch(/^deckhand: Unknown project 'no-such-project'\. Projects: cli-1, /);
  });

  it('an unknown deployment: 404, exit 64', async () => {
    const { code, stderr } = await runCli(['status', '00000000-0000-4000-8000-000000000000']);
    expect(code).toBe(64);
    expect(stderr).toBe('deckhand: 404: Deployment not found\n');
  });

  it('no URL or token, or an unreachable coordinator', async () => {
    const noUrl = await runCli(['projects'], { DECKHAND_URL: '' });
    expect(noUrl.code).toBe(64);
    expect(noUrl.stderr).toContain('No coordinator URL');
    const noToken = await runCli(['projects'], { DECKHAND_TOKEN: '' });
    expect(noToken.code).toBe(64);
    expect(noToken.stderr).toContain('No API token');
    const plainHttp = await runCli(['projects'], { DECKHAND_URL: 'http://deploy.example.com' });
    expect(plainHttp.code).toBe(64);
    expect(plainHttp.stderr).toContain('Refusing to send the API token unencrypted');
    const proxy = await startTcpProxy(1);
    const url = proxy.url;
    await proxy.close();
    const down = await runCli(['projects'], { DECKHAND_URL: url });
    expect(down.code).toBe(69);
    expect(down.stderr).toContain(`Cannot reach the coordinator at ${url}: connect ECONNREFUSED`);
    expect(down.stdout + down.stderr).not.toContain(token);
  });

  it('usage errors exit 64; --help documents the exit codes', async () => {
    const bad = await runCli(['deploy', '--project', 'x', '--commit', 'not-a-sha']);
    expect(bad.code).toBe(64);
    expect(bad.stderr).toContain('--commit must be a commit sha');
    const unknown = await runCli(['deploy', '--frobnicate']);
    expect(unknown.code).toBe(64);
    const help = await runCli(['--help'], { DECKHAND_URL: '', DECKHAND_TOKEN: '' });
    expect(help.code).toBe(0);
    expect(help.stdout).toMatch(
      /Exit codes:[\s\S]*0 +success[\s\S]*64 +usage[\s\S]*69 +the coordinator[\s\S]*130/,
    );
  });
});
