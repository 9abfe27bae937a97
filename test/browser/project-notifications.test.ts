// A project's notifications in a real browser against a real coordinator: the history at
// GET /projects/:id/notifications (mail, outgoing webhooks, commit statuses, with every attempt)
// and one outgoing webhook's deliveries at GET /projects/:id/hooks/:hookId/deliveries, both
// reached from the project page. The webhook goes to a real local HTTP receiver that refuses the
// first attempt and accepts the retry; no agent runs the deployment, so it is ended in the
// database as the job service would, and the notification worker reports it on its own. Never a
// signing secret on these pages; empty states; on a phone in dark mode nothing is wider than the
// screen. Screenshots: test/.screenshots/notifications-*.png.
import type { Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  horizontalOverflow,
  launchBrowser,
  PHONE_DARK,
  screenshot,
  signIn,
  type TestBrowser,
} from '../helpers/browser.ts';
import { Client, startCoordinator, type TestCoordinator } from '../helpers/coordinator.ts';
import { startHttpReceiver, type HttpReceiver } from '../helpers/http-receiver.ts';
import { endDeployment, eventually, FAST_NOTIFY, markRunning } from '../helpers/notifications.ts';

const ADMIN = 'admin@example.com';
const PASSWORD = 'correct horse battery staple';
const BUSY = 'receiver busy, come back later';

let coord: TestCoordinator;
let admin: Client;
let receiver: HttpReceiver;
let browser: TestBrowser;
let page: Page;
let projectId: string;
let quietProjectId: string;
let hook: { id: string; url: string };
let quietHookId: string;
let signingSecret: string;
let deployId: string;

async function createProject(name: string, extra: Record<string, unknown> = {}): Promise<string> {
  const res = await admin.post('/projects', {
    name,
    forge_url: `https://git.example.com/acme/${name}.git`,
    branch_name: 'main',
    commands: ['make deploy'],
    target: { agents: { labels: [`${name}-hosts`] } },
    ...extra,
  });
  expect(res.status, res.text).toBe(201);
  return res.json.project.id;
}

/** The notices on the page: state badge, channel, event, deployment link, attempts' text. */
async function notices(p: Page) {
  return p.locator('li.notice').evaluateAll((lis) =>
    lis.map((li) => ({
      state: li.querySelector('.notice-head .badge')!.textContent!.trim(),
      channel: li.querySelector('.notice-head strong')!.textContent!.trim(),
      event: li.querySelector('.notice-event')!.textContent!.trim(),
      deployment: li.querySelector('.notice-meta a[href^="/deploy/"]')!.getAttribute('href'),
      attempts: [...li.querySelectorAll('ol.attempts li')].map((a) =>
        a.textContent!.replace(/\s+/g, ' ').trim(),
      ),
      text: li.textContent!.replace(/\s+/g, ' ').trim(),
    })),
  );
}

beforeAll(async () => {
  // The project's webhook is refused once (503 with a reason), then accepted.
  let refused = false;
  receiver = await startHttpReceiver((request) => {
    if (request.url !== '/deckhand/events' || refused) return { status: 204 };
    refused = true;
    return { status: 503, body: BUSY };
  });
  coord = await startCoordinator({ ...FAST_NOTIFY });
  admin = new Client(coord.url);
  const registered = await admin.post('/register', { email: ADMIN, password: PASSWORD });
  expect(registered.status, registered.text).toBe(201);

  // Mail is asked for but no SMTP is set up: that notice is recorded as skipped, with why.
  projectId = await createProject('shop', { notifications: { emails: ['ops@example.com'], on: 'always' } });
  quietProjectId = await createProject('quiet');
  const added = await admin.post(`/projects/${projectId}/hooks`, {
    url: `${receiver.url}/deckhand/events`,
    events: ['deployment.finished'],
  });
  expect(added.status, added.text).toBe(201);
  hook = added.json.hook;
  signingSecret = added.json.secret;
  const quiet = await admin.post(`/projects/${quietProjectId}/hooks`, {
    url: `${receiver.url}/never-called`,
    events: ['deployment.started'],
  });
  expect(quiet.status, quiet.text).toBe(201);
  quietHookId = quiet.json.hook.id;

  const deployed = await admin.post('/deploy', {
    projectId,
    commit: 'a1b2c3d4e5f60718293a4b5c6d7e8f9012345678',
  });
  expect(deployed.status, deployed.text).toBe(200);
  deployId = deployed.json.deployId;
  await markRunning(coord, deployId);
  await endDeployment(coord, deployId, 'failed', 'make deploy exited with 2', [
    { cmd: 'make deploy', status: 'failed', exitCode: 2, output: 'boom\n' },
  ]);
  // The first attempt is refused, the retry (200 ms later) delivered.
  await eventually(async () => {
    const res = await admin.get(`/projects/${projectId}/hooks/${hook.id}/deliveries`);
    return res.json.deliveries[0]?.state === 'delivered';
  }, 20_000);

  browser = await launchBrowser();
  page = await browser.newPage();
  await signIn(page, coord.url, ADMIN, PASSWORD);
}, 60_000);

afterAll(async () => {
  await browser?.close();
  await coord?.close();
  await receiver?.close();
});

describe('notifications in the browser', () => {
  it('the project page links to the history; each notice shows channel, event, state, attempts and the deployment', async () => {
    await page.goto(`${coord.url}/projects/${projectId}`);
    await page.getByRole('link', { name: 'Notification history' }).click();
    await page.waitForURL(`${coord.url}/projects/${projectId}/notifications`);
    await screenshot(page, 'notifications-history');
    expect(await page.locator('h1').textContent()).toContain('Notifications');

    const list = await notices(page);
    const webhook = list.find((n) => n.channel === 'Webhook')!;
    expect(webhook).toMatchObject({
      state: 'delivered',
      event: 'deployment.finished',
      deployment: `/deploy/${deployId}`,
    });
    expect(webhook.text).toContain(hook.url);
    expect(webhook.attempts).toHaveLength(2);
    expect(webhook.attempts[0]).toMatch(/^✕ Attempt 1, .+: failed · HTTP 503 · .+/);
    expect(webhook.attempts[0]).toContain(BUSY);
    expect(webhook.attempts[1]).toMatch(/^✓ Attempt 2, .+: delivered · HTTP 204 · /);
    // The attempts' times, exactly, on hover.
    const times = await page
      .locator('li.notice ol.attempts time')
      .evaluateAll((ts) => ts.map((t) => t.getAttribute('title')));
    expect(times.every((t) => /^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$/.test(t ?? ''))).toBe(true);

    const mail = list.find((n) => n.channel === 'Mail')!;
    expect(mail).toMatchObject({ state: 'skipped', event: 'deployment.finished' });
    expect(mail.text).toContain('SMTP not configured');

    // The badge says it in words and a symbol, not colour alone.
    const symbol = await page.evaluate(
      "getComputedStyle(document.querySelector('li.notice .notice-head .badge-delivered'), '::before').content",
    );
    expect(symbol).toBe('"✓"');

    const html = await page.content();
    expect(html).not.toContain(signingSecret);
    expect(html).not.toContain('whsec_');

    // The deployment is one click away.
    await page
      .locator('li.notice')
      .filter({ hasText: 'Webhook' })
      .getByRole('link', { name: /deployment/ })
      .click();
    await page.waitForURL(`${coord.url}/deploy/${deployId}`);
    expect(browser.errors).toEqual([]);
  });

  it('filters by channel with the JSON’s own parameter, and says when a channel has nothing', async () => {
    await page.goto(`${coord.url}/projects/${projectId}/notifications`);
    await page.getByRole('link', { name: 'Webhooks', exact: true }).click();
    await page.waitForURL(`${coord.url}/projects/${projectId}/notifications?channel=webhook`);
    expect((await notices(page)).map((n) => n.channel)).toEqual(['Webhook']);
    expect(await page.getByRole('link', { name: 'Webhooks', exact: true }).getAttribute('aria-current')).toBe(
      'page',
    );

    await page.getByRole('link', { name: 'Commit statuses' }).click();
    await page.waitForURL(/channel=commit_status$/);
    await screenshot(page, 'notifications-filtered-empty');
    expect(await page.locator('.empty').textContent()).toContain('No commit statuses reported.');
  });

  it("an outgoing webhook's deliveries, linked from the project page", async () => {
    await page.goto(`${coord.url}/projects/${projectId}`);
    await page.getByRole('link', { name: `Deliveries to ${hook.url}` }).click();
    await page.waitForURL(`${coord.url}/projects/${projectId}/hooks/${hook.id}/deliveries`);
    await screenshot(page, 'notifications-hook-deliveries');
    expect(await page.locator('main').textContent()).toContain(hook.url);
    const list = await notices(page);
    expect(list).toHaveLength(1);
    expect(list[0]).toMatchObject({
      state: 'delivered',
      event: 'deployment.finished',
      deployment: `/deploy/${deployId}`,
    });
    expect(list[0]!.attempts.map((a) => a.slice(0, 1))).toEqual(['✕', '✓']);
    expect(await page.content()).not.toContain(signingSecret);
    // The JSON at the same URL is unchanged.
    const json = await admin.get(`/projects/${projectId}/hooks/${hook.id}/deliveries`);
    expect(json.headers.get('content-type')).toMatch(/^application\/json/);
    expect(json.json.deliveries).toHaveLength(1);
  });

  it('empty states: a project never notified, a webhook never called; an unknown webhook is the 404 page', async () => {
    await page.goto(`${coord.url}/projects/${quietProjectId}/notifications`);
    await screenshot(page, 'notifications-empty');
    expect(await page.locator('.empty').textContent()).toContain('No notifications yet.');

    await page.goto(`${coord.url}/projects/${quietProjectId}/hooks/${quietHookId}/deliveries`);
    expect(await page.locator('.empty').textContent()).toContain('No deliveries to this webhook yet.');
    expect(browser.errors).toEqual([]);

    const missing = await page.goto(
      `${coord.url}/projects/${projectId}/hooks/00000000-0000-4000-8000-000000000000/deliveries`,
    );
    expect(missing?.status()).toBe(404);
    expect(await page.locator('main').textContent()).toMatch(/not found/i);
    // The browser reports the 404 document itself in the console; nothing else.
    expect(browser.errors.filter((e) => !/status of 404/.test(e))).toEqual([]);
    browser.errors.length = 0;
  });

  it('fits a phone (390×844, dark): nothing wider than the screen', async () => {
    const phone = await launchBrowser(PHONE_DARK);
    try {
      const p = await phone.newPage();
      await signIn(p, coord.url, ADMIN, PASSWORD);
      for (const [path, name] of [
        [`/projects/${projectId}/notifications`, 'notifications-history-phone-dark'],
        [`/projects/${projectId}/hooks/${hook.id}/deliveries`, 'notifications-hook-deliveries-phone-dark'],
        [`/projects/${quietProjectId}/notifications`, 'notifications-empty-phone-dark'],
      ] as const) {
        await p.goto(coord.url + path);
        await screenshot(p, name);
        expect(await horizontalOverflow(p), path).toBeLessThanOrEqual(0);
        const wider = await p.evaluate(
          `[...document.querySelectorAll('main *')].filter((e) => e.getBoundingClientRect().right > window.innerWidth + 0.5).map((e) => e.tagName + '.' + e.className)`,
        );
        expect(wider, path).toEqual([]);
      }
      expect(phone.errors).toEqual([]);
    } finally {
      await phone.close();
    }
  }, 60_000);
});
