// The deployment page in a real browser against a real coordinator, database and agent: output
// appears live (no reload), ANSI colours are rendered, log output cannot inject markup, a failure
// shows its exit status, Cancel stops a running deployment and Redeploy starts a new one. Then every
// state the page can be in (queued for an agent, a long log live and reloaded, timed out), Roll back
// only where a rollback is possible, the page read by keyboard and screen reader, and a phone in
// dark mode. Following the output and a lost stream: deployment-follow.test.ts.
// Screenshots: test/.screenshots/deployment-*.png.
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
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
import type { Client, TestCoordinator } from '../helpers/coordinator.ts';
import { type DeploymentBrowser, startDeploymentBrowser } from '../helpers/deployment-browser.ts';
import type { TestRepo } from '../helpers/git.ts';

const PASSWORD = 'correct horse battery staple';

let stack: DeploymentBrowser | undefined;
let coord: TestCoordinator;
let admin: Client;
let email: string;
let repo: TestRepo;
let browser: TestBrowser;
let gates: string;

async function project(
  name: string,
  commands: string[],
  extra: Record<string, unknown> = {},
): Promise<string> {
  const res = await admin.post('/projects', {
    name,
    forge_url: repo.url,
    branch_name: 'main',
    commands,
    target: { agents: { labels: ['web'] } },
    env: { GATES: gates },
    ...extra,
  });
  expect(res.status, res.text).toBe(201);
  return res.json.project.id as string;
}

async function deploy(projectId: string): Promise<string> {
  const res = await admin.post('/deploy', { projectId });
  expect(res.status, res.text).toBe(200);
  return res.json.deployId as string;
}

async function signedInPage(): Promise<Page> {
  const page = await browser.newPage();
  page.on('dialog', (d) => void d.accept());
  return page;
}

const statusText = (page: Page) => page.locator('#status').textContent();
const finalStates = ['success', 'failed', 'cancelled', 'timed_out'];

async function waitFinished(id: string): Promise<string> {
  let status = '';
  await expect
    .poll(async () => (status = (await admin.get(`/deploy/${id}`)).json.deployment.status as string), {
      timeout: 30_000,
    })
    .toSatisfy((s: string) => finalStates.includes(s));
  return status;
}

/** Deployments kept for the screenshots at phone width. */
const shown: Record<string, string> = {};
/** A command's output containing `text` (not the command line itself). */
const output = (page: Page, text: string) => page.locator('pre.log', { hasText: text }).first();

beforeAll(async () => {
  // Signed in through the form once; the browser profile keeps the session for every page.
  stack = await startDeploymentBrowser(PASSWORD);
  ({ coord, admin, email, repo, browser, gates } = stack);
}, 60_000);

afterAll(async () => {
  await stack?.close();
}, 60_000);

describe('the deployment page', () => {
  it('shows output live as it is printed, with ANSI colours, without reloading', async () => {
    const projectId = await project('live', [
      'echo first-line; while [ ! -f "$GATES/live" ]; do sleep 0.1; done; printf "\\033[32mgreen-after-gate\\033[0m\\n"',
      'echo second command',
    ]);
    const id = await deploy(projectId);
    const page = await signedInPage();
    await page.goto(`${coord.url}/deploy/${id}`);
    // Marks this document: a reload would lose it.
    await page.evaluate('window.sameDocument = true');
    await output(page, 'first-line').waitFor();
    expect(await statusText(page)).toBe('running');
    await screenshot(page, 'deployment-running');

    await writeFile(join(gates, 'live'), '');
    const green = page.locator('pre.log span.ansi-fg-2', { hasText: 'green-after-gate' });
    await green.waitFor();
    await output(page, 'second command').waitFor();
    await expect.poll(() => statusText(page), { timeout: 20_000 }).toBe('success');
    expect(await page.evaluate('window.sameDocument')).toBe(true);
    // Each command is its own section with its exit status; the raw escape codes are gone.
    const steps = page.locator('details.step');
    expect(await steps.count()).toBe(3); // checkout + 2 commands
    expect(await steps.nth(1).locator('.step-meta').textContent()).toMatch(/^exit 0 · /);
    expect((await page.locator('pre.log').allTextContents()).join('')).not.toContain('[32m');
    expect(await page.locator('#follow').isDisabled()).toBe(true);
    await screenshot(page, 'deployment-success');

    // Reloaded when finished, the page is rendered by the server the same way.
    await page.reload();
    expect(await statusText(page)).toBe('success');
    expect(await page.locator('pre.log span.ansi-fg-2').textContent()).toBe('green-after-gate');
    expect(await page.locator('#cancel-form').isHidden()).toBe(true);
    await page.close();
  });

  it('log output is shown as text: markup in it is never interpreted', async () => {
    const projectId = await project('hostile', [
      `printf '%s\\n' '<img src=x onerror="window.pwned=1"><script>window.pwned=2</script><b>not bold</b>'`,
    ]);
    const id = await deploy(projectId);
    const page = await signedInPage();
    await page.goto(`${coord.url}/deploy/${id}`);
    await expect.poll(() => statusText(page), { timeout: 20_000 }).toBe('success');
    await output(page, '<b>not bold</b>').waitFor();
    expect(await page.evaluate('window.pwned')).toBeUndefined();
    expect(await page.locator('#log b').count()).toBe(0);
    // And once more as the server renders it.
    await page.reload();
    expect(await page.evaluate('window.pwned')).toBeUndefined();
    expect(await page.locator('#log img, #log script, #log b').count()).toBe(0);
    await page.close();
  });

  it('a failing command shows failed with its exit status; the commands after it are skipped', async () => {
    const projectId = await project('failing', ['echo about to fail; echo boom >&2; exit 3', 'echo never']);
    const id = await deploy(projectId);
    const page = await signedInPage();
    await page.goto(`${coord.url}/deploy/${id}`);
    await expect.poll(() => statusText(page), { timeout: 20_000 }).toBe('failed');
    const failed = page.locator('details.step', { hasText: 'about to fail' });
    expect(await failed.locator('.step-status').textContent()).toBe('failed');
    expect(await failed.locator('.step-meta').textContent()).toMatch(/^exit 3 · /);
    expect(await failed.locator('pre').textContent()).toContain('boom');
    await expect
      .poll(() =>
        page.locator('details.step', { hasText: 'echo never' }).locator('.step-status').textContent(),
      )
      .toBe('skipped');
    await screenshot(page, 'deployment-failed');
    shown.failed = id;
    await page.close();
  });

  it('Cancel stops a running deployment; Redeploy starts the same one again', async () => {
    const projectId = await project('cancel', ['echo waiting for cancel; sleep 60']);
    const id = await deploy(projectId);
    const page = await signedInPage();
    await page.goto(`${coord.url}/deploy/${id}`);
    await output(page, 'waiting for cancel').waitFor();
    await page.getByRole('button', { name: 'Cancel' }).click();
    await page.waitForSelector('.alert-notice');
    expect(await page.locator('.alert-notice').textContent()).toBe('Cancel requested');
    await expect.poll(() => statusText(page), { timeout: 20_000 }).toBe('cancelled');
    await screenshot(page, 'deployment-cancelled');

    await page.getByRole('button', { name: 'Redeploy' }).click();
    await page.waitForURL((url) => url.pathname.startsWith('/deploy/') && !url.pathname.endsWith(id));
    expect(await page.locator('.alert-notice').textContent()).toBe('Redeploy queued');
    await output(page, 'waiting for cancel').waitFor();
    const again = new URL(page.url()).pathname.split('/')[2]!;
    const res = await admin.get(`/deploy/${again}`);
    expect(res.json.deployment.trigger).toBe('redeploy');
    await page.getByRole('button', { name: 'Cancel' }).click();
    await expect.poll(() => statusText(page), { timeout: 20_000 }).toBe('cancelled');
    await page.close();
  });

  it('the raw log is plain text', async () => {
    const list = await admin.get('/deployments?limit=1');
    const id = list.json.deployments[0].id as string;
    const res = await admin.get(`/deploy/${id}/log`, { headers: { accept: 'text/html' } });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/plain/);
    expect(res.text).toContain('▶ [web-1] echo waiting for cancel; sleep 60');
    expect(browser.errors).toEqual([]);
  });
});

describe('every state of the deployment page', () => {
  it('queued: says what it waits for; cancelled before any command ran, says none did', async () => {
    const projectId = await project('unplaced', ['echo never runs'], {
      target: { agents: { labels: ['nowhere'] } },
    });
    const id = await deploy(projectId);
    const page = await signedInPage();
    await page.goto(`${coord.url}/deploy/${id}`);
    expect(await statusText(page)).toBe('queued');
    expect(await page.locator('#reason').textContent()).toBe(
      'Waiting for an agent with the labels nowhere: none is registered',
    );
    expect(await page.locator('#log-empty').textContent()).toBe('Waiting for the first command…');
    expect(await page.locator('#hosts').textContent()).toBe('none yet');
    expect(await page.locator('#cancel-form').isVisible()).toBe(true);
    expect(await page.locator('#redeploy-form').isHidden()).toBe(true);
    await screenshot(page, 'deployment-queued');

    // Cancelled elsewhere (here: the API): the page follows.
    expect((await admin.post(`/deploy/${id}/cancel`)).status).toBe(200);
    await expect.poll(() => statusText(page), { timeout: 20_000 }).toBe('cancelled');
    expect(await page.locator('#log-empty').textContent()).toBe('No command ran.');
    expect(await page.locator('#redeploy-form').isVisible()).toBe(true);
    shown.unplaced = projectId;
    await page.close();
  });

  it('a long log: thousands of lines live, then server-rendered on reload, the newest in view', async () => {
    const projectId = await project('long', [
      'seq -f "line %g of a long log" 1 5000; printf "\\033[33mwarning: the last line\\033[0m\\n"; while [ ! -f "$GATES/long" ]; do sleep 0.1; done',
    ]);
    const id = await deploy(projectId);
    const page = await signedInPage();
    await page.goto(`${coord.url}/deploy/${id}`);
    const box = output(page, 'line 1 of a long log');
    await page.locator('pre.log span.ansi-fg-3', { hasText: 'warning: the last line' }).waitFor();
    expect((await box.textContent())!.split('\n')).toHaveLength(5002);
    await screenshot(page, 'deployment-long-running');

    // Reloaded while it runs: rendered by the server, the box opened at its newest line.
    await page.reload();
    expect((await box.textContent())!.split('\n')).toHaveLength(5002);
    const atEnd = await box.evaluate((el) => el.scrollHeight - el.scrollTop - el.clientHeight);
    expect(atEnd).toBeLessThanOrEqual(4);
    await screenshot(page, 'deployment-long-reloaded');

    // Read by keyboard: the box is reached with Tab, shows where the focus is, and scrolls.
    let focused = '';
    for (let i = 0; i < 40 && !focused.startsWith('PRE line'); i++) {
      await page.keyboard.press('Tab');
      focused = await page.evaluate(
        `document.activeElement.tagName + ' ' + (document.activeElement.textContent ?? '').slice(0, 30)`,
      );
    }
    expect(focused).toBe('PRE line 1 of a long log\nline 2 of');
    const ring = await page.evaluate(
      `(() => { const s = getComputedStyle(document.activeElement); return s.outlineStyle + ' ' + s.outlineWidth; })()`,
    );
    expect(ring).toBe('solid 3px');
    await page.keyboard.press('Home');
    await expect.poll(() => box.evaluate((el) => el.scrollTop)).toBe(0);
    await screenshot(page, 'deployment-long-focused');

    await writeFile(join(gates, 'long'), '');
    await expect.poll(() => statusText(page), { timeout: 20_000 }).toBe('success');
    shown.long = id;
    await page.close();
  });

  it('tells screen readers about status changes, not about every line', async () => {
    const page = await signedInPage();
    await page.goto(`${coord.url}/deploy/${shown.long}`);
    expect(await page.locator('#status').getAttribute('aria-live')).toBe('polite');
    expect(await page.getByRole('log', { name: 'Output' }).count()).toBe(1);
    expect(await page.locator('#log').getAttribute('aria-live')).toBe('off');
    expect(await page.locator('#connection').getAttribute('role')).toBe('status');
    const boxes = page.locator('pre.log');
    expect(await boxes.count()).toBeGreaterThan(0);
    for (const tabindex of await boxes.evaluateAll((els) => els.map((el) => el.getAttribute('tabindex'))))
      expect(tabindex).toBe('0');
    await page.close();
  });

  it('timed out: the command stopped at its time limit', async () => {
    const projectId = await project('slow', ['echo slow start; sleep 30'], {
      timeouts: { command_seconds: 1 },
    });
    const id = await deploy(projectId);
    const page = await signedInPage();
    await page.goto(`${coord.url}/deploy/${id}`);
    await expect.poll(() => statusText(page), { timeout: 20_000 }).toBe('timed out');
    expect(await page.locator('#redeploy-form').isVisible()).toBe(true);
    expect(await output(page, 'slow start').isVisible()).toBe(true);
    await screenshot(page, 'deployment-timed-out');
    shown.timedOut = id;
    await page.close();
  });
});

describe('a deployment that is not there', () => {
  it('gets an error page, not a broken deployment page', async () => {
    const page = await signedInPage();
    const before = browser.errors.length;
    const res = await page.goto(`${coord.url}/deploy/00000000-0000-4000-8000-000000000000`);
    expect(res?.status()).toBe(404);
    expect(await page.locator('h1').textContent()).toMatch(/not found/i);
    await screenshot(page, 'deployment-not-found');
    // The browser reports the 404 itself; that one is expected.
    expect(browser.errors.slice(before)).toEqual([
      'console: Failed to load resource: the server responded with a status of 404 (Not Found)',
    ]);
    browser.errors.splice(before);
    await page.close();
  });
});

describe('Roll back to this release', () => {
  it('is offered only on a successful build the hosts still keep, and not on the live one', async () => {
    const projectId = await project('released', ['echo built'], { releases: { keep: 3 } });
    const first = await deploy(projectId);
    expect(await waitFinished(first)).toBe('success');
    const second = await deploy(projectId);
    expect(await waitFinished(second)).toBe('success');
    const page = await signedInPage();
    const rollBack = page.getByRole('button', { name: 'Roll back to this release' });

    await page.goto(`${coord.url}/deploy/${second}`);
    expect(await rollBack.count()).toBe(0); // live already
    await page.goto(`${coord.url}/deploy/${first}`);
    expect(await rollBack.count()).toBe(1);
    await screenshot(page, 'deployment-rollback-offered');

    // A project without releases builds in place: nothing to roll back to.
    const list = await admin.get('/deployments?status=success&limit=200');
    const inPlace = (list.json.deployments as Array<{ id: string; proj_id: string }>).find(
      (d) => d.proj_id !== projectId,
    )!;
    await page.goto(`${coord.url}/deploy/${inPlace.id}`);
    expect(await statusText(page)).toBe('success');
    expect(await rollBack.count()).toBe(0);

    await page.goto(`${coord.url}/deploy/${first}`);
    await rollBack.click();
    await page.waitForURL((url) => url.pathname.startsWith('/deploy/') && !url.pathname.endsWith(first));
    expect(await page.locator('.alert-notice').textContent()).toBe('Rollback queued');
    await expect.poll(() => statusText(page), { timeout: 20_000 }).toBe('success');
    await page.reload();
    expect(await rollBack.count()).toBe(0); // a rollback builds nothing of its own
    // Now the first release is live and the second one can be rolled back to.
    await page.goto(`${coord.url}/deploy/${first}`);
    expect(await rollBack.count()).toBe(0);
    await page.goto(`${coord.url}/deploy/${second}`);
    expect(await rollBack.count()).toBe(1);
    await page.close();
  }, 60_000);
});

describe('on a phone in dark mode', () => {
  it('every state fits the screen: nothing wider than it', async () => {
    const phone = await launchBrowser(PHONE_DARK);
    try {
      const page = await phone.newPage();
      await signIn(page, coord.url, email, PASSWORD);
      const queued = await deploy(shown.unplaced!);
      const running = await deploy(
        await project('phone', [
          'printf "%s\\n" "a-very-long-word-without-any-space-$(printf "x%.0s" $(seq 1 200))"; echo waiting on the phone; while [ ! -f "$GATES/phone" ]; do sleep 0.1; done',
        ]),
      );
      await page.goto(`${coord.url}/deploy/${running}`);
      await output(page, 'waiting on the phone').waitFor();
      for (const [id, name] of [
        [queued, 'deployment-queued-phone-dark'],
        [running, 'deployment-running-phone-dark'],
        [shown.long!, 'deployment-long-phone-dark'],
        [shown.failed!, 'deployment-failed-phone-dark'],
        [shown.timedOut!, 'deployment-timed-out-phone-dark'],
      ] as const) {
        await page.goto(`${coord.url}/deploy/${id}`);
        await screenshot(page, name);
        expect(await horizontalOverflow(page), name).toBeLessThanOrEqual(0);
      }
      await writeFile(join(gates, 'phone'), '');
      expect((await admin.post(`/deploy/${queued}/cancel`)).status).toBe(200);
      expect(await waitFinished(running)).toBe('success');
      expect(phone.errors).toEqual([]);
      expect(browser.errors).toEqual([]);
    } finally {
      await phone.close();
    }
  }, 60_000);
});
