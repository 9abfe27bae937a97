// The project pages in a real browser against a real coordinator, database, git repository and
// agent: creating a project through the form (errors beside it, what was typed kept, secrets
// not), the project's page (Deploy with an optional commit, history with pages, Rollback to a kept
// release, the webhook secret revealed and rotated — the old one then refused —, deliveries with
// their decisions and Redeliver; a pushed branch name shown as text), a phone in dark mode, the
// settings (secret values write-only, never in the HTML), an SSH target against a real sshd (Fetch
// host key, then deploy over SSH) and deleting; a deployer and a viewer see no admin controls.
// Screenshots: test/.screenshots/project-*.png.
import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { Page } from 'playwright-core';
import { ed25519KeyPair } from '../../coordinator/src/modules/ssh/ed25519-key.ts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RunningAgent, startAgent } from '../helpers/agents.ts';
import {
  horizontalOverflow,
  launchBrowser,
  PHONE_DARK,
  registerAdmin,
  screenshot,
  signIn,
  type TestBrowser,
} from '../helpers/browser.ts';
import { Client, startCoordinator, type TestCoordinator } from '../helpers/coordinator.ts';
import { createTestRepo, type TestRepo } from '../helpers/git.ts';
import { storedSecrets } from '../helpers/projects.ts';
import { startSshd } from '../helpers/sshd.ts';
import { pushTo, signAny } from '../helpers/webhooks.ts';

const ADMIN = 'admin@example.com';
const PASSWORD = 'correct horse battery staple';
const SECRET = 'sk-live-form-secret-value';
const SECOND_SECRET = 'another-secret-value-9876';

let coord: TestCoordinator;
let admin: Client;
let repo: TestRepo;
let agent: RunningAgent;
let browser: TestBrowser;
let page: Page;
let projectId: string;
const commits: string[] = [];

const badgeOf = (p: Page, id: string) =>
  p
    .locator('#history tr', { has: p.locator(`a[href="/deploy/${id}"]`) })
    .locator('.badge')
    .textContent();

async function waitFinished(id: string, status = 'success') {
  const final = ['success', 'failed', 'cancelled', 'timed_out'];
  await expect
    .poll(async () => (await admin.get(`/deploy/${id}`)).json.deployment.status, { timeout: 30_000 })
    .toSatisfy((s: string) => final.includes(s));
  const res = await admin.get(`/deploy/${id}`);
  expect(res.json.deployment.status, JSON.stringify(res.json.logs)).toBe(status);
}

/** The deployment the page went to (after a Deploy or Rollback form post). */
async function deploymentOfPage(p: Page): Promise<string> {
  await p.waitForURL((url) => /^\/deploy\/[0-9a-f-]{36}$/.test(url.pathname));
  return new URL(p.url()).pathname.split('/')[2]!;
}

beforeAll(async () => {
  coord = await startCoordinator({ AGENT_HEARTBEAT_MS: '500', SCHEDULER_INTERVAL_MS: '200' });
  repo = await createTestRepo();
  // The secret's value, for a command to compare with what it is given.
  commits.push(await repo.commit({ 'app.txt': 'version 1\n', 'expected-key': SECRET }, 'first'));
  browser = await launchBrowser();
  page = await browser.newPage();
  page.on('dialog', (d) => void d.accept());
  await registerAdmin(page, coord.url, ADMIN, PASSWORD);
  admin = new Client(coord.url);
  const res = await admin.post('/login', { email: ADMIN, password: PASSWORD });
  expect(res.status, res.text).toBe(200);
  const created = await admin.post('/agents', { name: 'web-1', labels: ['web'] });
  expect(created.status).toBe(201);
  agent = await startAgent(coord.url, created.json.token);
}, 60_000);

afterAll(async () => {
  await browser?.close();
  await agent?.stop();
  await coord?.close();
  await repo?.remove();
}, 60_000);

describe('creating a project in the browser', () => {
  it('shows the empty project list, and the form with its errors beside it', async () => {
    await page.goto(`${coord.url}/projects`);
    expect(await page.getByText('No projects yet.').count()).toBe(1);
    await screenshot(page, 'project-list-empty');
    await page.getByRole('link', { name: 'New project' }).click();
    await page.waitForURL(`${coord.url}/projects/new`);
    await screenshot(page, 'project-new');

    // A bad name: refused by the server (the browser's own check switched off to get there).
    await page.getByLabel('Name', { exact: true }).fill('-bad name');
    await page.evaluate('document.querySelector("form.project-form").noValidate = true');
    await page.getByLabel('Repository URL').fill(repo.url);
    await page.getByLabel('Command 1').fill('echo one');
    await page.getByLabel('Agent labels').fill('web');
    await page.getByLabel('Secrets', { exact: true }).fill(`API_KEY=${SECRET}`);
    await page.getByRole('button', { name: 'Create project' }).click();
    await page.waitForSelector('#project-error');
    expect(page.url()).toBe(`${coord.url}/projects/new`);
    expect(await page.locator('#project-error').textContent()).toBe(
      'name: letters, digits, ".", "_" and "-", starting with a letter or digit',
    );
    expect(await page.getByLabel('Name', { exact: true }).getAttribute('aria-invalid')).toBe('true');
    // What was typed is back, except the secret.
    expect(await page.getByLabel('Repository URL').inputValue()).toBe(repo.url);
    expect(await page.getByLabel('Command 1').inputValue()).toBe('echo one');
    expect(await page.getByLabel('Secrets', { exact: true }).inputValue()).toBe('');
    expect(await page.content()).not.toContain(SECRET);
    await screenshot(page, 'project-new-error');
  });

  it('creates it: commands added and reordered, target, environment, secret and releases', async () => {
    await page.goto(`${coord.url}/projects/new`);
    await page.getByLabel('Name', { exact: true }).fill('shop');
    await page.getByLabel('Repository URL').fill(repo.url);
    await page.getByLabel('Command 1').fill('echo second; test "$API_KEY" = "$(cat expected-key)"');
    await page.getByRole('button', { name: 'Add a command' }).click();
    const inputs = page.locator('#commands input[name=commands]');
    await inputs.last().fill('echo first && cat app.txt');
    // The keyboard moves it up: Tab to the last row's "Move command up" and press it.
    // Up twice: a click, then Enter on the same button (it keeps the focus as the row moves).
    await page.locator('#commands li').last().getByRole('button', { name: 'Move command up' }).click();
    await page.keyboard.press('Enter');
    await page.getByLabel('Agent labels').fill('web');
    await page.getByLabel('Environment', { exact: true }).fill('MODE=production\nREGION=eu');
    await page.getByLabel('Secrets', { exact: true }).fill(`API_KEY=${SECRET}`);
    await page.getByLabel(/Build each deployment in its own release folder/).check();
    await page.getByLabel('Releases to keep').fill('3');
    await page.getByLabel('Email addresses').fill('ops@example.com');
    await page.getByRole('button', { name: 'Create project' }).click();
    await page.waitForURL((url) => url.pathname.startsWith('/projects/') && url.hash === '#webhook');
    projectId = new URL(page.url()).pathname.split('/')[2]!;
    expect(await page.locator('.alert-notice').textContent()).toBe('Project shop created');

    const res = await admin.get(`/projects/${projectId}`);
    expect(res.json.project).toMatchObject({
      name: 'shop',
      forge_url: repo.url,
      branch_name: 'main',
      target: { agents: { labels: ['web'] } },
      env: { MODE: 'production', REGION: 'eu' },
      secret_keys: ['API_KEY'],
      releases: { keep: 3, health_check: null },
      notifications: { emails: ['ops@example.com'] },
    });
    expect(res.json.project.commands).toEqual([
      'echo first && cat app.txt',
      'echo second; test "$API_KEY" = "$(cat expected-key)"',
    ]);
    expect(await storedSecrets(coord, projectId)).toEqual({ API_KEY: SECRET });

    // Empty states of the new project's page.
    expect(await page.getByText('Not deployed yet.').count()).toBe(1);
    expect(await page.getByText('No deliveries yet.').count()).toBe(1);
    expect(await page.getByText('No release kept on the hosts yet').count()).toBe(1);
    await screenshot(page, 'project-empty');
  });
});

describe('the project page', () => {
  it('deploys (the branch head, then a given commit) and lists them', async () => {
    await page.goto(`${coord.url}/projects/${projectId}`);
    await page.getByRole('button', { name: 'Deploy', exact: true }).click();
    const first = await deploymentOfPage(page);
    await waitFinished(first);
    expect((await admin.get(`/deploy/${first}`)).json.deployment.commit).toBe(commits[0]);

    commits.push(await repo.commit({ 'app.txt': 'version 2\n' }, 'second'));
    commits.push(await repo.commit({ 'app.txt': 'version 3\n' }, 'third'));
    // A commit given: not the head.
    await page.goto(`${coord.url}/projects/${projectId}`);
    await page.getByLabel(/^Commit/).fill(commits[1]!);
    await page.getByRole('button', { name: 'Deploy', exact: true }).click();
    const second = await deploymentOfPage(page);
    await waitFinished(second);
    expect((await admin.get(`/deploy/${second}`)).json.deployment.commit).toBe(commits[1]);

    // A bad commit: the error beside the Deploy form.
    await page.goto(`${coord.url}/projects/${projectId}`);
    await page.evaluate('document.getElementById("deploy-commit").removeAttribute("pattern")');
    await page.getByLabel(/^Commit/).fill('not-a-sha');
    await page.getByRole('button', { name: 'Deploy', exact: true }).click();
    await page.waitForSelector('#deploy-error');
    expect(await page.locator('#deploy-error').textContent()).toBe(
      'commit: give the full commit SHA (40 hex digits), or leave it empty for the branch head',
    );
    expect(await page.getByLabel(/^Commit/).inputValue()).toBe('not-a-sha');
    // An abbreviated one too (agents cannot check one out): refused before anything is queued.
    await page.evaluate('document.getElementById("deploy-commit").removeAttribute("pattern")');
    await page.getByLabel(/^Commit/).fill(commits[1]!.slice(0, 12));
    await page.getByRole('button', { name: 'Deploy', exact: true }).click();
    await page.waitForLoadState();
    // The page came back with the error and what was typed: this post's answer, not the last one.
    await expect.poll(() => page.getByLabel(/^Commit/).inputValue()).toBe(commits[1]!.slice(0, 12));
    expect(await page.locator('#deploy-error').textContent()).toMatch(/^commit: give the full commit SHA/);
    expect((await admin.get(`/deployments?project_id=${projectId}`)).json.deployments).toHaveLength(2);
    await screenshot(page, 'project-deploy-error');

    await page.goto(`${coord.url}/projects/${projectId}`);
    expect(await badgeOf(page, first)).toBe('success');
    expect(await badgeOf(page, second)).toBe('success');
    expect(await page.locator('#history tbody tr').count()).toBe(2);
  }, 90_000);

  it('rolls back to a kept release from the page', async () => {
    await page.goto(`${coord.url}/projects/${projectId}`);
    const releases = page.locator('#releases li');
    expect(await releases.count()).toBe(2);
    // The newest is live (no button); the older one can be rolled back to.
    expect(await releases.nth(0).locator('.tag').textContent()).toBe('live');
    await screenshot(page, 'project-with-data');
    await releases
      .nth(1)
      .getByRole('button', { name: /^Roll back to/ })
      .click();
    const rollback = await deploymentOfPage(page);
    expect(await page.locator('.alert-notice').textContent()).toBe('Rollback queued');
    await waitFinished(rollback);
    const res = await admin.get(`/deploy/${rollback}`);
    expect(res.json.deployment).toMatchObject({ trigger: 'rollback', commit: commits[0] });
    // Now the first release is live.
    await page.goto(`${coord.url}/projects/${projectId}`);
    const live = page.locator('#releases li', { has: page.locator('.tag') });
    expect(await live.locator('code').getAttribute('title')).toBe(commits[0]);
  }, 90_000);

  it('reveals the webhook secret on request, rotates it, and the old one is then refused', async () => {
    await page.goto(`${coord.url}/projects/${projectId}`);
    expect(await page.locator('#webhook-url').textContent()).toBe(`${coord.url}/webhook/${projectId}`);
    const { secret } = (await admin.get(`/projects/${projectId}/webhook`)).json.webhook;
    // Not in the page until asked for.
    expect(await page.content()).not.toContain(secret);
    await page.getByRole('button', { name: 'Reveal' }).click();
    await expect.poll(() => page.locator('#webhook-secret').textContent()).toBe(secret);
    await browser.context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: coord.url });
    await page.locator('[data-copy="webhook-secret"]').click();
    expect(await page.evaluate('navigator.clipboard.readText()')).toBe(secret);
    await screenshot(page, 'project-webhook-revealed');

    const deliver = async (s: string, branch = 'feature/x') => {
      const body = JSON.stringify(pushTo(branch));
      return fetch(`${coord.url}/webhook/${projectId}`, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          'x-github-event': 'push',
          'x-github-delivery': crypto.randomUUID(),
          'x-hub-signature-256': await signAny(s, body),
        },
        body,
      });
    };
    expect((await deliver(secret)).status).toBe(200);
    // A branch name is the pusher's text: shown as text.
    const hostile = 'x<img src=x onerror="window.pwned=1">';
    expect((await deliver(secret, hostile)).status).toBe(200);

    await page.getByRole('button', { name: 'Rotate the secret' }).click();
    await page.waitForSelector('.alert-notice');
    expect(await page.locator('.alert-notice').textContent()).toMatch(/^New webhook secret/);
    await page.getByRole('button', { name: 'Reveal' }).click();
    await expect.poll(() => page.locator('#webhook-secret').textContent()).not.toBe('');
    const rotated = (await page.locator('#webhook-secret').textContent())!;
    expect(rotated).not.toBe(secret);
    expect((await admin.get(`/projects/${projectId}/webhook`)).json.webhook.secret).toBe(rotated);
    expect((await deliver(secret)).status).toBe(401);
    expect((await deliver(rotated)).status).toBe(200);
    // Without script, "Show the secret" opens it on a page of its own.
    await page.goto(`${coord.url}/projects/${projectId}/webhook`);
    expect(await page.locator('#webhook-secret').textContent()).toBe(rotated);
    await page.goto(`${coord.url}/projects/${projectId}`);

    // The deliveries, newest first, with why each did or did not deploy; redeliver one.
    await page.reload();
    const rows = page.locator('#deliveries tbody tr');
    expect(await rows.count()).toBe(4);
    expect(await rows.nth(2).textContent()).toContain(hostile);
    expect(await page.locator('#deliveries img').count()).toBe(0);
    expect(await page.evaluate('window.pwned')).toBeUndefined();
    expect(await rows.nth(0).textContent()).toMatch(/ignored/);
    expect(await rows.nth(1).locator('.decision').textContent()).toBe('rejected');
    expect(
      await rows
        .nth(1)
        .getByRole('button', { name: /^Redeliver/ })
        .count(),
    ).toBe(0);
    await screenshot(page, 'project-deliveries');
    await rows
      .nth(0)
      .getByRole('button', { name: /^Redeliver/ })
      .click();
    await page.waitForSelector('.alert-notice');
    expect(await page.locator('.alert-notice').textContent()).toMatch(/^Redelivered: Ignored/);
    expect(await page.locator('#deliveries tbody tr').count()).toBe(5);
  }, 90_000);

  it('adds an outgoing webhook (its secret shown once) and deletes it', async () => {
    await page.goto(`${coord.url}/projects/${projectId}`);
    expect(await page.locator('#hooks').getByText('None yet.').count()).toBe(1);
    // Credentials in the URL: refused beside the form, what was typed kept.
    await page.getByLabel('URL', { exact: true }).fill('https://user:pw@example.com/hook');
    await page.getByRole('button', { name: 'Add outgoing webhook' }).click();
    await page.waitForSelector('#add-hook-error');
    expect(await page.getByLabel('URL', { exact: true }).inputValue()).toBe(
      'https://user:pw@example.com/hook',
    );

    await page.getByLabel('URL', { exact: true }).fill('https://example.com/deckhand-hook');
    await page.getByLabel('deployment.finished').check();
    await page.getByRole('button', { name: 'Add outgoing webhook' }).click();
    await page.waitForSelector('#hook-secret');
    const secret = (await page.locator('#hook-secret').textContent())!;
    expect(secret).toMatch(/^whsec_/);
    const hooks = (await admin.get(`/projects/${projectId}/hooks`)).json.hooks;
    expect(hooks).toMatchObject([
      { url: 'https://example.com/deckhand-hook', events: ['deployment.finished'] },
    ]);
    await screenshot(page, 'project-hook-created');

    await page.getByRole('link', { name: 'Back to the project' }).click();
    expect(await page.content()).not.toContain(secret);
    const row = page.locator('#hooks li', { hasText: 'https://example.com/deckhand-hook' });
    expect(await row.textContent()).toContain('deployment.finished');
    await row.getByRole('button', { name: /^Delete/ }).click();
    await page.waitForSelector('.alert-notice');
    expect(await page.locator('.alert-notice').textContent()).toBe('Outgoing webhook deleted');
    expect((await admin.get(`/projects/${projectId}/hooks`)).json.hooks).toEqual([]);
  });

  it('rotates the deploy key', async () => {
    await page.goto(`${coord.url}/projects/${projectId}`);
    const before = await page.locator('#deploy-public-key').textContent();
    expect(before).toMatch(/^ssh-ed25519 /);
    await page.getByRole('button', { name: 'Rotate the deploy key' }).click();
    await page.waitForSelector('.alert-notice');
    expect(await page.locator('.alert-notice').textContent()).toMatch(/^New deploy key/);
    const after = await page.locator('#deploy-public-key').textContent();
    expect(after).toMatch(/^ssh-ed25519 /);
    expect(after).not.toBe(before);
    expect((await admin.get(`/projects/${projectId}`)).json.project.deploy_key.public_key).toBe(after);
  });

  it('fits a phone in dark mode: nothing wider than the screen', async () => {
    const phone = await launchBrowser(PHONE_DARK);
    try {
      const p = await phone.newPage();
      await signIn(p, coord.url, ADMIN, PASSWORD);
      for (const [path, name] of [
        [`/projects/${projectId}`, 'project-phone-dark'],
        [`/projects/${projectId}/settings`, 'project-settings-phone-dark'],
        ['/projects/new', 'project-new-phone-dark'],
      ] as const) {
        await p.goto(coord.url + path);
        await screenshot(p, name);
        expect(await horizontalOverflow(p), path).toBeLessThanOrEqual(0);
      }
      expect(phone.errors).toEqual([]);
    } finally {
      await phone.close();
    }
  }, 60_000);

  it('pages through a long history', async () => {
    // A project no agent serves: its deployments wait, queued, and pile up.
    const res = await admin.post('/projects', {
      name: 'long',
      forge_url: repo.url,
      commands: [`echo ${'a-very-long-command-line '.repeat(20)}`],
      target: { agents: { labels: ['nowhere'] } },
      timeouts: { queue_seconds: 3600 },
    });
    expect(res.status, res.text).toBe(201);
    const id = res.json.project.id as string;
    const ids: string[] = [];
    for (let i = 0; i < 23; i++) {
      const d = await admin.post('/deploy', { projectId: id, commit: commits[i % 3] });
      expect(d.status, d.text).toBe(200);
      ids.push(d.json.deployId);
    }
    await page.goto(`${coord.url}/projects/${id}`);
    expect(await page.locator('#history tbody tr').count()).toBe(20);
    expect(await page.locator(`#history a[href="/deploy/${ids[22]}"]`).count()).toBe(1);
    await screenshot(page, 'project-long');
    await page.getByRole('link', { name: 'Older →' }).click();
    expect(await page.locator('#history tbody tr').count()).toBe(3);
    expect(await page.locator(`#history a[href="/deploy/${ids[0]}"]`).count()).toBe(1);
    expect(await page.getByRole('link', { name: 'Older →' }).count()).toBe(0);
    await page.getByRole('link', { name: '← Newest' }).click();
    expect(await page.locator('#history tbody tr').count()).toBe(20);
    for (const d of ids) await admin.post(`/deploy/${d}/cancel`);
  });
});

describe('project settings', () => {
  it('edits the project; secret values stay write-only and never appear in the HTML', async () => {
    await page.goto(`${coord.url}/projects/${projectId}`);
    await page.locator('.page-head').getByRole('link', { name: 'Settings' }).click();
    await page.waitForURL(`${coord.url}/projects/${projectId}/settings`);
    expect(await page.content()).not.toContain(SECRET.slice(3));
    expect(await page.getByLabel('API_KEY', { exact: true }).inputValue()).toBe('');
    expect(await page.getByLabel('Command 1').inputValue()).toBe('echo first && cat app.txt');
    await screenshot(page, 'project-settings');

    // An error: shown beside the form, the secret typed not kept.
    await page.getByLabel('Branch', { exact: true }).fill('bad..branch');
    await page.getByLabel('Add secrets').fill(`NEW_TOKEN=${SECOND_SECRET}`);
    await page.getByRole('button', { name: 'Save settings' }).click();
    await page.waitForSelector('#project-error');
    expect(await page.locator('#project-error').textContent()).toMatch(/^branch: not a git branch name/);
    expect(await page.getByLabel('Branch', { exact: true }).getAttribute('aria-invalid')).toBe('true');
    expect(await page.getByLabel('Branch', { exact: true }).inputValue()).toBe('bad..branch');
    expect(await page.getByLabel('Add secrets').inputValue()).toBe('');
    expect(await page.content()).not.toContain(SECOND_SECRET);
    await screenshot(page, 'project-settings-error');

    await page.getByLabel('Branch', { exact: true }).fill('main');
    await page.getByLabel('Command 2').fill('echo changed');
    await page.getByLabel('Environment', { exact: true }).fill('MODE=staging');
    await page.getByLabel('Add secrets').fill(`NEW_TOKEN=${SECOND_SECRET}`);
    await page.getByRole('button', { name: 'Save settings' }).click();
    await page.waitForURL(`${coord.url}/projects/${projectId}`);
    expect(await page.locator('.alert-notice').textContent()).toBe('Settings saved');
    const project = (await admin.get(`/projects/${projectId}`)).json.project;
    expect(project.commands).toEqual(['echo first && cat app.txt', 'echo changed']);
    expect(project.env).toEqual({ MODE: 'staging' });
    expect(project.secret_keys).toEqual(['API_KEY', 'NEW_TOKEN']);
    expect(project.releases).toEqual({ keep: 3, health_check: null });
    // Left empty: kept.
    expect(await storedSecrets(coord, projectId)).toEqual({ API_KEY: SECRET, NEW_TOKEN: SECOND_SECRET });
    for (const path of [`/projects/${projectId}`, `/projects/${projectId}/settings`]) {
      await page.goto(coord.url + path);
      const html = await page.content();
      expect(html).not.toContain(SECRET);
      expect(html).not.toContain(SECOND_SECRET);
    }

    // Commit statuses: the token is write-only too, and kept when the field is left empty.
    const forgeToken = 'ghp_formTokenValue1234567890';
    await page.getByLabel('Repository URL').fill('https://github.com/acme/shop.git');
    await page.getByLabel('Report each deployment on the commit, at').selectOption('github');
    await page.getByLabel('Forge API token').fill(forgeToken);
    await page.getByRole('button', { name: 'Save settings' }).click();
    await page.waitForURL(`${coord.url}/projects/${projectId}`);
    let saved = (await admin.get(`/projects/${projectId}`)).json.project;
    expect(saved.commit_status).toEqual({ provider: 'github', api_url: null, has_token: true });
    await page.goto(`${coord.url}/projects/${projectId}/settings`);
    expect(await page.content()).not.toContain(forgeToken);
    expect(await page.getByLabel('Forge API token').inputValue()).toBe('');
    await page.getByRole('button', { name: 'Save settings' }).click();
    await page.waitForURL(`${coord.url}/projects/${projectId}`);
    saved = (await admin.get(`/projects/${projectId}`)).json.project;
    expect(saved.commit_status).toEqual({ provider: 'github', api_url: null, has_token: true });
    await page.goto(`${coord.url}/projects/${projectId}/settings`);
    await page.getByLabel('Report each deployment on the commit, at').selectOption('');
    await page.getByLabel('Repository URL').fill(repo.url);
    await page.getByRole('button', { name: 'Save settings' }).click();
    await page.waitForURL(`${coord.url}/projects/${projectId}`);
    saved = (await admin.get(`/projects/${projectId}`)).json.project;
    expect(saved.commit_status).toBeNull();
    expect(saved.forge_url).toBe(repo.url);
    await page.goto(`${coord.url}/projects/${projectId}/settings`);

    // Replace one secret, remove the other.
    await page.getByLabel('API_KEY', { exact: true }).fill('replaced-value');
    await page.locator('.secret-row', { hasText: 'NEW_TOKEN' }).getByLabel('Remove').check();
    await page.getByRole('button', { name: 'Save settings' }).click();
    await page.waitForURL(`${coord.url}/projects/${projectId}`);
    expect(await storedSecrets(coord, projectId)).toEqual({ API_KEY: 'replaced-value' });
  }, 90_000);
});

describe('an SSH target', () => {
  it('fetches the host key, pins it and deploys over SSH; the private key is never shown again', async () => {
    const tmp = await mkdtemp(join(tmpdir(), 'deckhand-project-ssh-'));
    const pair = ed25519KeyPair('deckhand-project-page-test');
    const sshd = await startSshd({ authorizedKeys: [pair.public] });
    try {
      // The fingerprint as OpenSSH computes it, independently of Deckhand's own code.
      const pub = join(tmp, 'host.pub');
      await writeFile(pub, `${sshd.hostKeyLine.split(' ').slice(1).join(' ')}\n`);
      const exec = promisify(execFile);
      const fingerprint = (await exec('ssh-keygen', ['-l', '-E', 'sha256', '-f', pub])).stdout.split(' ')[1]!;

      await page.goto(`${coord.url}/projects/new`);
      await page.getByLabel('Name', { exact: true }).fill('over-ssh');
      await page.getByLabel('Repository URL').fill(repo.url);
      await page.getByLabel('Command 1').fill('echo deployed over ssh; cat app.txt');
      // Only the chosen target's fields are shown.
      expect(await page.getByLabel('SSH host').isVisible()).toBe(false);
      await page.getByLabel('One host over SSH (no agent)').check();
      expect(await page.getByLabel('Agent labels').isVisible()).toBe(false);
      await page.getByLabel('SSH host').fill('127.0.0.1');
      await page.getByLabel('Port', { exact: true }).fill(String(sshd.port));
      await page.getByLabel('User', { exact: true }).fill(sshd.user);
      await page.getByLabel('Private key').fill(pair.private);
      await page.getByRole('button', { name: 'Fetch host key' }).click();
      const offer = page.locator('#host-key-result li', { hasText: fingerprint });
      await offer.waitFor();
      await screenshot(page, 'project-new-ssh');
      await offer.getByRole('button', { name: 'Use this one' }).click();
      expect(await page.getByLabel('Host key fingerprint').inputValue()).toBe(fingerprint);
      await page.getByRole('button', { name: 'Create project' }).click();
      await page.waitForURL((url) => url.hash === '#webhook');
      const id = new URL(page.url()).pathname.split('/')[2]!;
      expect(await page.locator('dl.facts').textContent()).toContain(
        `${sshd.user}@127.0.0.1:${sshd.port} over SSH`,
      );

      await page.getByRole('button', { name: 'Deploy', exact: true }).click();
      const deployment = await deploymentOfPage(page);
      await waitFinished(deployment);
      await page.locator('pre.log', { hasText: 'deployed over ssh' }).waitFor();

      // The settings keep the key without showing it; saving with the field empty keeps it.
      const keyLine = pair.private.split('\n')[2]!;
      await page.goto(`${coord.url}/projects/${id}/settings`);
      expect(await page.content()).not.toContain(keyLine);
      expect(await page.getByLabel('Private key').inputValue()).toBe('');
      await page.getByRole('button', { name: 'Save settings' }).click();
      await page.waitForURL(`${coord.url}/projects/${id}`);
      await page.getByRole('button', { name: 'Deploy', exact: true }).click();
      await waitFinished(await deploymentOfPage(page));
    } finally {
      await sshd.stop();
      await rm(tmp, { recursive: true, force: true });
    }
  }, 90_000);
});

describe('narrower roles', () => {
  async function member(email: string, role: string): Promise<TestBrowser> {
    const inv = await admin.post('/users/invitations', { email, role });
    expect(inv.status, inv.text).toBe(201);
    const invitation = new URL(inv.json.url as string).searchParams.get('invitation')!;
    const reg = await new Client(coord.url).post('/register', { email, password: PASSWORD, invitation });
    expect(reg.status, reg.text).toBe(201);
    const b = await launchBrowser();
    await signIn(await b.newPage(), coord.url, email, PASSWORD);
    return b;
  }

  it('a deployer can deploy and roll back but sees no admin controls; a viewer only reads', async () => {
    const deployer = await member('deployer@example.com', 'deployer');
    try {
      const p = await deployer.newPage();
      await p.goto(`${coord.url}/projects/${projectId}`);
      expect(await p.getByRole('button', { name: 'Deploy', exact: true }).count()).toBe(1);
      expect(await p.getByRole('button', { name: /^Roll back to/ }).count()).toBeGreaterThan(0);
      for (const name of ['Reveal', 'Rotate the secret', 'Rotate the deploy key']) {
        expect(await p.getByRole('button', { name }).count(), name).toBe(0);
      }
      expect(await p.getByRole('button', { name: /^Redeliver/ }).count()).toBe(0);
      expect(await p.getByRole('link', { name: 'Settings', exact: true }).count()).toBe(1); // the site's nav only
      expect(await p.getByText('The secret is shown to admins.').count()).toBe(1);
      await screenshot(p, 'project-deployer');
      const refused = await p.goto(`${coord.url}/projects/${projectId}/settings`);
      expect(refused?.status()).toBe(403);
      expect(await p.locator('h1').textContent()).toBe('Not allowed');
      await screenshot(p, 'project-settings-refused');
      await p.goto(`${coord.url}/projects`);
      expect(await p.getByRole('link', { name: 'New project' }).count()).toBe(0);
    } finally {
      await deployer.close();
    }

    const viewer = await member('viewer@example.com', 'viewer');
    try {
      const p = await viewer.newPage();
      await p.goto(`${coord.url}/projects/${projectId}`);
      expect(await p.getByRole('button', { name: 'Deploy', exact: true }).count()).toBe(0);
      expect(await p.getByRole('button', { name: /^Roll back to/ }).count()).toBe(0);
      expect(await p.locator('#history tbody tr').count()).toBeGreaterThan(0);
      await screenshot(p, 'project-viewer');
    } finally {
      await viewer.close();
    }
  }, 90_000);
});

describe('deleting', () => {
  it('asks first, then deletes the project and its history', async () => {
    let asked = '';
    const p = await browser.newPage();
    p.on('dialog', (d) => {
      asked = d.message();
      void d.accept();
    });
    await p.goto(`${coord.url}/projects/${projectId}/settings`);
    await p.getByRole('button', { name: 'Delete shop' }).click();
    await p.waitForURL(`${coord.url}/`);
    expect(asked).toMatch(/^Delete shop with its whole deployment history\?/);
    expect(await p.locator('.alert-notice').textContent()).toBe('Project shop deleted');
    expect((await admin.get(`/projects/${projectId}`)).status).toBe(404);
    expect(browser.errors).toEqual([]);
    // Its page is gone: a page saying so, not JSON.
    const gone = await p.goto(`${coord.url}/projects/${projectId}`);
    expect(gone?.status()).toBe(404);
    expect(await p.locator('h1').textContent()).toBe('Not found');
    expect(await p.locator('.empty').textContent()).toContain('Project not found');
    await screenshot(p, 'project-not-found');
    await p.close();
  });
});
