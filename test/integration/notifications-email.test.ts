// Mail when a deployment ends (API.md "Projects": notifications): a real SMTP server receives it;
// the failing command's output tail, escaped HTML, a plain-text part and the link are checked the
// way a mail client would read them. A mail that cannot be sent never changes the deployment.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { SmtpSettings } from '../../coordinator/src/modules/mail/mailer.ts';
import { NotificationWorker } from '../../coordinator/src/modules/notification/notification.worker.ts';
import { Mailer } from '../../coordinator/src/modules/mail/mailer.ts';
import { deriveKey, SecretBox } from '../../coordinator/src/modules/common/crypto.ts';
import {
  type Client,
  sampleProject,
  signUp,
  startCoordinator,
  type TestCoordinator,
} from '../helpers/coordinator.ts';
import { parseMail } from '../helpers/mail-parser.ts';
import {
  endDeployment,
  eventually,
  FAST_NOTIFY,
  noticed,
  notificationsOf,
} from '../helpers/notifications.ts';
import { patch } from '../helpers/projects.ts';
import { expectJsonError } from '../helpers/responses.ts';
import { closedPort, startTestSmtpServer, type TestSmtpServer } from '../helpers/smtp-server.ts';
import { sql } from '../helpers/sql.ts';

const PUBLIC_URL = 'https://deploy.example.com';
let smtp: TestSmtpServer;
let smtpSettings: SmtpSettings | null;
let coord: TestCoordinator;
let admin: Client;

beforeAll(async () => {
  smtp = await startTestSmtpServer();
  smtpSettings = { url: smtp.url, from: 'Deckhand <deckhand@example.com>' };
  coord = await startCoordinator(
    { ...FAST_NOTIFY, NOTIFY_RETRY_ATTEMPTS: '2', PUBLIC_URL },
    { smtpSettings: async () => smtpSettings },
  );
  ({ client: admin } = await signUp(coord.url));
});

afterAll(async () => {
  await coord?.close();
  await smtp?.close();
});

async function project(notifications: unknown, overrides: Record<string, unknown> = {}) {
  const res = await admin.post('/projects', sampleProject({ notifications, ...overrides }));
  expect(res.status, res.text).toBe(201);
  return res.json.project as { id: string; name: string; notifications: unknown };
}

/** A deployment that waits in the queue (no agent has the label), until the test ends it. */
async function deploy(projectId: string): Promise<string> {
  const res = await admin.post('/deploy', { projectId, commit: 'a1b2c3d4e5f60718293a4b5c6d7e8f9012345678' });
  expect(res.status, res.text).toBe(200);
  return res.json.deployId;
}

const manyLines = Array.from({ length: 120 }, (_, i) => `step ${i + 1} done`).join('\n');
const hostile = '<script>alert("x")</script> & <img src=x onerror=alert(1)>';

describe('a failed deployment', () => {
  it('mails every address once: output tail, escaped HTML, a plain-text part and the link', async () => {
    const p = await project({ emails: ['ops@example.com', 'dev@example.com'], on: 'failure' });
    expect(p.notifications).toEqual({ emails: ['ops@example.com', 'dev@example.com'], on: 'failure' });
    const id = await deploy(p.id);
    await endDeployment(coord, id, 'failed', 'Command failed on web-1: npm run build (exit 2)', [
      { cmd: 'git checkout', status: 'success', output: 'HEAD is now at a1b2c3d\n' },
      {
        cmd: 'npm run build && echo "<done>"',
        status: 'failed',
        exitCode: 2,
        output: `${manyLines}\n${hostile}\n`,
      },
      { cmd: 'systemctl restart web', status: 'skipped' },
    ]);

    const message = await smtp.waitForMessage(10_000);
    expect(message.to.sort()).toEqual(['dev@example.com', 'ops@example.com']);
    expect(message.subject).toBe(`[Deckhand] ${p.name}: deployment failed (a1b2c3d4e5f6 on main)`);
    const mail = parseMail(message.raw);

    // The plain-text part: the facts, the failing command and the last 50 lines of its output.
    const text = mail.text!;
    expect(text).toContain('Status:   failed');
    expect(text).toContain('Reason:   Command failed on web-1: npm run build (exit 2)');
    expect(text).toContain('Commit:   a1b2c3d4e5f60718293a4b5c6d7e8f9012345678 on main');
    expect(text).toContain('Trigger:  manual by');
    expect(text).toMatch(/Duration: \d/);
    expect(text).toContain('$ npm run build && echo "<done>"');
    expect(text).toContain('failed, exit code 2. The last lines of its output:');
    expect(text).toContain('step 120 done');
    expect(text).toContain('step 72 done'); // 49 lines of steps + the hostile line = the last 50
    expect(text).not.toContain('step 71 done');
    expect(text).toContain(hostile); // plain text carries it as it is
    expect(text).toContain(`Open the deployment: ${PUBLIC_URL}/deploy/${id}`);
    expect(text).not.toContain('systemctl'); // skipped commands are not the failing one

    // The HTML part: everything untrusted is escaped, nothing of it is markup.
    const html = mail.html!;
    expect(html).toContain(
      '&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &lt;img src=x onerror=alert(1)&gt;',
    );
    expect(html).not.toContain('<script');
    expect(html).not.toContain('<img');
    expect(html).toContain('$ npm run build &amp;&amp; echo &quot;&lt;done&gt;&quot;');
    expect(html).toContain(`href="${PUBLIC_URL}/deploy/${id}"`);
    expect(html).toContain('step 120 done');

    // Recorded, once: no second mail for the same ending.
    const [record] = await eventually(async () => {
      const list = await notificationsOf(admin, p.id, 'email');
      return list[0]?.state === 'delivered' ? list : null;
    });
    expect(record).toMatchObject({ event: 'deployment.finished', deployment_status: 'failed', attempts: 1 });
    expect(record.attempt_log).toEqual([
      expect.objectContaining({ success: true, status_code: null, error: null }),
    ]);
    await new Promise((r) => setTimeout(r, 400));
    expect(smtp.messages.filter((m) => m.subject.includes(p.name))).toHaveLength(1);
  });

  it('timed_out counts as a failure; the mail says it', async () => {
    const p = await project({ emails: ['ops@example.com'], on: 'failure' });
    const id = await deploy(p.id);
    await endDeployment(coord, id, 'timed_out', 'The deployment ran longer than its limit of 60 s', [
      { cmd: 'sleep 600', status: 'timed_out', exitCode: null, output: 'waiting...\n' },
    ]);
    const message = await smtp.waitForMessage(10_000);
    expect(message.subject).toContain(`${p.name}: deployment timed out`);
    expect(parseMail(message.raw).text).toContain('$ sleep 600');
  });
});

describe('which endings are mailed', () => {
  async function endAndSettle(
    projectId: string,
    status: 'success' | 'failed' | 'cancelled',
    watched: boolean,
  ) {
    const id = await deploy(projectId);
    await endDeployment(coord, id, status, status === 'success' ? null : `it ${status}`);
    // What was decided is recorded when the ending is noticed; a mail, if any, follows. A
    // project with mail off (and no other channel) is not even looked at.
    if (watched) await eventually(async () => (await noticed(coord, id)) === status);
    else await new Promise((r) => setTimeout(r, 400));
    return id;
  }

  it.each([
    ['failure', 'success', false],
    ['failure', 'cancelled', false],
    ['success', 'success', true],
    ['success', 'failed', false],
    ['always', 'cancelled', true],
    ['always', 'success', true],
    ['never', 'failed', false],
  ] as const)('on: %s, a deployment ending %s → mailed: %s', async (on, status, mailed) => {
    const p = await project({ emails: ['ops@example.com'], on });
    await endAndSettle(p.id, status, on !== 'never');
    const emails = await notificationsOf(admin, p.id, 'email');
    expect(emails.length).toBe(mailed ? 1 : 0);
    if (mailed) {
      const message = await smtp.waitForMessage(10_000);
      expect(message.subject).toContain(p.name);
    }
  });

  it('a deployment that ended before mail was switched on is not mailed later', async () => {
    const p = await project(null);
    expect(p.notifications).toEqual({ emails: [], on: 'never' });
    const before = await deploy(p.id);
    await endDeployment(coord, before, 'failed', 'old failure');
    await new Promise((r) => setTimeout(r, 300));
    const res = await patch(admin, `/projects/${p.id}`, { notifications: { emails: ['late@example.com'] } });
    expect(res.json.project.notifications).toEqual({ emails: ['late@example.com'], on: 'failure' });
    const after = await deploy(p.id);
    await endDeployment(coord, after, 'failed', 'new failure');
    const message = await smtp.waitForMessage(10_000);
    expect(message.to).toEqual(['late@example.com']);
    expect(parseMail(message.raw).text).toContain('new failure');
    const emails = await notificationsOf(admin, p.id, 'email');
    expect(emails.map((e: { deployment_id: string }) => e.deployment_id)).toEqual([after]);
  });

  it('validates the settings', async () => {
    expectJsonError(
      await admin.post('/projects', sampleProject({ notifications: { emails: ['nope'] } })),
      400,
    );
    expectJsonError(
      await admin.post('/projects', sampleProject({ notifications: { emails: [], on: 'sometimes' } })),
      400,
    );
    expectJsonError(
      await admin.post('/projects', sampleProject({ notifications: { emails: [], extra: true } })),
      400,
    );
  });
});

describe('when mail cannot be sent', () => {
  it('SMTP down: the deployment stays as it ended, the failure is retried and recorded', async () => {
    const saved = smtpSettings;
    smtpSettings = { url: `smtp://127.0.0.1:${await closedPort()}`, from: 'Deckhand <deckhand@example.com>' };
    try {
      const p = await project({ emails: ['ops@example.com'], on: 'failure' });
      const id = await deploy(p.id);
      await endDeployment(coord, id, 'failed', 'Command failed');
      const [record] = await eventually(async () => {
        const list = await notificationsOf(admin, p.id, 'email');
        return list[0]?.state === 'failed' ? list : null;
      });
      expect(record.attempts).toBe(2);
      expect(record.last_error).toMatch(
        /^Could not reach the SMTP server at 127\.0\.0\.1:\d+ \(ECONNREFUSED\)$/,
      );
      expect(record.attempt_log).toHaveLength(2);
      expect(record.attempt_log.every((a: { success: boolean }) => !a.success)).toBe(true);
      const detail = await admin.get(`/deploy/${id}`);
      expect(detail.json.deployment).toMatchObject({ status: 'failed', reason: 'Command failed' });
    } finally {
      smtpSettings = saved;
    }
  });

  it('SMTP not configured: recorded as skipped, nothing retried', async () => {
    const saved = smtpSettings;
    smtpSettings = null;
    try {
      const p = await project({ emails: ['ops@example.com'], on: 'always' });
      const id = await deploy(p.id);
      await endDeployment(coord, id, 'success', null);
      const [record] = await eventually(async () => {
        const list = await notificationsOf(admin, p.id, 'email');
        return list[0]?.state === 'skipped' ? list : null;
      });
      expect(record).toMatchObject({ last_error: 'SMTP not configured', attempts: 1, attempt_log: [] });
      expect((await admin.get(`/deploy/${id}`)).json.deployment.status).toBe('success');
    } finally {
      smtpSettings = saved;
    }
  });
});

describe('durability', () => {
  it('a deployment that ends while the worker is stopped is mailed once it runs again', async () => {
    const p = await project({ emails: ['restart@example.com'], on: 'failure' });
    await coord.app.services.notifier.stop();
    const id = await deploy(p.id);
    await endDeployment(coord, id, 'failed', 'while stopped');
    await new Promise((r) => setTimeout(r, 300));
    expect(await noticed(coord, id)).toBeNull();
    coord.app.services.notifier.start();
    const message = await smtp.waitForMessage(10_000);
    expect(message.to).toEqual(['restart@example.com']);
  });

  it('several workers on one database (replicas) send each mail exactly once', async () => {
    const p = await project({ emails: ['replicas@example.com'], on: 'failure' });
    const box = new SecretBox(deriveKey(coord.rootSecret, 'secrets-at-rest'));
    const silent = { info: () => undefined, warn: () => undefined };
    const replicas = Array.from(
      { length: 3 },
      () =>
        new NotificationWorker({
          orm: coord.orm,
          box,
          mailer: new Mailer(async () => smtpSettings, silent),
          publicUrl: () => PUBLIC_URL,
          log: coord.app.log as never,
          intervalMs: 1000,
          retryAttempts: 2,
          retryBaseMs: 50,
        }),
    );
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) ids.push(await deploy(p.id));
    for (const id of ids) await endDeployment(coord, id, 'failed', `replica test ${id}`);
    await Promise.all(replicas.flatMap((r) => [r.runOnce(), r.runOnce()]));
    await eventually(async () => {
      const rows = await sql(
        coord,
        `select count(*)::int as n from notification_deliveries where project_id = ? and state = 'delivered'`,
        [p.id],
      );
      return rows[0].n === 3;
    });
    await new Promise((r) => setTimeout(r, 300));
    const mine = smtp.messages.filter((m) => m.to.includes('replicas@example.com'));
    expect(mine).toHaveLength(3);
    expect(new Set(mine.map((m) => m.subject)).size).toBe(1);
    const bodies = mine.map((m) => parseMail(m.raw).text!);
    for (const id of ids) expect(bodies.filter((b) => b.includes(`/deploy/${id}`))).toHaveLength(1);
    // drain what this test's mails left in the queue of waitForMessage
    for (let i = 0; i < 3; i++) await smtp.waitForMessage(1000);
  });
});
