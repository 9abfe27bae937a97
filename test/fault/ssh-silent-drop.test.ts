// An SSH connection that drops silently — packets stop, nothing closes (a cable pulled, a NAT
// entry expired, a firewall dropping) — between the coordinator and a real sshd, through a proxy
// that freezes: the coordinator gives the connection up within its keepalive window (5 s × 3,
// gone at the fourth) and fails the deployment saying so; the host, which is never told (sshd
// without ClientAliveInterval notices nothing), stops the command because the step's heartbeats
// stop. A host that accepts TCP but never speaks SSH fails the deployment at the connect timeout.
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ed25519KeyPair } from '../../coordinator/src/modules/ssh/ed25519-key.ts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Client, signUp, startCoordinator, type TestCoordinator } from '../helpers/coordinator.ts';
import { createTestRepo, type TestRepo } from '../helpers/git.ts';
import { hostKeyFingerprint, processesWith, startSshd, type TestSshd } from '../helpers/sshd.ts';
import { startTcpProxy, type TcpProxy } from '../helpers/tcp-proxy.ts';

const FINAL = ['success', 'failed', 'cancelled', 'timed_out'];
/** The coordinator's keepalive timeout (coordinator/src/modules/ssh: 5 s, three unanswered). */
const SILENCE_MS = 20_000;
/** Its connect timeout (coordinator/src/modules/ssh/ssh-runner.ts). */
const CONNECT_TIMEOUT_MS = 20_000;

let coordinator: TestCoordinator | undefined;
let admin: Client;
let repo: TestRepo | undefined;
let sshd: TestSshd | undefined;
const proxies: TcpProxy[] = [];
let tmp: string;
let privateKey: string;
let fingerprint: string;

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- the deployment detail JSON
type Detail = any;

async function waitFor(
  id: string,
  ok: (d: Detail) => boolean,
  what: string,
  timeoutMs: number,
): Promise<Detail> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const res = await admin.get(`/deploy/${id}`);
    expect(res.status, res.text).toBe(200);
    if (ok(res.json)) return res.json;
    if (Date.now() > deadline) {
      throw new Error(`${what} did not happen: ${res.text}\n--- sshd\n${(await sshd?.log()) ?? ''}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
}

async function proxy(): Promise<TcpProxy> {
  const p = await startTcpProxy(sshd!.port);
  proxies.push(p);
  return p;
}

async function deployThrough(port: number, commands: string[]): Promise<string> {
  const project = await admin.post('/projects', {
    name: `silent-${randomBytes(3).toString('hex')}`,
    forge_url: repo!.url,
    branch_name: 'main',
    commands,
    target: {
      ssh: {
        host: '127.0.0.1',
        port,
        username: sshd!.user,
        private_key: privateKey,
        host_key_fingerprint: fingerprint,
      },
    },
  });
  expect(project.status, project.text).toBe(201);
  const res = await admin.post('/deploy', { projectId: project.json.project.id });
  expect(res.status, res.text).toBe(200);
  return res.json.deployId as string;
}

beforeAll(async () => {
  tmp = await mkdtemp(join(tmpdir(), 'deckhand-ssh-silent-'));
  const pair = ed25519KeyPair('deckhand-test');
  privateKey = pair.private;
  // No ClientAliveInterval: like a stock sshd, the host learns of a silent drop from nobody.
  sshd = await startSshd({ authorizedKeys: [pair.public], extraConfig: [`SetEnv DECKHAND_WORK_DIR=${tmp}`] });
  fingerprint = await hostKeyFingerprint(sshd, tmp);
  coordinator = await startCoordinator({ SCHEDULER_INTERVAL_MS: '200' });
  ({ client: admin } = await signUp(coordinator.url));
  repo = await createTestRepo();
  await repo.commit({ 'app.txt': 'v1\n' }, 'first');
}, 90_000);

afterAll(async () => {
  await coordinator?.close();
  await Promise.allSettled([...proxies.map((p) => p.close()), sshd?.stop()]);
  await repo?.remove();
  await rm(tmp, { recursive: true, force: true });
}, 30_000);

describe('an SSH connection that goes silent mid-command', () => {
  it('fails the deployment within the keepalive window, and the host stops the command', async () => {
    const silent = await proxy();
    const deployId = await deployThrough(silent.port, ['echo started; sleep 322 & sleep 332; echo never']);
    await waitFor(
      deployId,
      (d) => d.logs.some((l: { log: string }) => l.log.includes('started\n')),
      'the command start',
      30_000,
    );
    expect(await processesWith('sleep 332')).toHaveLength(1);

    silent.freeze();
    const frozenAt = Date.now();
    const d = await waitFor(
      deployId,
      (x) => FINAL.includes(x.deployment.status),
      'the end',
      SILENCE_MS + 10_000,
    );
    const noticedAfter = Date.now() - frozenAt;
    expect(d.deployment.status).toBe('failed');
    expect(d.deployment.reason).toBe(
      `${sshd!.user}@127.0.0.1:${silent.port}: command 1 (echo started; sleep 322 & sleep 332; echo never) failed: ` +
        `the SSH connection was lost: the host did not answer for 20 s (keepalives unanswered)`,
    );
    expect(d.logs[1]).toMatchObject({ status: 'failed' });
    // Noticed by the keepalives, not by anything closing: not before three of them went unanswered.
    expect(noticedAfter).toBeGreaterThanOrEqual(SILENCE_MS - 6_000);
    expect(noticedAfter).toBeLessThan(SILENCE_MS + 5_000);

    // sshd's side of the connection is still open (the proxy holds it frozen), so its stdin never
    // ended: the wrapper stops the group because the heartbeats stopped, background child included.
    const deadline = frozenAt + SILENCE_MS + 10_000;
    let left = [...(await processesWith('sleep 322')), ...(await processesWith('sleep 332'))];
    while (left.length > 0 && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 200));
      left = [...(await processesWith('sleep 322')), ...(await processesWith('sleep 332'))];
    }
    expect(left, (await sshd!.log()).slice(-2000)).toEqual([]);
  }, 60_000);
});

describe('a host that accepts TCP but never speaks SSH', () => {
  it('fails the deployment at the connect timeout, saying the handshake never came', async () => {
    const mute = await proxy();
    mute.freeze();
    const startedAt = Date.now();
    const deployId = await deployThrough(mute.port, ['echo never']);
    const d = await waitFor(
      deployId,
      (x) => FINAL.includes(x.deployment.status),
      'the end',
      CONNECT_TIMEOUT_MS + 15_000,
    );
    expect(d.deployment.status).toBe('failed');
    expect(d.deployment.reason).toBe(
      `${sshd!.user}@127.0.0.1:${mute.port}: could not connect over SSH within 20 s: ` +
        'the host accepted the TCP connection but never completed an SSH handshake',
    );
    expect(Date.now() - startedAt).toBeGreaterThanOrEqual(CONNECT_TIMEOUT_MS - 1_000);
  }, 60_000);
});
