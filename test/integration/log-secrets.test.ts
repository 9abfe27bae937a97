// Logs never carry secrets, even at trace level: passwords, session cookies, project and webhook
// secrets and signatures stay out of everything the coordinator logs.
import pino from 'pino';
import { createHmac, randomBytes, randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { Client, coordinatorFor, sampleProject, uniqueEmail } from '../helpers/coordinator.ts';
import { loggerOptions } from '../../coordinator/src/plugins/logger.ts';

describe('logs never contain secrets', () => {
  const lines: string[] = [];
  const logger = pino(
    { ...loggerOptions('trace'), level: 'trace' },
    { write: (line: string) => lines.push(line) },
  );
  const coord = coordinatorFor({ LOG_LEVEL: 'trace' }, { logger });

  it('register, login, a project with secrets, a signed webhook: none of the secrets is logged', async () => {
    const url = coord.current.url;
    const password = `pw-${randomBytes(12).toString('hex')}`;
    const wrongPassword = `wrong-${randomBytes(12).toString('hex')}`;
    const projectSecret = `sk-live-${randomBytes(12).toString('hex')}`;
    const webhookSecret = `whsec-${randomBytes(16).toString('hex')}`;
    const email = uniqueEmail('logs');

    const admin = new Client(url);
    const reg = await admin.post('/register', { email, password });
    expect(reg.status, reg.text).toBe(201);
    const registerCookie = admin.cookie!;
    expect((await new Client(url).post('/login', { email, password: wrongPassword })).status).toBe(401);
    const login = await admin.post('/login', { email, password });
    expect(login.status, login.text).toBe(200);
    const loginCookie = admin.cookie!;

    const created = await admin.post(
      '/projects',
      sampleProject({ secrets: { API_KEY: projectSecret }, webhook_secret: webhookSecret }),
    );
    expect(created.status, created.text).toBe(201);
    expect(created.json.webhook.secret).toBe(webhookSecret);
    const projectId = created.json.project.id as string;
    // A request that fails validation with a secret in the body is logged as refused, not echoed.
    const invalid = await admin.post('/projects', {
      ...sampleProject({ secrets: { API_KEY: projectSecret }, webhook_secret: webhookSecret }),
      name: '',
    });
    expect(invalid.status).toBe(400);
    expect((await admin.get(`/projects/${projectId}/webhook`)).json.webhook.secret).toBe(webhookSecret);

    const body = Buffer.from(
      JSON.stringify({
        ref: 'refs/heads/main',
        after: randomBytes(20).toString('hex'),
        repository: { full_name: 'acme/web' },
      }),
    );
    const signature = `sha256=${createHmac('sha256', webhookSecret).update(body).digest('hex')}`;
    const hook = await fetch(`${url}/webhook/${projectId}`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        'x-github-event': 'push',
        'x-github-delivery': randomUUID(),
        'x-hub-signature-256': signature,
      },
      body,
    });
    expect(hook.status).toBe(200);
    expect(await hook.text()).toBe('Deployment triggered');
    const badSignature = `sha256=${createHmac('sha256', 'not-the-secret').update(body).digest('hex')}`;
    const refused = await fetch(`${url}/webhook/${projectId}`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        'x-github-event': 'push',
        'x-hub-signature-256': badSignature,
      },
      body,
    });
    expect(refused.status).toBe(401);

    const rotated = await admin.post(`/projects/${projectId}/webhook/rotate`, {});
    expect(rotated.status, rotated.text).toBe(200);
    const rotatedSecret = rotated.json.webhook.secret as string;
    expect((await admin.post('/logout')).status).toBe(200);

    const log = lines.join('');
    // The capture works: requests, refusals and the webhook decision are all there.
    expect(log).toContain('incoming request');
    expect(log).toContain('request refused');
    expect(log).toContain('webhook delivery');
    expect(log).toContain(projectId);

    const cookieValue = (cookie: string) => cookie.slice('connect.sid='.length);
    const secrets = {
      password,
      wrongPassword,
      registerCookie: cookieValue(registerCookie),
      loginCookie: cookieValue(loginCookie),
      decodedLoginCookie: decodeURIComponent(cookieValue(loginCookie)),
      projectSecret,
      webhookSecret,
      rotatedSecret,
      signature,
      signatureHex: signature.slice('sha256='.length),
      badSignatureHex: badSignature.slice('sha256='.length),
    };
    for (const [name, value] of Object.entries(secrets)) {
      expect(log.includes(value), `${name} appears in the log`).toBe(false);
    }
  });
});
