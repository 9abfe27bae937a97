// Real headless Chromium for the browser tests: Debian's `chromium` driven by playwright-core
// (no browser download). Each launch gets a fresh temporary profile and every background
// network feature switched off, so Chromium neither waits on nor talks to the outside world.
// Screenshots go to test/.screenshots/ (git-ignored) so a change in look can be seen.
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type BrowserContext, chromium, type Page } from 'playwright-core';

export const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
export const SCREENSHOTS = join(dirname(fileURLToPath(import.meta.url)), '..', '.screenshots');

const ARGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

export interface TestBrowser {
  context: BrowserContext;
  /** A new tab; console errors and uncaught page errors are collected in `errors`. */
  newPage(): Promise<Page>;
  /** Everything pages printed with console.error or threw, for assertions and failure messages. */
  errors: string[];
  close(): Promise<void>;
}

export async function launchBrowser(
  opts: { colorScheme?: 'light' | 'dark'; viewport?: { width: number; height: number } } = {},
): Promise<TestBrowser> {
  if (!existsSync(CHROMIUM)) throw new Error(`Chromium not found at ${CHROMIUM} (apt-get install chromium)`);
  const profile = await mkdtemp(join(tmpdir(), 'deckhand-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: ARGS,
    colorScheme: opts.colorScheme ?? 'light',
    viewport: opts.viewport ?? { width: 1280, height: 800 },
    timeout: 30_000,
  });
  context.setDefaultTimeout(15_000);
  const errors: string[] = [];
  const watch = (page: Page) => {
    page.on('console', (m) => {
      if (m.type() === 'error') errors.push(`console: ${m.text()}`);
    });
    page.on('pageerror', (e) => errors.push(`pageerror: ${e.message}`));
  };
  context.on('page', watch);
  return {
    context,
    errors,
    async newPage() {
      return context.newPage();
    },
    async close() {
      await context.close().catch(() => {});
      await rm(profile, { recursive: true, force: true });
    },
  };
}

/** Saves a full-page screenshot as test/.screenshots/<name>.png. */
export async function screenshot(page: Page, name: string): Promise<void> {
  await mkdir(SCREENSHOTS, { recursive: true });
  await page.screenshot({ path: join(SCREENSHOTS, `${name}.png`), fullPage: true });
}

/** A phone (390×844) in dark mode, for `launchBrowser(PHONE_DARK)`. */
export const PHONE_DARK = { colorScheme: 'dark', viewport: { width: 390, height: 844 } } as const;

/** Signs `page` in through the sign-in form at `base`/login; the profile keeps the session. */
export async function signIn(page: Page, base: string, email: string, password: string): Promise<void> {
  await page.goto(`${base}/login`);
  await page.getByLabel('Email').fill(email);
  await page.getByLabel('Password').fill(password);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.waitForURL(`${base}/`);
}

/** Creates the first account (the admin) through the register form at `base`/register, signed in. */
export async function registerAdmin(
  page: Page,
  base: string,
  email: string,
  password: string,
): Promise<void> {
  await page.goto(`${base}/register`);
  await page.getByLabel('Email').fill(email);
  await page.getByLabel('Password').fill(password);
  await page.getByRole('button', { name: 'Create the admin account' }).click();
  await page.waitForURL(`${base}/`);
}

/** How many pixels the page is wider than the window (0 or less: it fits). */
export async function horizontalOverflow(page: Page): Promise<number> {
  return page.evaluate<number>('document.documentElement.scrollWidth - window.innerWidth');
}
