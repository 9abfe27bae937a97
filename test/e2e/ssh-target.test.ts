// Deploying to an SSH target: a real OpenSSH server (Debian's sshd, throw-away host key, logging
// in as the test user with a throw-away key) is the host; the coordinator runs the job itself over
// ssh2 — checkout, each command its own entry, the deployment's environment, secrets masked,
// releases — and ends it with a clear reason when the host key is not the pinned one, the key is
// refused, nothing listens, or the connection drops. Cancels and command timeouts kill the whole
// remote process group, checked on this machine (which is the host).
import { randomBytes } from 'node:crypto';
import { existsSync, readlinkSync, readdirSync, readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ed25519KeyPair } from '../../coordinator/src/modules/ssh/ed25519-key.ts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Client, signUp, startCoordinator, type TestCoordinator } from '../helpers/coordinator.ts';
import { createTestRepo, type TestRepo } from '../helpers/git.ts';
import { hostKeyFingerprint, processesWith, rsaHostKey, startSshd, type TestSshd } from '../helpers/sshd.ts';
import { startTcpProxy, type TcpProxy } from '../helpers/tcp-proxy.ts';

const FINAL = ['success', 'failed', 'cancelled', 'timed_out'];
const LEASE_MS = 1_500;

let coordinator: TestCoordinator | undefined;
let admin: Client;
let repo: TestRepo | undefined;
let sshd: TestSshd | undefined;
let proxy: TcpProxy | undefined;
let workDir: string;
let keyDir: string;
let head: string;
/** The key sshd accepts (OpenSSH private key text). */
let privateKey: string;
/** The server's host key fingerprint, as `ssh-keygen -l` prints it. */
let fingerprint: string;
/** Its second host key's (RSA). */
let rsaFingerprint: string;

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- the deployment detail JSON
type Detail = any;

async function diagnostics(): Promise<string> {
  return `--- sshd\n${(await sshd?.log()) ?? ''}`;
}

async function detail(id: string): Promise<Detail> {
  const res = await admin.get(`/deploy/${id}`);
  expect(res.status, res.text).toBe(200);
  return res.json;
}

async function waitFor(
  id: string,
  ok: (d: Detail) => boolean,
  what: string,
  timeoutMs = 30_000,
): Promise<Detail> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const d = await detail(id);
    if (ok(d)) return d;
    if (Date.now() > deadline) {
      throw new Error(`${what} did not happen: ${JSON.stringify(d, null, 1)}\n${await diagnostics()}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
}

const waitForEnd = (id: string, timeoutMs?: number) =>
  waitFor(id, (d) => FINAL.includes(d.deployment.status), 'the deployment end', timeoutMs);

const waitForOutput = (id: string, text: string) =>
  waitFor(id, (d) => d.logs.some((l: { log: string }) => l.log.includes(text)), `output "${text}"`);

async function deploy(projectId: string): Promise<string> {
  const res = await admin.post('/deploy', { projectId });
  expect(res.status, res.text).toBe(200);
  return res.json.deployId as string;
}

const uniqueName = (prefix: string) => `${prefix}-${randomBytes(3).toString('hex')}`;

/** Creates a project deploying the test repository to the SSH server: its id and name. */
async function sshProject(
  overrides: { ssh?: Record<string, unknown> } & Record<string, unknown> = {},
): Promise<{ id: string; name: string }> {
  const { ssh, ...rest } = overrides;
  const name = uniqueName('ssh');
  const res = await admin.post('/projects', {
    name,
    forge_url: repo!.url,
    branch_name: 'main',
    commands: ['cat app.txt'],
    target: {
      ssh: {
        host: '127.0.0.1',
        port: sshd!.port,
        username: sshd!.user,
        private_key: privateKey,
        host_key_fingerprint: fingerprint,
        ...ssh,
      },
    },
    ...rest,
  });
  expect(res.status, res.text).toBe(201);
  return { id: res.json.project.id as string, name };
}

async function noProcessesLeft(text: string, timeoutMs = 5_000): Promise<string[]> {
  const deadline = Date.now() + timeoutMs;
  let left = await processesWith(text);
  while (left.length > 0 && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 100));
    left = await processesWith(text);
  }
  return left;
}

async function acceptedLogins(): Promise<number> {
  return ((await sshd!.log()).match(/Accepted publickey/g) ?? []).length;
}

beforeAll(async () => {
  workDir = await mkdtemp(join(tmpdir(), 'deckhand-ssh-host-'));
  keyDir = await mkdtemp(join(tmpdir(), 'deckhand-ssh-keys-'));
  const pair = ed25519KeyPair('deckhand-test-target');
  privateKey = pair.private;
  // A second host key, RSA: a pin may name any key the host holds.
  const rsa = await rsaHostKey(keyDir);
  rsaFingerprint = rsa.fingerprint;
  // Where projects go on the host: the host's sshd says so, as an admin may set it.
  sshd = await startSshd({
    authorizedKeys: [pair.public],
    extraConfig: [`SetEnv DECKHAND_WORK_DIR=${workDir}`, `HostKey ${rsa.file}`],
  });
  // The fingerprint as OpenSSH computes it, independently of Deckhand's own code.
  fingerprint = await hostKeyFingerprint(sshd, keyDir);
  expect(fingerprint).toMatch(/^SHA256:[A-Za-z0-9+/]{43}$/);
  proxy = await startTcpProxy(sshd.port);
  // A short lease: the runner must renew the leases of the SSH jobs it holds (there is no agent
  // to be heard from), or a command longer than the lease would be given up as lost.
  coordinator = await startCoordinator({
    SCHEDULER_INTERVAL_MS: '200',
    AGENT_LEASE_MS: String(LEASE_MS),
    AGENT_ABANDON_GRACE_MS: '0',
  });
  ({ client: admin } = await signUp(coordinator.url));
  repo = await createTestRepo();
  head = await repo.commit({ 'app.txt': 'served over ssh\n' }, 'first');
});

afterAll(async () => {
  await coordinator?.close();
  await Promise.allSettled([proxy?.close(), sshd?.stop()]);
  await repo?.remove();
  await rm(workDir, { recursive: true, force: true });
  await rm(keyDir, { recursive: true, force: true });
}, 30_000);

describe('fetching a host key', () => {
  it('shows the fingerprint and algorithm the host presents, and all its keys, as ssh-keygen prints them', async () => {
    const res = await admin.post('/projects/host-key', { host: '127.0.0.1', port: sshd!.port });
    expect(res.status, res.text).toBe(200);
    expect(res.json).toEqual({
      success: true,
      host: '127.0.0.1',
      port: sshd!.port,
      fingerprint,
      algorithm: 'ssh-ed25519',
      keys: [
        { fingerprint, algorithm: 'ssh-ed25519' },
        { fingerprint: rsaFingerprint, algorithm: 'ssh-rsa' },
      ],
    });
  });

  it('answers 502 with the reason when nothing SSH listens there, and 400 for a bad host', async () => {
    const closed = await admin.post('/projects/host-key', { host: '127.0.0.1', port: 1 });
    expect(closed.status).toBe(502);
    expect(closed.json).toEqual({
      success: false,
      error: expect.stringMatching(/127\.0\.0\.1:1.*ECONNREFUSED/),
    });
    const bad = await admin.post('/projects/host-key', { host: '-oProxyCommand=x', port: 22 });
    expect(bad.status).toBe(400);
    expect(bad.json.success).toBe(false);
  });
});

describe('an SSH target project', () => {
  it('keeps the private key write-only and refuses keys that cannot log in', async () => {
    const { id } = await sshProject();
    const res = await admin.get(`/projects/${id}`);
    expect(res.json.project.target).toEqual({
      ssh: { host: '127.0.0.1', port: sshd!.port, username: sshd!.user, host_key_fingerprint: fingerprint },
    });
    expect(res.text).not.toContain('PRIVATE KEY');
    const pub = await admin.post('/projects', {
      name: uniqueName('bad-key'),
      forge_url: repo!.url,
      commands: ['true'],
      target: {
        ssh: {
          host: '127.0.0.1',
          username: 'deploy',
          private_key: ed25519KeyPair('deckhand-test').public,
          host_key_fingerprint: fingerprint,
        },
      },
    });
    expect(pub.status).toBe(400);
    expect(pub.json.error).toBe('target.ssh.private_key is a public key: give the private half');
    const garbage = await admin.post('/projects', {
      name: uniqueName('bad-key'),
      forge_url: repo!.url,
      commands: ['true'],
      target: {
        ssh: {
          host: '127.0.0.1',
          username: 'deploy',
          private_key: 'hello',
          host_key_fingerprint: fingerprint,
        },
      },
    });
    expect(garbage.status).toBe(400);
    expect(garbage.json.error).toMatch(/^target\.ssh\.private_key is not a private key/);
  });
});

describe('a deploy over SSH', () => {
  it('checks out the commit and runs each command as its own entry, with the environment, secrets masked', async () => {
    const { id, name } = await sshProject({
      commands: [
        'echo "hello $GREETING from $PWD at $DECKHAND_COMMIT"',
        'cat app.txt',
        'echo "key=$API_KEY" >&2',
      ],
      env: { GREETING: 'world' },
      secrets: { API_KEY: 'sk-live-over-ssh-secret' },
    });
    const deployId = await deploy(id);
    const d = await waitForEnd(deployId);
    const host = `${sshd!.user}@127.0.0.1:${sshd!.port}`;
    expect(d.deployment, await diagnostics()).toMatchObject({
      status: 'success',
      commit: head,
      hosts: [host],
      reason: `Deployed ${head.slice(0, 12)} to ${host}`,
    });
    expect(
      d.logs.map((l: { cmd: string; host: string; status: string }) => [l.host, l.cmd, l.status]),
    ).toEqual([
      [host, `git checkout --force --detach ${head}`, 'success'],
      [host, 'echo "hello $GREETING from $PWD at $DECKHAND_COMMIT"', 'success'],
      [host, 'cat app.txt', 'success'],
      [host, 'echo "key=$API_KEY" >&2', 'success'],
    ]);
    const project = join(workDir, name);
    expect(d.logs[0].log).toBe(
      [
        `connecting to ${sshd!.user}@127.0.0.1:${sshd!.port} over SSH`,
        `connected; host key ${fingerprint} verified`,
        `$ git clone --no-checkout ${repo!.url} ${project}`,
        `Cloning into '${project}'...`,
        'done.',
        `$ git fetch --force --prune origin '+refs/heads/*:refs/remotes/origin/*'`,
        `$ git checkout --force --detach ${head}`,
        `HEAD is now at ${head.slice(0, 7)} first`,
        '',
      ].join('\n'),
    );
    expect(d.logs[1].log).toBe(`hello world from ${project} at ${head}\n`);
    expect(d.logs[2].log).toBe('served over ssh\n');
    expect(d.logs[3].log).toBe('key=[MASKED]\n');
    expect(readFileSync(join(project, 'app.txt'), 'utf8')).toBe('served over ssh\n');
    // Nothing secret on a command line the host could show: the secret travels on stdin.
    expect(await diagnostics()).not.toContain('sk-live-over-ssh-secret');
  });

  it('accepts a pin of any key the host holds (here its RSA key), and only that key', async () => {
    const { id } = await sshProject({ ssh: { host_key_fingerprint: rsaFingerprint } });
    const d = await waitForEnd(await deploy(id));
    expect(d.deployment.status, JSON.stringify(d.logs)).toBe('success');
    expect(d.logs[0].log).toContain(`connected; host key ${rsaFingerprint} verified\n`);
  });

  it('keeps running past the lease: the coordinator renews the leases of the SSH jobs it holds', async () => {
    const { id } = await sshProject({ commands: [`sleep ${(3 * LEASE_MS) / 1000}; echo still here`] });
    const d = await waitForEnd(await deploy(id));
    expect(d.deployment.status, d.deployment.reason).toBe('success');
    expect(d.logs[1].log).toBe('still here\n');
  });

  it('builds releases, switches current, prunes, rolls back, and switches back when the health check fails', async () => {
    const { id, name } = await sshProject({
      commands: ['echo built > built.txt'],
      releases: { keep: 2, health_check: 'test -f built.txt && test ! -f broken' },
    });
    const project = join(workDir, name);
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) {
      const deployId = await deploy(id);
      const d = await waitForEnd(deployId);
      expect(d.deployment.status, JSON.stringify(d.logs)).toBe('success');
      ids.push(deployId);
    }
    expect(readlinkSync(join(project, 'current'))).toBe(`releases/${ids[2]}`);
    expect(readdirSync(join(project, 'releases')).sort()).toEqual([ids[1], ids[2]].sort());
    const last = await detail(ids[2]!);
    expect(last.logs.map((l: { cmd: string }) => l.cmd)).toEqual([
      `git checkout --force --detach ${head}`,
      'echo built > built.txt',
      `ln -sfn releases/${ids[2]} current`,
      'test -f built.txt && test ! -f broken',
    ]);
    expect(last.logs[2].log).toBe(
      `current -> releases/${ids[2]} (was releases/${ids[1]})\nremoved releases/${ids[0]} (keeping the newest 2)\n`,
    );

    // A rollback to the release before: just the switch and the health check, over SSH too.
    const rolled = await admin.post(`/deploy/${ids[1]}/rollback`, {});
    expect(rolled.status, rolled.text).toBe(200);
    const r = await waitForEnd(rolled.json.deployId);
    expect(r.deployment.status, JSON.stringify(r.logs)).toBe('success');
    expect(r.logs.map((l: { cmd: string }) => l.cmd)).toEqual([
      `ln -sfn releases/${ids[1]} current`,
      'test -f built.txt && test ! -f broken',
    ]);
    expect(r.logs[0].log).toMatch(
      new RegExp(
        `^connecting to .* over SSH\\nconnected; host key SHA256:\\S+ verified\\ncurrent -> releases/${ids[1]} \\(was releases/${ids[2]}\\)\\n`,
      ),
    );
    expect(readlinkSync(join(project, 'current'))).toBe(`releases/${ids[1]}`);

    // The health check fails in the new release: current goes back to where it was.
    await admin.request('PATCH', `/projects/${id}`, { json: { commands: ['touch built.txt broken'] } });
    const failing = await deploy(id);
    const f = await waitForEnd(failing);
    expect(f.deployment.status).toBe('failed');
    expect(f.deployment.reason).toContain(
      'the health check (test -f built.txt && test ! -f broken) exited with code 1',
    );
    expect(f.logs[3].log).toBe(`switched current back to releases/${ids[1]}\n`);
    expect(readlinkSync(join(project, 'current'))).toBe(`releases/${ids[1]}`);
  });
});

describe('refusing to deploy', () => {
  it('fails on a host key that is not the pinned one, sending nothing', async () => {
    const wrong = `SHA256:${randomBytes(32).toString('base64').replace(/=+$/, '')}`;
    const logins = await acceptedLogins();
    const { id } = await sshProject({ ssh: { host_key_fingerprint: wrong } });
    const d = await waitForEnd(await deploy(id));
    expect(d.deployment.status).toBe('failed');
    expect(d.deployment.reason).toBe(
      `${sshd!.user}@127.0.0.1:${sshd!.port}: host key verification failed: the host presented ${fingerprint} (ssh-ed25519), the project pins ${wrong}. Nothing was sent to it. If the host's key changed on purpose, fetch it again (POST /projects/host-key), check it on the host, and update the project's target.ssh.host_key_fingerprint`,
    );
    expect(d.logs.map((l: { status: string }) => l.status)).toEqual(['failed', 'skipped']);
    expect(d.logs[0].log).toContain('[deckhand] host key verification failed');
    expect(await acceptedLogins()).toBe(logins);
  });

  it('fails when the host refuses the key', async () => {
    const other = ed25519KeyPair('deckhand-test').private;
    const { id } = await sshProject({ ssh: { private_key: other } });
    const d = await waitForEnd(await deploy(id));
    expect(d.deployment.status).toBe('failed');
    expect(d.deployment.reason).toBe(
      `${sshd!.user}@127.0.0.1:${sshd!.port}: the host refused the project's private key (authentication failed): add its public half to ~${sshd!.user}/.ssh/authorized_keys on the host`,
    );
    expect(d.logs.map((l: { status: string }) => l.status)).toEqual(['failed', 'skipped']);
  });

  it('fails when nothing listens on the port', async () => {
    const { id } = await sshProject({ ssh: { port: 1 } });
    const d = await waitForEnd(await deploy(id));
    expect(d.deployment.status).toBe('failed');
    expect(d.deployment.reason).toMatch(
      new RegExp(`^${sshd!.user}@127\\.0\\.0\\.1:1: could not connect over SSH: connect ECONNREFUSED`),
    );
  });
});

describe('stopping remote commands', () => {
  it('ends the deployment when the connection drops, and the host stops the command', async () => {
    const { id } = await sshProject({
      ssh: { port: proxy!.port },
      commands: ['echo started; sleep 301 & sleep 311; echo never'],
    });
    const deployId = await deploy(id);
    await waitForOutput(deployId, 'started');
    expect(await processesWith('sleep 311')).toHaveLength(1);
    proxy!.cut();
    try {
      const d = await waitForEnd(deployId, 20_000);
      expect(d.deployment.status).toBe('failed');
      expect(d.deployment.reason).toMatch(
        /^\w+@127\.0\.0\.1:\d+: command 1 \(echo started; sleep 301 & sleep 311; echo never\) failed: the SSH connection was lost: /,
      );
      expect(d.logs[1]).toMatchObject({ status: 'failed' });
      expect(d.logs[1].log).toMatch(/^started\n\n\[deckhand\] the SSH connection was lost: /);
    } finally {
      proxy!.restore();
    }
    // The whole group on the host, background child included.
    expect(await noProcessesLeft('sleep 301')).toEqual([]);
    expect(await noProcessesLeft('sleep 311')).toEqual([]);
  });

  it('cancels: the remote process group dies, later commands are skipped', async () => {
    const { id } = await sshProject({
      commands: ['echo started; sleep 302 & sleep 312; echo never', 'echo after'],
    });
    const deployId = await deploy(id);
    await waitForOutput(deployId, 'started');
    expect(await processesWith('sleep 302')).toHaveLength(1);
    const res = await admin.post(`/deploy/${deployId}/cancel`, {});
    expect(res.status, res.text).toBe(200);
    const d = await waitForEnd(deployId, 20_000);
    expect(d.deployment.status).toBe('cancelled');
    expect(d.logs.map((l: { status: string }) => l.status)).toEqual(['success', 'cancelled', 'skipped']);
    expect(d.logs[1].log).toMatch(/^started\n\n\[deckhand\] cancelled: /);
    expect(await noProcessesLeft('sleep 302')).toEqual([]);
    expect(await noProcessesLeft('sleep 312')).toEqual([]);
  });

  it('stops a deployment past its deadline: timed_out with the limit, the group killed', async () => {
    const { id } = await sshProject({
      commands: ['echo started; sleep 306 & sleep 316'],
      timeouts: { deployment_seconds: 3 },
    });
    const d = await waitForEnd(await deploy(id), 20_000);
    expect(d.deployment).toMatchObject({
      status: 'timed_out',
      reason: 'The deployment ran longer than its limit of 3 s',
    });
    expect(d.logs[1]).toMatchObject({ status: 'timed_out' });
    expect(d.logs[1].log).toMatch(
      /^started\n\n\[deckhand\] timed out: The deployment ran longer than its limit of 3 s\n$/,
    );
    expect(await noProcessesLeft('sleep 306')).toEqual([]);
    expect(await noProcessesLeft('sleep 316')).toEqual([]);
  });

  it('stops a command past its timeout: timed_out, the group killed', async () => {
    const { id } = await sshProject({
      commands: ['echo started; sleep 303 & sleep 313'],
      timeouts: { command_seconds: 2 },
    });
    const d = await waitForEnd(await deploy(id), 20_000);
    expect(d.deployment.status).toBe('timed_out');
    expect(d.deployment.reason).toBe(
      `${sshd!.user}@127.0.0.1:${sshd!.port}: command 1 (echo started; sleep 303 & sleep 313) timed out after 2 s`,
    );
    expect(d.logs[1]).toMatchObject({ status: 'timed_out' });
    expect(d.logs[1].log).toBe('started\n\n[deckhand] timed out after 2 s\n');
    expect(await noProcessesLeft('sleep 303')).toEqual([]);
    expect(await noProcessesLeft('sleep 313')).toEqual([]);
    expect(existsSync(workDir)).toBe(true);
  });
});

describe('a coordinator shutting down', () => {
  it('ends the SSH jobs it runs with the reason, and their hosts stop the commands', async () => {
    const own = await startCoordinator({ SCHEDULER_INTERVAL_MS: '200' });
    try {
      const { client } = await signUp(own.url);
      const created = await client.post('/projects', {
        name: uniqueName('shutdown'),
        forge_url: repo!.url,
        commands: ['echo started; sleep 304 & sleep 314'],
        target: {
          ssh: {
            host: '127.0.0.1',
            port: sshd!.port,
            username: sshd!.user,
            private_key: privateKey,
            host_key_fingerprint: fingerprint,
          },
        },
      });
      expect(created.status, created.text).toBe(201);
      const res = await client.post('/deploy', { projectId: created.json.project.id });
      const deployId = res.json.deployId as string;
      const deadline = Date.now() + 20_000;
      while (!(await client.get(`/deploy/${deployId}`)).text.includes('started\\n')) {
        if (Date.now() > deadline) throw new Error(`the command did not start\n${await diagnostics()}`);
        await new Promise((r) => setTimeout(r, 100));
      }
      const stopping = Date.now();
      await own.app.close();
      expect(Date.now() - stopping).toBeLessThan(5_000);
      const [d] = await own.orm.em
        .fork()
        .execute<Array<{ status: string; reason: string }>>(
          'select status, reason from deployments where id = ?',
          [deployId],
        );
      expect(d).toEqual({
        status: 'failed',
        reason: `${sshd!.user}@127.0.0.1:${sshd!.port}: the coordinator running this job over SSH shut down; the host stopped the running step`,
      });
      expect(await noProcessesLeft('sleep 304')).toEqual([]);
      expect(await noProcessesLeft('sleep 314')).toEqual([]);
    } finally {
      // Closing the app again is a no-op; the database is dropped.
      await own.close();
    }
  });
});
