// Installing an agent from the Agents page in a real browser, against a real coordinator and a
// real OpenSSH server (this machine is the host): the admin fetches the host key, uses it only by
// saying it matches, gives the key, name and labels, and the progress page follows the steps to
// the agent online; a wrong pin ends failed with the reason. Screenshots:
// test/.screenshots/agent-install-*.png.
import { execFile } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { Page } from 'playwright-core';
import { ed25519KeyPair } from '../../coordinator/src/modules/ssh/ed25519-key.ts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { launchBrowser, screenshot, type TestBrowser } from '../helpers/browser.ts';
import { coordinatorFor } from '../helpers/coordinator.ts';
import { startSshd, type TestSshd } from '../helpers/sshd.ts';

const exec = promisify(execFile);

describe('installing an agent from the Agents page', () => {
  const coord = coordinatorFor({ AGENT_HEARTBEAT_MS: '1000' });
  let browser: TestBrowser;
  let page: Page;
  let sshd: TestSshd;
  let tmp: string;
  let privateKey: string;
  let fingerprint: string;

  beforeAll(async () => {
    tmp = await mkdtemp(join(tmpdir(), 'deckhand-install-page-'));
    const pair = ed25519KeyPair('deckhand-install-page-test');
    privateKey = pair.private;
    sshd = await startSshd({ authorizedKeys: [pair.public] });
    const pub = join(tmp, 'host.pub');
    await writeFile(pub, `${sshd.hostKeyLine.split(' ').slice(1).join(' ')}\n`);
    fingerprint = (await exec('ssh-keygen', ['-l', '-E', 'sha256', '-f', pub])).stdout.split(' ')[1]!;
    browser = await launchBrowser();
    page = await browser.newPage();
    await page.goto(`${coord.current.url}/register`);
    await page.getByLabel('Email').fill('admin@example.com');
    await page.getByLabel('Password').fill('correct horse battery staple');
    await page.getByRole('button', { name: 'Create the admin account' }).click();
    await page.waitForURL(`${coord.current.url}/`);
  });
  afterAll(async () => {
    const pidFile = join(tmp, 'web-9', 'agent.pid');
    if (existsSync(pidFile)) {
      try {
        process.kill(Number(readFileSync(pidFile, 'utf8').trim()), 'SIGTERM');
      } catch {
        // already gone
      }
    }
    await browser?.close();
    await sshd?.stop();
    await rm(tmp, { recursive: true, force: true });
  });

  async function fillForm(name: string) {
    await page.goto(`${coord.current.url}/agents`);
    await page.getByRole('link', { name: 'Install on a host over SSH' }).first().click();
    await page.waitForURL(`${coord.current.url}/agents/install`);
    await page.locator('#install-host').fill('127.0.0.1');
    await page.locator('#install-port').fill(String(sshd.port));
    await page.locator('#install-username').fill(sshd.user);
    await page.locator('#install-key').fill(privateKey);
    await page.locator('#install-name').fill(name);
    await page.locator('#install-labels').fill(`web ${name}`);
    await page.locator('#install-node').fill(process.execPath);
    await page.locator('#install-dir').fill(join(tmp, name));
  }

  it('fetches the host key, takes it only when the admin says it matches, and ends at the agent online', async () => {
    await fillForm('web-9');
    // Nothing is accepted by itself: the fingerprint field stays empty until the admin says so.
    await page.getByRole('button', { name: 'Fetch host key' }).click();
    await page.locator('#install-host-key code').first().waitFor();
    expect(await page.locator('#install-host-key code').first().textContent()).toBe(fingerprint);
    expect(await page.locator('#install-fingerprint').inputValue()).toBe('');
    await screenshot(page, 'agent-install-form');
    await page.getByRole('button', { name: 'It matches: use this key' }).first().click();
    expect(await page.locator('#install-fingerprint').inputValue()).toBe(fingerprint);

    await page.getByRole('button', { name: 'Install agent' }).click();
    await page.waitForURL(/\/agents\/installs\/[0-9a-f-]{36}$/);
    expect(await page.locator('h1').textContent()).toBe('Installing agent web-9');
    await page.getByText('Done: web-9 is online').waitFor({ timeout: 45_000 });
    expect(await page.locator('[data-step][data-status="done"]').count()).toBe(7);
    expect(await page.locator('#install-lines').textContent()).toContain('Registered agent web-9');
    await screenshot(page, 'agent-install-done');

    await page.goto(`${coord.current.url}/agents`);
    const row = page.locator('tr', { hasText: 'web-9' });
    expect(await row.locator('.badge-online').count()).toBe(1);
    expect(browser.errors).toEqual([]);
  });

  it('a wrong pin ends the run failed with the reason; a refused form comes back filled in', async () => {
    await fillForm('web-10');
    const wrong = `SHA256:${'A'.repeat(43)}`;
    await page.locator('#install-fingerprint').fill(wrong);
    await page.getByRole('button', { name: 'Install agent' }).click();
    await page.waitForURL(/\/agents\/installs\//);
    await page.getByText('The installation failed.').waitFor({ timeout: 30_000 });
    expect(await page.locator('#install-error').textContent()).toContain(
      `it presented ${fingerprint} (ssh-ed25519), not ${wrong}. Nothing was sent.`,
    );
    await screenshot(page, 'agent-install-failed');

    // A refused form (a name already taken) comes back with the error and what was typed.
    await fillForm('web-9');
    await page.locator('#install-fingerprint').fill(fingerprint);
    await page.getByRole('button', { name: 'Install agent' }).click();
    await page.waitForURL(`${coord.current.url}/agents/install`);
    expect(await page.locator('#install-agent-error').textContent()).toContain('already exists');
    expect(await page.locator('#install-host').inputValue()).toBe('127.0.0.1');
  });
});
