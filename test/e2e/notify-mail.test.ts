// "A failed deploy lands in a mailbox with the failing command's output": a real coordinator, a
// real `deckhand-agent` process checking out a real git repository and running real commands, a
// real SMTP server — and, beside the mail, a signed webhook to a real HTTP receiver.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RunningAgent, startAgent } from '../helpers/agents.ts';
import { type Client, signUp, startCoordinator, type TestCoordinator } from '../helpers/coordinator.ts';
import { createTestRepo, type TestRepo } from '../helpers/git.ts';
import { type HttpReceiver, startHttpReceiver } from '../helpers/http-receiver.ts';
import { parseMail } from '../helpers/mail-parser.ts';
import { eventually } from '../helpers/notifications.ts';
import { startTestSmtpServer, type TestSmtpServer } from '../helpers/smtp-server.ts';

const FINAL = ['success', 'failed', 'cancelled', 'timed_out'];
let coordinator: TestCoordinator;
let admin: Client;
let repo: TestRepo;
let smtp: TestSmtpServer;
let receiver: HttpReceiver;
let agent: RunningAgent | undefined;

beforeAll(async () => {
  smtp = await startTestSmtpServer();
  receiver = await startHttpReceiver(() => ({ status: 204 }));
  coordinator = await startCoordinator(
    { AGENT_HEARTBEAT_MS: '500', SCHEDULER_INTERVAL_MS: '200', NOTIFY_INTERVAL_MS: '200' },
    { smtpSettings: async () => ({ url: smtp.url, from: 'Deckhand <deckhand@example.com>' }) },
  );
  ({ client: admin } = await signUp(coordinator.url));
  repo = await createTestRepo();
  await repo.commit({ 'app.txt': 'version 1\n' }, 'first');
  const res = await admin.post('/agents', { name: 'web-1', labels: ['web'] });
  expect(res.status).toBe(201);
  agent = await startAgent(coordinator.url, res.json.token);
  await eventually(async () => {
    const agents = (await admin.get('/agents')).json.agents as Array<{ name: string; online: boolean }>;
    return agents.some((a) => a.name === 'web-1' && a.online);
  }, 20_000);
}, 60_000);

afterAll(async () => {
  await agent?.stop();
  await coordinator?.close();
  await repo?.remove();
  await smtp?.close();
  await receiver?.close();
}, 60_000);

describe('a failed deployment on a real agent', () => {
  it('mails the failing command with the tail of its output, and posts the signed webhook', async () => {
    const created = await admin.post('/projects', {
      name: 'shop',
      forge_url: repo.url,
      branch_name: 'main',
      target: { agents: { labels: ['web'] } },
      commands: [
        'cat app.txt',
        'for i in $(seq 1 80); do echo "build line $i"; done; echo "<b>error</b>: npm ERR! & friends" >&2; exit 3',
        'echo never runs',
      ],
      notifications: { emails: ['oncall@example.com'], on: 'failure' },
    });
    expect(created.status, created.text).toBe(201);
    const projectId = created.json.project.id as string;
    const hook = await admin.post(`/projects/${projectId}/hooks`, {
      url: `${receiver.url}/deckhand`,
      events: ['deployment.finished'],
    });
    expect(hook.status).toBe(201);

    const sha = await repo.commit({ 'app.txt': 'version 2\n' }, 'break the build');
    const triggered = await admin.post('/deploy', { projectId });
    expect(triggered.status).toBe(200);
    const id = triggered.json.deployId as string;
    const detail = await eventually(async () => {
      const res = await admin.get(`/deploy/${id}`);
      return FINAL.includes(res.json.deployment.status) ? res.json : null;
    }, 30_000).catch((err) => {
      throw new Error(`${err}\n${agent?.output()}`);
    });
    expect(detail.deployment.status).toBe('failed');

    const message = await smtp.waitForMessage(15_000);
    expect(message.to).toEqual(['oncall@example.com']);
    expect(message.subject).toBe(`[Deckhand] shop: deployment failed (${sha.slice(0, 12)} on main)`);
    const mail = parseMail(message.raw);
    const failing =
      'for i in $(seq 1 80); do echo "build line $i"; done; echo "<b>error</b>: npm ERR! & friends" >&2; exit 3';
    expect(mail.text).toContain(`$ ${failing}`);
    expect(mail.text).toContain('failed, exit code 3. The last lines of its output:');
    expect(mail.text).toContain('build line 80');
    expect(mail.text).toContain('<b>error</b>: npm ERR! & friends');
    expect(mail.text).not.toMatch(/build line 1\n/); // only the tail
    expect(mail.text).toContain(`Commit:   ${sha} on main`);
    expect(mail.text).toContain(`Open the deployment: ${coordinator.url}/deploy/${id}`);
    expect(mail.text).not.toContain('never runs');
    expect(mail.html).toContain('&lt;b&gt;error&lt;/b&gt;: npm ERR! &amp; friends');
    expect(mail.html).not.toContain('<b>error</b>');
    expect(mail.html).toContain(`href="${coordinator.url}/deploy/${id}"`);

    const [posted] = await receiver.waitForRequests(1, 15_000);
    expect(JSON.parse(posted!.body)).toMatchObject({
      type: 'deployment.finished',
      data: { deployment: { id, status: 'failed', commit: sha } },
    });
    expect(posted!.headers['webhook-signature']).toMatch(/^v1,[A-Za-z0-9+/]+=*$/);

    // One ending, one mail.
    await new Promise((r) => setTimeout(r, 800));
    expect(smtp.messages).toHaveLength(1);
  }, 60_000);
});
