// An SSH job when the coordinator running it is SIGKILLed mid-command (its own process, a real
// sshd as the host): the host stops the command's whole process group as the connection dies,
// and the restarted coordinator ends the job `failed` (coordinator lost) once the lease and the
// start-up grace have run out — nothing stays `running`. The next deployment runs normally.
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ed25519KeyPair } from '../../coordinator/src/modules/ssh/ed25519-key.ts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Client, signUp } from '../helpers/coordinator.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { createTestRepo, type TestRepo } from '../helpers/git.ts';
import { type CoordinatorProcess, startCoordinatorProcess } from '../helpers/processes.ts';
import { hostKeyFingerprint, processesWith, startSshd, type TestSshd } from '../helpers/sshd.ts';

const LEASE_MS = 1_500;
const GRACE_MS = 500;

let db: TestDatabase;
let coordinator: CoordinatorProcess;
let admin: Client;
let sshd: TestSshd;
let repo: TestRepo;
let tmp: string;
let projectId: string;

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- the deployment detail JSON
async function waitFor(id: string, ok: (d: any) => boolean, what: string, timeoutMs = 30_000): Promise<any> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const res = await admin.get(`/deploy/${id}`);
    if (res.status === 200 && ok(res.json)) return res.json;
    if (Date.now() > deadline) {
      throw new Error(`${what} did not happen: ${res.text}\n${coordinator.proc.output().slice(-3000)}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
}

beforeAll(async () => {
  tmp = await mkdtemp(join(tmpdir(), 'deckhand-ssh-kill-'));
  const pair = ed25519KeyPair('deckhand-test');
  sshd = await startSshd({ authorizedKeys: [pair.public], extraConfig: [`SetEnv DECKHAND_WORK_DIR=${tmp}`] });
  const fingerprint = await hostKeyFingerprint(sshd, tmp);
  db = await createTestDatabase();
  coordinator = await startCoordinatorProcess({
    DATABASE_URL: db.url,
    DECKHAND_SECRET: randomBytes(32).toString('base64url'),
    SCHEDULER_INTERVAL_MS: '200',
    AGENT_LEASE_MS: String(LEASE_MS),
    AGENT_ABANDON_GRACE_MS: String(GRACE_MS),
  });
  ({ client: admin } = await signUp(coordinator.url));
  repo = await createTestRepo();
  await repo.commit({ 'app.txt': 'v1\n' }, 'first');
  const res = await admin.post('/projects', {
    name: `kill-${randomBytes(3).toString('hex')}`,
    forge_url: repo.url,
    commands: ['echo started; sleep 341 & sleep 351; echo never'],
    target: {
      ssh: {
        host: '127.0.0.1',
        port: sshd.port,
        username: sshd.user,
        private_key: pair.private,
        host_key_fingerprint: fingerprint,
      },
    },
  });
  expect(res.status, res.text).toBe(201);
  projectId = res.json.project.id;
}, 90_000);

afterAll(async () => {
  await coordinator?.stop();
  await sshd?.stop();
  await db?.drop();
  await repo?.remove();
  await rm(tmp, { recursive: true, force: true });
}, 30_000);

describe('the coordinator running an SSH job is killed', () => {
  it('the host stops the command; after a restart the job ends failed, coordinator lost; the next one runs', async () => {
    const first = (await admin.post('/deploy', { projectId })).json.deployId as string;
    await waitFor(first, (d) => d.logs.some((l: { log: string }) => l.log.includes('started\n')), 'output');
    expect(await processesWith('sleep 351')).toHaveLength(1);

    coordinator.proc.child.kill('SIGKILL');
    await coordinator.proc.exited;
    // The connection died with the process: sshd ends the step's stdin, the wrapper stops the group.
    const deadline = Date.now() + 5_000;
    while ((await processesWith('sleep 351')).length + (await processesWith('sleep 341')).length > 0) {
      if (Date.now() > deadline)
        throw new Error(`the remote command outlived its coordinator:\n${await sshd.log()}`);
      await new Promise((r) => setTimeout(r, 100));
    }

    // Sessions live in the database: the admin's cookie still works after the restart.
    await coordinator.restart();
    const ended = await waitFor(first, (d) => d.deployment.status !== 'running', 'the end of the lost job');
    expect(ended.deployment).toMatchObject({
      status: 'failed',
      reason: `${sshd.user}@127.0.0.1:${sshd.port}: coordinator lost (SSH)`,
    });
    expect(ended.logs[1]).toMatchObject({ status: 'failed' });
    expect(ended.logs[1].log).toMatch(/^started\n\n\[deckhand\] coordinator lost \(SSH\)\n$/);

    await admin.request('PATCH', `/projects/${projectId}`, { json: { commands: ['cat app.txt'] } });
    const second = (await admin.post('/deploy', { projectId })).json.deployId as string;
    const done = await waitFor(
      second,
      (d) => ['success', 'failed'].includes(d.deployment.status),
      'the next one',
    );
    expect(done.deployment.status, JSON.stringify(done.logs)).toBe('success');
    expect(done.logs[1].log).toBe('v1\n');
  });
});
