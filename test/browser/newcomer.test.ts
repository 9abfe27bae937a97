// A newcomer, in a real browser, from the first page to a successful deployment without the
// README's curl section: create the admin account, create a project through the form, add an
// agent on the Agents page and run the command the page shows, as it is, with bash in an empty
// folder (it downloads the one-file agent from the coordinator and starts it), press Deploy on the
// project's page and watch the output arrive live on the deployment page until it succeeds. Then,
// from the project page too: a failing deployment shows its failure, a running one is cancelled.
// Screenshots: test/.screenshots/newcomer-*.png.
import { spawn } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { launchBrowser, screenshot, type TestBrowser } from '../helpers/browser.ts';
import { startCoordinator, type TestCoordinator } from '../helpers/coordinator.ts';
import { createTestRepo, type TestRepo } from '../helpers/git.ts';
import { cleanEnv, type Spawned } from '../helpers/processes.ts';

const EMAIL = 'first@example.com';
const PASSWORD = 'a long first passphrase';

let coord: TestCoordinator;
let repo: TestRepo;
/** The page's command, running under bash in its own process group. */
let agent: Spawned | undefined;
let agentDir: string | undefined;
let browser: TestBrowser;
let page: Page;
let gates: string;

const statusText = (p: Page) => p.locator('#status').textContent();

/** Runs a command as a person pasting it would: bash, in an empty folder, in a group of its own. */
function runAsShown(command: string, cwd: string): Spawned {
  const child = spawn('bash', ['-c', command], {
    cwd,
    env: cleanEnv({}) as NodeJS.ProcessEnv,
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
  });
  let out = '';
  child.stdout.on('data', (d) => (out += d));
  child.stderr.on('data', (d) => (out += d));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.on('exit', (code, signal) => resolve({ code, signal })),
  );
  return { child, output: () => out, exited };
}

/** Ends what runAsShown started: the whole group (bash, curl, node), TERM then KILL. */
async function stopGroup(proc: Spawned): Promise<void> {
  const pid = proc.child.pid;
  if (pid === undefined || proc.child.exitCode !== null || proc.child.signalCode !== null) return;
  const signal = (sig: NodeJS.Signals) => {
    try {
      process.kill(-pid, sig);
    } catch {
      // already gone
    }
  };
  signal('SIGTERM');
  const timer = setTimeout(() => signal('SIGKILL'), 5_000);
  await proc.exited;
  clearTimeout(timer);
}

/** Creates a project through the form (target: agents labelled web). */
async function createProject(name: string, commands: string[], env = '') {
  await page.goto(`${coord.url}/projects/new`);
  await page.getByLabel('Name', { exact: true }).fill(name);
  await page.getByLabel('Repository URL').fill(repo.url);
  for (const [i, command] of commands.entries()) {
    if (i > 0) await page.getByRole('button', { name: 'Add a command' }).click();
    await page.getByLabel(`Command ${i + 1}`).fill(command);
  }
  await page.getByLabel('Agent labels').fill('web');
  if (env) await page.getByLabel('Environment', { exact: true }).fill(env);
  await page.getByRole('button', { name: 'Create project' }).click();
  await page.waitForURL((url) => /^\/projects\/[0-9a-f-]{36}$/.test(url.pathname));
  return new URL(page.url()).pathname.split('/')[2]!;
}

/** Presses Deploy on the project's page; the deployment page it lands on. */
async function deployFromProjectPage(projectId: string): Promise<string> {
  await page.goto(`${coord.url}/projects/${projectId}`);
  await page.getByRole('button', { name: 'Deploy', exact: true }).click();
  await page.waitForURL((url) => /^\/deploy\/[0-9a-f-]{36}$/.test(url.pathname));
  return new URL(page.url()).pathname.split('/')[2]!;
}

beforeAll(async () => {
  coord = await startCoordinator({ AGENT_HEARTBEAT_MS: '500', SCHEDULER_INTERVAL_MS: '200' });
  repo = await createTestRepo();
  await repo.commit({ 'index.html': '<h1>hello</h1>\n' }, 'first page');
  gates = await mkdtemp(join(tmpdir(), 'deckhand-gates-'));
  browser = await launchBrowser();
  page = await browser.newPage();
  page.on('dialog', (d) => void d.accept());
}, 60_000);

afterAll(async () => {
  await browser?.close();
  if (agent) await stopGroup(agent);
  if (agentDir) await rm(agentDir, { recursive: true, force: true });
  await coord?.close();
  await repo?.remove();
  if (gates) await rm(gates, { recursive: true, force: true });
}, 60_000);

describe('a newcomer', () => {
  it('goes from the first page to a successful deployment, watching it live', async () => {
    // The first page: create the admin account.
    await page.goto(coord.url);
    await expect.poll(() => page.locator('h1').textContent()).toBe('Create the admin account');
    await page.getByLabel('Email').fill(EMAIL);
    await page.getByLabel('Password').fill(PASSWORD);
    await page.getByRole('button', { name: 'Create the admin account' }).click();
    await page.waitForURL(`${coord.url}/`);
    await screenshot(page, 'newcomer-dashboard-empty');

    // Create a project, from the dashboard's link.
    await page.getByRole('link', { name: 'New project' }).click();
    await page.waitForURL(`${coord.url}/projects/new`);
    const gate = join(gates, 'first');
    const projectId = await createProject(
      'site',
      [
        'echo building the site; cat index.html',
        'while [ ! -f "$GATE" ]; do sleep 0.1; done; echo site-is-live',
      ],
      `GATE=${gate}`,
    );
    expect(await page.locator('.alert-notice').textContent()).toBe('Project site created');
    await screenshot(page, 'newcomer-project-created');

    // Add an agent on the Agents page and run the command it shows, exactly, on "the host": an
    // empty folder here, nothing of this checkout on the way (the agent comes from the coordinator).
    await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Agents' }).click();
    await page.getByLabel('Name').fill('web-1');
    await page.getByLabel('Labels').fill('web');
    await page.getByRole('button', { name: 'Add agent' }).click();
    await page.waitForSelector('#agent-command');
    const command = (await page.locator('#agent-command').textContent())!;
    agentDir = await mkdtemp(join(tmpdir(), 'deckhand-newcomer-host-'));
    agent = runAsShown(command, agentDir);
    const started = agent;
    await expect
      .poll(
        async () => {
          if (started.child.exitCode !== null) {
            throw new Error(
              `the command on the page stopped (${started.child.exitCode}):\n${started.output()}`,
            );
          }
          await page.goto(`${coord.url}/agents`);
          return page.locator('tr', { hasText: 'web-1' }).locator('.badge').textContent();
        },
        // The coordinator builds the agent file on the first download.
        { timeout: 60_000 },
      )
      .toBe('online');

    // Deploy from the project's page; the output arrives live on the deployment page.
    const id = await deployFromProjectPage(projectId);
    await page.evaluate('window.sameDocument = true');
    await page.locator('pre.log', { hasText: 'building the site' }).waitFor({ timeout: 20_000 });
    expect(await page.locator('pre.log', { hasText: '<h1>hello</h1>' }).count()).toBe(1);
    expect(await statusText(page)).toBe('running');
    await screenshot(page, 'newcomer-deployment-running');
    await writeFile(gate, '');
    await page.locator('pre.log', { hasText: 'site-is-live' }).waitFor({ timeout: 20_000 });
    await expect.poll(() => statusText(page), { timeout: 20_000 }).toBe('success');
    expect(await page.evaluate('window.sameDocument')).toBe(true);
    await screenshot(page, 'newcomer-deployment-success');

    // The project's page and the dashboard say so.
    await page.getByRole('link', { name: 'site' }).click();
    await page.waitForURL(`${coord.url}/projects/${projectId}`);
    const row = page.locator('#history tr', { has: page.locator(`a[href="/deploy/${id}"]`) });
    expect(await row.locator('.badge').textContent()).toBe('success');
    await page.goto(coord.url);
    expect(await page.locator('tr', { hasText: 'site' }).locator('.badge').textContent()).toBe('success');
    await screenshot(page, 'newcomer-dashboard');
    expect(browser.errors).toEqual([]);
  }, 120_000);

  it('sees a failing deployment fail, and cancels a running one', async () => {
    const broken = await createProject('broken', ['echo trying; echo it broke >&2; exit 4']);
    const failed = await deployFromProjectPage(broken);
    await expect.poll(() => statusText(page), { timeout: 20_000 }).toBe('failed');
    const step = page.locator('details.step', { hasText: 'it broke' });
    expect(await step.locator('.step-meta').textContent()).toMatch(/^exit 4 · /);
    await page.goto(`${coord.url}/projects/${broken}`);
    const row = page.locator('#history tr', { has: page.locator(`a[href="/deploy/${failed}"]`) });
    expect(await row.locator('.badge').textContent()).toBe('failed');
    await screenshot(page, 'newcomer-project-failed');

    const slow = await createProject('slow', ['echo started; sleep 60']);
    await deployFromProjectPage(slow);
    await page.locator('pre.log', { hasText: 'started' }).waitFor({ timeout: 20_000 });
    await page.getByRole('button', { name: 'Cancel' }).click();
    await expect.poll(() => statusText(page), { timeout: 20_000 }).toBe('cancelled');
    await page.goto(`${coord.url}/projects/${slow}`);
    expect(await page.locator('#history .badge').first().textContent()).toBe('cancelled');
    expect(browser.errors).toEqual([]);
  }, 120_000);
});
