// The agents and settings pages in a real browser against a real coordinator, database, agent
// and SMTP server: an agent is added (token and start command shown once; the token starts a real
// agent that comes online), flagged when older than the coordinator's, revoked; a user is
// invited, registers from the link in a fresh browser, signs in with the narrower role and is
// refused what it may not do, then has its role changed; SMTP settings are stored (the password
// never shown again) and a test email arrives; an API token is created and revoked; another
// browser's session is ended. Screenshots: test/.screenshots/agents-*.png, settings-*.png.
import type { Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RunningAgent, startAgent } from '../helpers/agents.ts';
import { launchBrowser, screenshot, type TestBrowser } from '../helpers/browser.ts';
import { coordinatorFor } from '../helpers/coordinator.ts';
import { startTestSmtpServer, type TestSmtpServer } from '../helpers/smtp-server.ts';

const ADMIN = 'admin@example.com';
const PASSWORD = 'correct horse battery staple';
const INVITEE = 'viewer@example.com';
const INVITEE_PASSWORD = 'another long passphrase';

async function signIn(page: Page, base: string, email: string, password: string) {
  await page.goto(`${base}/login`);
  await page.getByLabel('Email').fill(email);
  await page.getByLabel('Password').fill(password);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.waitForURL(`${base}/`);
}

/** A form post as the page's own script would make it (same origin, the page's CSRF token). */
async function postForm(page: Page, path: string, fields: Record<string, string>): Promise<number> {
  // A string, run in the page (these tests are not compiled with the DOM's types).
  return page.evaluate(`(async () => {
    const csrf = document.querySelector('input[name=_csrf]').value;
    const body = new URLSearchParams({ _csrf: csrf, ...${JSON.stringify(fields)} });
    const res = await fetch(${JSON.stringify(path)}, {
      method: 'POST', headers: { accept: 'text/html' }, body, redirect: 'manual',
    });
    return res.type === 'opaqueredirect' ? 303 : res.status;
  })()`);
}

describe('agents and settings pages in the browser', () => {
  const coord = coordinatorFor();
  let browser: TestBrowser;
  let page: Page;
  let smtp: TestSmtpServer;
  let agent: RunningAgent | undefined;

  beforeAll(async () => {
    browser = await launchBrowser();
    smtp = await startTestSmtpServer({ auth: { user: 'mailer', password: 'smtp-secret-pw' } });
    page = await browser.newPage();
    page.on('dialog', (d) => void d.accept());
    // The first account: the admin.
    await page.goto(`${coord.current.url}/register`);
    await page.getByLabel('Email').fill(ADMIN);
    await page.getByLabel('Password').fill(PASSWORD);
    await page.getByRole('button', { name: 'Create the admin account' }).click();
    await page.waitForURL(`${coord.current.url}/`);
  });
  afterAll(async () => {
    await agent?.stop();
    await browser?.close();
    await smtp?.close();
  });

  it('adds an agent: the token and the command to start it are shown once, and they work', async () => {
    const base = coord.current.url;
    await page.goto(`${base}/agents`);
    await expect.poll(() => page.getByText('No agents yet.').count()).toBe(1);
    await screenshot(page, 'agents-empty');

    await page.getByLabel('Name').fill('web-1');
    await page.getByLabel('Labels').fill('web, production');
    await page.getByRole('button', { name: 'Add agent' }).click();
    await page.waitForSelector('#agent-token');
    expect(await page.locator('h1').textContent()).toBe('Agent web-1 added');
    const token = (await page.locator('#agent-token').textContent())!;
    expect(token).toMatch(/^dha_/);
    expect(await page.locator('#agent-command').textContent()).toBe(
      `curl -fsSLo deckhand-agent.js ${base}/agent/download && node deckhand-agent.js --url ${base} --token ${token}`,
    );
    expect(await page.locator('#agent-env').textContent()).toBe(
      `DECKHAND_URL=${base}\nDECKHAND_TOKEN=${token}\n`,
    );
    const unit = (await page.locator('#agent-unit').textContent())!;
    expect(unit).toContain('[Service]');
    expect(unit).toContain('EnvironmentFile=/etc/deckhand/agent.env');
    expect(unit).toContain('ExecStart=/usr/bin/env node /var/lib/deckhand-agent/deckhand-agent.js');
    expect(await page.locator('#agent-install').textContent()).toContain(`${base}/agent/download`);
    // Copy buttons copy what is shown.
    await browser.context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: base });
    await page.locator('[data-copy="agent-command"]').click();
    expect(await page.evaluate('navigator.clipboard.readText()')).toBe(
      `curl -fsSLo deckhand-agent.js ${base}/agent/download && node deckhand-agent.js --url ${base} --token ${token}`,
    );
    await screenshot(page, 'agents-added');

    // Once: the list never shows it again.
    await page.goto(`${base}/agents`);
    expect(await page.content()).not.toContain(token);
    const row = page.locator('tr', { hasText: 'web-1' });
    expect(await row.locator('.badge').textContent()).toBe('offline');
    expect(await row.textContent()).toContain('production');

    // The token shown starts a real agent, which the page then lists as online with its version.
    agent = await startAgent(base, token);
    await expect
      .poll(
        async () => {
          await page.reload();
          return page.locator('tr', { hasText: 'web-1' }).locator('.badge').textContent();
        },
        { timeout: 15_000 },
      )
      .toBe('online');
    expect(await page.locator('#outdated-agents').count()).toBe(0);
    await screenshot(page, 'agents-online');

    // A name already taken: the error beside the form, what was typed kept.
    await page.getByLabel('Name').fill('web-1');
    await page.getByRole('button', { name: 'Add agent' }).click();
    await page.waitForSelector('#add-agent-error');
    expect(await page.locator('#add-agent-error').textContent()).toBe(
      'An agent with this name already exists',
    );
    expect(await page.getByLabel('Name').inputValue()).toBe('web-1');
  });

  it('warns about an agent older than the one the coordinator serves', async () => {
    const base = coord.current.url;
    const served = (await (await fetch(`${base}/agent/version`)).json()) as { version: string };
    await agent?.stop();
    agent = undefined;
    // What an old agent would have reported when it connected.
    await coord.current.orm.em
      .fork()
      .getConnection()
      .execute("update agents set version = '0.0.1' where name = 'web-1'");
    await page.goto(`${base}/agents`);
    expect(await page.locator('#outdated-agents').textContent()).toContain(
      `older version than ${served.version}`,
    );
    expect(await page.locator('tr', { hasText: 'web-1' }).textContent()).toContain(
      `older than ${served.version}`,
    );
    await screenshot(page, 'agents-outdated');
  });

  it('revokes an agent after asking', async () => {
    const base = coord.current.url;
    await page.goto(`${base}/agents`);
    await page.getByRole('button', { name: 'Revoke agent web-1' }).click();
    await page.waitForSelector('.alert-notice');
    expect(await page.locator('.alert-notice').textContent()).toBe('Agent web-1 revoked');
    await expect.poll(() => page.getByText('No agents yet.').count()).toBe(1);
    const list = (await (
      await fetch(`${base}/agents`, { headers: { cookie: await cookie(page) } })
    ).json()) as {
      agents: unknown[];
    };
    expect(list.agents).toEqual([]);
  });

  let inviteeRow: string;

  it('invites a user, who registers from the link in a fresh browser with the narrower role', async () => {
    const base = coord.current.url;
    await page.goto(`${base}/settings`);
    await page.getByLabel('Email', { exact: true }).fill(INVITEE);
    await page.locator('#invite-role').selectOption('viewer');
    await page.getByRole('button', { name: 'Create invitation link' }).click();
    await page.waitForSelector('#invitation-url');
    const link = (await page.locator('#invitation-url').textContent())!;
    expect(link).toMatch(new RegExp(`^${base}/register\\?invitation=dhi_`));
    await screenshot(page, 'settings-invitation');
    await page.goto(`${base}/settings`);
    expect(await page.content()).not.toContain(link.split('=')[1]);
    expect(await page.locator('#invitations tr', { hasText: INVITEE }).count()).toBe(1);

    const fresh = await launchBrowser();
    try {
      const p = await fresh.newPage();
      await p.goto(link);
      expect(await p.locator('h1').textContent()).toBe('Create an account');
      await p.getByLabel('Email').fill(INVITEE);
      await p.getByLabel('Password').fill(INVITEE_PASSWORD);
      await p.getByRole('button', { name: 'Create account' }).click();
      await p.waitForURL(`${base}/`);
      await p.getByRole('button', { name: 'Sign out' }).click();
      await p.waitForURL(/\/login$/);
      await signIn(p, base, INVITEE, INVITEE_PASSWORD);
      expect(await p.locator('.account').textContent()).toContain('(viewer)');

      // A viewer's settings: only their own tokens and sessions.
      await p.goto(`${base}/settings`);
      expect(await p.locator('#users').count()).toBe(0);
      expect(await p.locator('#smtp').count()).toBe(0);
      expect(await p.locator('#tokens').count()).toBe(1);
      expect(await p.locator('#token-scope option').allTextContents()).toEqual(['read']);
      await screenshot(p, 'settings-viewer');
      // No adding or revoking agents, and the server refuses it when asked anyway.
      await p.goto(`${base}/agents`);
      expect(await p.locator('#add-agent').count()).toBe(0);
      expect(await postForm(p, '/agents', { name: 'sneaky' })).toBe(303);
      await p.goto(`${base}/agents`);
      expect(await p.locator('.alert-error').textContent()).toBe('You do not have permission to do this');
      expect(await postForm(p, '/users/invitations', { email: 'x@example.com', role: 'admin' })).toBe(303);
      await p.goto(`${base}/settings`);
      expect(await p.locator('.alert-error').textContent()).toBe('You do not have permission to do this');
      expect(fresh.errors).toEqual([]);
    } finally {
      await fresh.close();
    }
    // The invitation is used up.
    await page.goto(`${base}/settings`);
    expect(await page.locator('#invitations tr', { hasText: INVITEE }).count()).toBe(0);
    inviteeRow = (await page.locator('#users tr', { hasText: INVITEE }).getAttribute('id'))!;
    expect(inviteeRow).toMatch(/^user-/);
  });

  it('changes a role; the last admin cannot be demoted', async () => {
    const base = coord.current.url;
    await page.goto(`${base}/settings`);
    await page.getByLabel(`Role of ${INVITEE}`, { exact: true }).selectOption('deployer');
    await page.getByRole('button', { name: `Change the role of ${INVITEE}` }).click();
    await page.waitForSelector('.alert-notice');
    expect(await page.locator('.alert-notice').textContent()).toBe(`${INVITEE} is now deployer`);
    expect(await page.getByLabel(`Role of ${INVITEE}`, { exact: true }).inputValue()).toBe('deployer');

    await page.getByLabel(`Role of ${ADMIN}`, { exact: true }).selectOption('viewer');
    await page.getByRole('button', { name: `Change the role of ${ADMIN}` }).click();
    await page.waitForSelector('#users-error');
    expect(await page.locator('#users-error').textContent()).toMatch(/last admin/i);
    await screenshot(page, 'settings-users');
    const me = (await (await fetch(`${base}/me`, { headers: { cookie: await cookie(page) } })).json()) as {
      user: { role: string };
    };
    expect(me.user.role).toBe('admin');
  });

  it('stores SMTP settings (password write-only) and sends a test email through them', async () => {
    const base = coord.current.url;
    await page.goto(`${base}/settings`);
    expect(await page.locator('#smtp-source').textContent()).toContain('Mail is not configured');
    await page.locator('#smtp-host').fill('127.0.0.1');
    await page.locator('#smtp-port').fill(String(smtp.port));
    await page.locator('#smtp-user').fill('mailer');
    await page.locator('#smtp-password').fill('smtp-secret-pw');
    await page.locator('#smtp-from').fill('Deckhand <deckhand@example.com>');
    await page.getByRole('button', { name: 'Save mail settings' }).click();
    await page.waitForSelector('.alert-notice');
    expect(await page.locator('.alert-notice').textContent()).toBe('Mail settings saved');
    expect(await page.locator('#smtp-source').textContent()).toContain('In effect: the settings stored here');
    expect(await page.content()).not.toContain('smtp-secret-pw');
    expect(await page.locator('#smtp-password').inputValue()).toBe('');
    await screenshot(page, 'settings-smtp');

    // Saving again with the password left empty keeps it: the test email still authenticates.
    await page.locator('#smtp-from').fill('deckhand@example.com');
    await page.getByRole('button', { name: 'Save mail settings' }).click();
    await page.waitForSelector('.alert-notice');
    await page.getByRole('button', { name: 'Send test email' }).click();
    await page.waitForSelector('.alert-notice');
    expect(await page.locator('.alert-notice').textContent()).toBe(`Test email sent to ${ADMIN}`);
    const mail = await smtp.waitForMessage();
    expect(mail.subject).toBe('Deckhand test email');
    expect(mail.to).toEqual([ADMIN]);
    expect(mail.from).toBe('deckhand@example.com');

    // A refused login is shown beside the test form.
    await page.locator('#smtp-password').fill('wrong password');
    await page.getByRole('button', { name: 'Save mail settings' }).click();
    await page.waitForSelector('.alert-notice');
    await page.getByRole('button', { name: 'Send test email' }).click();
    await page.waitForSelector('#smtp-test-error');
    expect(await page.locator('#smtp-test-error').textContent()).not.toBe('');
    await screenshot(page, 'settings-smtp-error');
  });

  it('creates an API token (shown once) that works, and revokes it', async () => {
    const base = coord.current.url;
    await page.goto(`${base}/settings`);
    await expect.poll(() => page.getByText('You have no API tokens.').count()).toBe(1);
    await page.getByLabel('Name', { exact: true }).fill('ci');
    await page.getByLabel('Scope').selectOption('deploy');
    await page.getByRole('button', { name: 'Create token' }).click();
    await page.waitForSelector('#api-token');
    const token = (await page.locator('#api-token').textContent())!;
    expect(token).toMatch(/^dht_/);
    await screenshot(page, 'settings-token');
    const auth = { authorization: `Bearer ${token}` };
    expect((await fetch(`${base}/me`, { headers: auth })).status).toBe(200);

    await page.goto(`${base}/settings`);
    expect(await page.content()).not.toContain(token);
    await page.getByRole('button', { name: 'Revoke the token ci' }).click();
    await page.waitForSelector('.alert-notice');
    expect(await page.locator('.alert-notice').textContent()).toBe('API token revoked');
    expect((await fetch(`${base}/me`, { headers: auth })).status).toBe(401);
  });

  it("ends another browser's session; the current one is marked and stays", async () => {
    const base = coord.current.url;
    const other = await launchBrowser();
    try {
      const p = await other.newPage();
      await signIn(p, base, ADMIN, PASSWORD);
      await page.goto(`${base}/settings`);
      const rows = page.locator('#sessions tbody tr');
      expect(await rows.count()).toBe(2);
      expect(await page.locator('#sessions tr[aria-current="true"]').textContent()).toContain(
        '(this browser)',
      );
      await screenshot(page, 'settings-sessions');
      await page.locator('#sessions').getByRole('button', { name: 'Sign out' }).click();
      await page.waitForSelector('.alert-notice');
      expect(await page.locator('.alert-notice').textContent()).toBe('That browser is signed out');
      expect(await rows.count()).toBe(1);
      // The other browser is signed out; this one is not.
      await p.goto(`${base}/settings`);
      expect(new URL(p.url()).pathname).toBe('/login');
      expect(await page.locator('.account').textContent()).toContain(ADMIN);
    } finally {
      await other.close();
    }
    expect(browser.errors).toEqual([]);
  });

  it('dark mode on a phone: the settings and agents pages fit the screen', async () => {
    const base = coord.current.url;
    const dark = await launchBrowser({ colorScheme: 'dark', viewport: { width: 390, height: 844 } });
    try {
      const p = await dark.newPage();
      await signIn(p, base, ADMIN, PASSWORD);
      for (const path of ['/settings', '/agents']) {
        await p.goto(`${base}${path}`);
        expect(await p.evaluate('document.documentElement.scrollWidth')).toBeLessThanOrEqual(390);
        await screenshot(p, `${path.slice(1)}-dark-phone`);
      }
    } finally {
      await dark.close();
    }
  });
});

/** The page's session cookie, to call the JSON API as that browser. */
async function cookie(page: Page): Promise<string> {
  const cookies = await page.context().cookies();
  return cookies.map((c) => `${c.name}=${c.value}`).join('; ');
}
