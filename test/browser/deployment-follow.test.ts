// Following a deployment's output in a real browser, against a real coordinator and agent: each
// command's output box is capped in height and scrolls by itself, so "Follow the output" has to
// keep the newest line in view in the box as well as on the page; the reader scrolling up (in the
// box or on the page) stops it, and ticking it again jumps to the newest line. And when the live
// stream drops, the page says so, and the browser's reconnect resumes without gaps or repeats.
// Screenshots: test/.screenshots/deployment-follow-*.png.
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { screenshot, type TestBrowser } from '../helpers/browser.ts';
import type { Client, TestCoordinator } from '../helpers/coordinator.ts';
import { type DeploymentBrowser, startDeploymentBrowser } from '../helpers/deployment-browser.ts';
import type { TestRepo } from '../helpers/git.ts';

const PASSWORD = 'correct horse battery staple';

let stack: DeploymentBrowser | undefined;
let coord: TestCoordinator;
let admin: Client;
let repo: TestRepo;
let browser: TestBrowser;
let gates: string;

async function deployCommands(name: string, commands: string[]): Promise<string> {
  const created = await admin.post('/projects', {
    name,
    forge_url: repo.url,
    branch_name: 'main',
    commands,
    target: { agents: { labels: ['web'] } },
    env: { GATES: gates },
  });
  expect(created.status, created.text).toBe(201);
  const res = await admin.post('/deploy', { projectId: created.json.project.id });
  expect(res.status, res.text).toBe(200);
  return res.json.deployId as string;
}

// In-page code as strings: what the page runs is then exactly what is written here (no
// transpiler helpers inside functions handed to the browser).
const BOX = `[...document.querySelectorAll('pre.log')].find((p) => p.textContent.includes('tick'))`;

/**
 * Where the newest line of the ticking command is: its text, and whether it is inside both its
 * box's visible part and the window.
 */
async function newestLine(page: Page): Promise<{ text: string; visible: boolean }> {
  return page.evaluate(`(() => {
    const box = ${BOX};
    const walker = document.createTreeWalker(box, NodeFilter.SHOW_TEXT);
    let last = null;
    for (let n = walker.nextNode(); n; n = walker.nextNode()) if (n.data.trim()) last = n;
    const end = last.data.trimEnd().length;
    const range = document.createRange();
    range.setStart(last, end - 1);
    range.setEnd(last, end);
    const line = range.getBoundingClientRect();
    const area = box.getBoundingClientRect();
    const visible =
      line.top >= area.top - 1 && line.bottom <= area.bottom + 1 &&
      line.top >= 0 && line.bottom <= window.innerHeight;
    return { text: last.data.trimEnd().split('\\n').pop(), visible };
  })()`);
}

/** The scroll positions of the ticking command's box and of the page. */
async function positions(page: Page): Promise<{ box: number; page: number }> {
  return page.evaluate(`({ box: ${BOX}.scrollTop, page: window.scrollY })`);
}

const ticks = async (page: Page): Promise<number> =>
  page.evaluate(`(${BOX}.textContent.match(/tick \\d+/g) ?? []).length`);

/** Waits until `n` more ticks have arrived on the page. */
async function moreTicks(page: Page, n: number): Promise<void> {
  const now = await ticks(page);
  await expect.poll(() => ticks(page), { timeout: 20_000 }).toBeGreaterThanOrEqual(now + n);
}

const following = (page: Page) => page.locator('#follow').isChecked();

beforeAll(async () => {
  stack = await startDeploymentBrowser(PASSWORD);
  ({ coord, admin, repo, browser, gates } = stack);
}, 60_000);

afterAll(async () => {
  await stack?.close();
}, 60_000);

describe('following the output', () => {
  it('keeps the newest line in view inside a full box; scrolling up stops it; ticking Follow resumes', async () => {
    // 300 lines overflow the box (70% of the window) at once; then a line every 50 ms.
    const id = await deployCommands('follow', [
      'seq -f "line %g" 1 300; i=0; while [ ! -f "$GATES/follow" ]; do i=$((i+1)); echo "tick $i"; sleep 0.05; done; echo last-line',
    ]);
    const page = await browser.newPage();
    await page.goto(`${coord.url}/deploy/${id}`);
    await page.locator('pre.log', { hasText: 'tick 1' }).waitFor();
    await moreTicks(page, 5);
    const overflow = await page.evaluate(`${BOX}.scrollHeight - ${BOX}.clientHeight`);
    expect(overflow).toBeGreaterThan(1000);

    // Following: the newest line is in view, and stays so as lines keep coming.
    for (let i = 0; i < 3; i++) {
      await moreTicks(page, 3);
      const line = await newestLine(page);
      expect(line.text).toMatch(/^tick \d+$/);
      expect(line.visible, `"${line.text}" is out of sight`).toBe(true);
    }
    expect(await following(page)).toBe(true);
    await screenshot(page, 'deployment-follow-following');

    // The reader scrolls up inside the box (a real wheel, over the visible part of the box).
    const point: { x: number; y: number } = await page.evaluate(`(() => {
      const r = ${BOX}.getBoundingClientRect();
      return { x: r.left + r.width / 2, y: Math.min(r.bottom, window.innerHeight) - 60 };
    })()`);
    await page.mouse.move(point.x, point.y);
    await page.mouse.wheel(0, -500);
    await expect.poll(() => following(page)).toBe(false);
    // Let the wheel's scroll settle, then lines keep arriving but the view stays put.
    await page.waitForTimeout(300);
    const put = await positions(page);
    expect(put.box).toBeGreaterThan(0);
    await moreTicks(page, 10);
    expect(await positions(page)).toEqual(put);
    expect((await newestLine(page)).visible).toBe(false);
    await screenshot(page, 'deployment-follow-scrolled-up');

    // Ticking Follow again jumps to the newest line, and keeps it there.
    await page.locator('#follow').check();
    expect((await newestLine(page)).visible).toBe(true);
    await moreTicks(page, 3);
    expect((await newestLine(page)).visible).toBe(true);

    // Scrolling the page up (outside any box) stops following too.
    await page.mouse.move(5, 200);
    await page.mouse.wheel(0, -300);
    await expect.poll(() => following(page)).toBe(false);
    await page.waitForTimeout(300);
    const pageUp = await positions(page);
    await moreTicks(page, 5);
    expect((await positions(page)).page).toBe(pageUp.page);

    // Scrolling everything back to the end resumes it, as in a terminal: the page, then the box.
    await page.mouse.wheel(0, 5000);
    await page.mouse.move(point.x, point.y);
    await page.mouse.wheel(0, 100_000);
    await expect.poll(() => following(page)).toBe(true);
    await moreTicks(page, 3);
    expect((await newestLine(page)).visible).toBe(true);

    await writeFile(join(gates, 'follow'), '');
    await page.locator('pre.log', { hasText: 'last-line' }).waitFor();
    await expect.poll(() => page.locator('#status').textContent(), { timeout: 20_000 }).toBe('success');
    expect(await page.locator('#follow').isDisabled()).toBe(true);
    expect(browser.errors).toEqual([]);
    await page.close();
  }, 90_000);
});

describe('the live stream', () => {
  it('says when the connection is lost, and resumes where it stopped once back', async () => {
    const id = await deployCommands('reconnect', [
      'echo before-drop; while [ ! -f "$GATES/drop" ]; do sleep 0.05; done; echo after-drop; while [ ! -f "$GATES/end" ]; do sleep 0.05; done',
    ]);
    const page = await browser.newPage();
    await page.goto(`${coord.url}/deploy/${id}`);
    await page.locator('pre.log', { hasText: 'before-drop' }).waitFor();
    const connection = page.locator('#connection');
    expect(await connection.textContent()).toBe('');
    expect(await connection.getAttribute('role')).toBe('status');

    // The coordinator drops every HTTP connection (as a proxy restart would); it keeps listening.
    coord.app.server.closeAllConnections();
    await expect.poll(() => connection.textContent()).toBe('Connection lost — reconnecting…');
    await screenshot(page, 'deployment-follow-reconnecting');
    // Output printed while the page is cut off arrives after the reconnect, once.
    await writeFile(join(gates, 'drop'), '');
    await expect.poll(() => connection.textContent(), { timeout: 20_000 }).toBe('');
    const box = page.locator('pre.log', { hasText: 'before-drop' });
    await expect.poll(() => box.textContent(), { timeout: 20_000 }).toContain('after-drop');
    expect(await box.textContent()).toBe('before-drop\nafter-drop\n');
    expect(await page.locator('#status').textContent()).toBe('running');

    await writeFile(join(gates, 'end'), '');
    await expect.poll(() => page.locator('#status').textContent(), { timeout: 20_000 }).toBe('success');
    expect(await connection.textContent()).toBe('');
    expect(browser.errors.filter((e) => !e.includes('ERR_'))).toEqual([]);
    await page.close();
  }, 60_000);

  it('says when it gave up (the session ended while cut off): reload to see the rest', async () => {
    const id = await deployCommands('gone', [
      'echo still here; while [ ! -f "$GATES/gone" ]; do sleep 0.05; done',
    ]);
    const page = await browser.newPage();
    await page.goto(`${coord.url}/deploy/${id}`);
    await page.locator('pre.log', { hasText: 'still here' }).waitFor();
    // Signed out in another tab (last in this file: the profile's session goes with it).
    const other = await browser.newPage();
    await other.goto(`${coord.url}/`);
    await other.getByRole('button', { name: 'Sign out' }).click();
    await other.close();
    coord.app.server.closeAllConnections();
    await expect
      .poll(() => page.locator('#connection').textContent(), { timeout: 20_000 })
      .toBe('Live output stopped. Reload the page to see the rest.');
    await screenshot(page, 'deployment-follow-stopped');
    await writeFile(join(gates, 'gone'), '');
    await page.close();
  }, 60_000);
});
