// Signing in in a real browser: the first run offers to create the admin account, errors appear
// beside the form, the rate limit reads as a sentence, sign out ends the session; pages look
// right in dark mode and on a phone. Screenshots: test/.screenshots/sign-in-*.png.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { launchBrowser, screenshot, type TestBrowser } from '../helpers/browser.ts';
import { coordinatorFor } from '../helpers/coordinator.ts';

const EMAIL = 'admin@example.com';
const PASSWORD = 'correct horse battery staple';

describe('sign in, register and sign out in the browser', () => {
  // A low limit so the test can reach it: register, one wrong and two right sign-ins fit.
  const coord = coordinatorFor({ LOGIN_RATE_LIMIT: '6' });
  let browser: TestBrowser;

  beforeAll(async () => {
    browser = await launchBrowser();
  });
  afterAll(async () => {
    await browser?.close();
  });

  it('first run: /login offers to create the admin account; creating it lands on the dashboard', async () => {
    const page = await browser.newPage();
    await page.goto(`${coord.current.url}/deployments`);
    // Not signed in: sent to the sign-in page, which (no account yet) creates the admin account.
    expect(new URL(page.url()).pathname).toBe('/login');
    await expect.poll(() => page.locator('h1').textContent()).toBe('Create the admin account');
    expect(await page.locator('#setup_token').count()).toBe(0); // loopback: no setup token
    await screenshot(page, 'sign-in-first-run');
    await page.getByLabel('Email').fill(EMAIL);
    await page.getByLabel('Password').fill(PASSWORD);
    await page.getByRole('button', { name: 'Create the admin account' }).click();
    await page.waitForURL(/\/deployments$/);
    expect(await page.locator('.account').textContent()).toContain(EMAIL);
    await page.goto(`${coord.current.url}/`);
    expect(await page.locator('h1').textContent()).toBe('Dashboard');
    await expect.poll(() => page.getByText('No projects yet.').count()).toBe(1);
    await screenshot(page, 'dashboard-empty');
    await page.close();
  });

  it('sign out ends the session; a wrong password is shown beside the form; the right one signs in', async () => {
    const page = await browser.newPage();
    await page.goto(`${coord.current.url}/`);
    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.waitForURL(/\/login$/);
    expect(await page.locator('h1').textContent()).toBe('Sign in');
    // The session is gone for good: the dashboard sends us back to sign in.
    await page.goto(`${coord.current.url}/`);
    expect(new URL(page.url()).pathname).toBe('/login');

    await page.getByLabel('Email').fill(EMAIL);
    await page.getByLabel('Password').fill('not the password');
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.waitForSelector('#sign-in-error');
    expect(await page.locator('#sign-in-error').textContent()).toBe('Invalid email or password');
    // What was typed is kept, except the password.
    expect(await page.getByLabel('Email').inputValue()).toBe(EMAIL);
    expect(await page.getByLabel('Password').inputValue()).toBe('');
    await screenshot(page, 'sign-in-error');

    await page.getByLabel('Password').fill(PASSWORD);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.waitForURL(`${coord.current.url}/`);
    expect(await page.locator('h1').textContent()).toBe('Dashboard');
    await page.close();
  });

  it('a form without the session CSRF token is refused and nothing happens', async () => {
    const page = await browser.newPage();
    await page.goto(`${coord.current.url}/`);
    await page.evaluate("document.querySelector('.account input[name=_csrf]').value = 'forged'");
    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.waitForSelector('.alert-error');
    expect(await page.locator('.alert-error').textContent()).toBe(
      'This form has expired: reload the page and try again',
    );
    // Still signed in.
    expect(await page.locator('.account').textContent()).toContain(EMAIL);
    await page.close();
  });

  it('dark mode and a phone-sized screen', async () => {
    const dark = await launchBrowser({ colorScheme: 'dark', viewport: { width: 390, height: 844 } });
    try {
      const page = await dark.newPage();
      await page.goto(`${coord.current.url}/login`);
      const bg = await page.evaluate('getComputedStyle(document.body).backgroundColor');
      expect(bg).toBe('rgb(18, 19, 22)');
      // Nothing wider than the screen.
      expect(await page.evaluate('document.documentElement.scrollWidth')).toBeLessThanOrEqual(390);
      await screenshot(page, 'sign-in-dark-phone');
    } finally {
      await dark.close();
    }
  });

  it('past the rate limit the form says when to try again', async () => {
    const page = await browser.newPage();
    await page.goto(`${coord.current.url}/`);
    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.waitForURL(/\/login$/);
    for (let i = 0; i < 6; i++) {
      await page.getByLabel('Email').fill(EMAIL);
      await page.getByLabel('Password').fill('still wrong');
      await page.getByRole('button', { name: 'Sign in' }).click();
      await page.waitForSelector('#sign-in-error');
      if ((await page.locator('#sign-in-error').textContent())?.startsWith('Too many requests')) break;
    }
    expect(await page.locator('#sign-in-error').textContent()).toMatch(/^Too many requests: try again in /);
    await screenshot(page, 'sign-in-rate-limited');
    expect(browser.errors).toEqual([]);
    await page.close();
  });
});
