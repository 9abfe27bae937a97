// The deployment page in a real browser against a real coordinator, database and agent: output
// appears live (no reload), ANSI colours are rendered, log output cannot inject markup, a failure
// shows its exit status, Cancel stops a running deployment and Redeploy starts a new one.
// Screenshots: test/.screenshots/deployment-*.png.
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RunningAgent, startAgent } from '../helpers/agents.ts';
import { launchBrowser, screenshot, type TestBrowser } from '../helpers/browser.ts';
import { type Client, signUp, startCoordinator, type TestCoordinator } from '../helpers/coordinator.ts';
import { createTestRepo, type TestRepo } from '../helpers/git.ts';

const PASSWORD = 'correct horse battery staple';

let coord: TestCoordinator;
let admin: Client;
let email: string;
let repo: TestRepo;
let agent: RunningAgent;
let browser: TestBrowser;
let gates: string;

async function project(name: string, commands: string[]): Promise<string> {
  const res = await admin.post('/projects', {
    name,
    forge_url: repo.url,
    branch_name: 'main',
    commands,
    target: { agents: { labels: ['web'] } },
    env: { GATES: gates },
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
/** A command's output containing `text` (not the command line itself). */
const output = (page: Page, text: string) => page.locator('pre.log', { hasText: text }).first();

beforeAll(async () => {
  coord = await startCoordinator({ AGENT_HEARTBEAT_MS: '500', SCHEDULER_INTERVAL_MS: '200' });
  const account = await signUp(coord.url, 'admin@example.com', PASSWORD);
  admin = account.client;
  email = account.email;
  repo = await createTestRepo();
  await repo.commit({ 'app.txt': 'version 1\n' }, 'first');
  gates = await mkdtemp(join(tmpdir(), 'deckhand-gates-'));
  const res = await admin.post('/agents', { name: 'web-1', labels: ['web'] });
  expect(res.status).toBe(201);
  agent = await startAgent(coord.url, res.json.token);
  browser = await launchBrowser();
  // Sign in through the form once; the browser profile keeps the session for every page.
  const page = await browser.newPage();
  await page.goto(`${coord.url}/login`);
  await page.getByLabel('Email').fill(email);
  await page.getByLabel('Password').fill(PASSWORD);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.waitForURL(`${coord.url}/`);
  await page.close();
}, 60_000);

afterAll(async () => {
  await browser?.close();
  await agent?.stop();
  await coord?.close();
  await repo?.remove();
  if (gates) await rm(gates, { recursive: true, force: true });
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
