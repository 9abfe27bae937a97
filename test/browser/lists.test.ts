// The lists in a real browser against a real coordinator and database: the Deployments page
// (every project's deployments with their badges, filtered by project and status with the JSON's
// own query parameters, paged with Older, its empty and empty-filtered states) and the audit log's
// pages at GET /audit and GET /projects/:id/audit (what this test did, paged; refused to a
// deployer and a viewer as the JSON is), on a phone and in dark mode. No agent serves these
// projects: their deployments wait, queued, and the finished states are written as the
// scheduler would. Screenshots: test/.screenshots/lists-*.png.
import { randomBytes } from 'node:crypto';
import type { Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  horizontalOverflow,
  launchBrowser,
  PHONE_DARK,
  registerAdmin,
  screenshot,
  signIn,
  type TestBrowser,
} from '../helpers/browser.ts';
import { BROWSER_ACCEPT, Client, startCoordinator, type TestCoordinator } from '../helpers/coordinator.ts';
import { sql } from '../helpers/sql.ts';

const ADMIN = 'admin@example.com';
const PASSWORD = 'correct horse battery staple';

let coord: TestCoordinator;
let admin: Client;
let browser: TestBrowser;
let page: Page;
const projects: Record<string, string> = {};
/** Deployment ids by what the test made of them. */
const made: Record<string, string> = {};
const commits: Record<string, string> = {};

const sha = () => randomBytes(20).toString('hex');

async function createProject(name: string): Promise<string> {
  const res = await admin.post('/projects', {
    name,
    forge_url: `https://git.example.com/acme/${name}.git`,
    branch_name: 'main',
    commands: ['make deploy'],
    target: { agents: { labels: [`${name}-hosts`] } },
  });
  expect(res.status, res.text).toBe(201);
  return res.json.project.id;
}

async function deploy(projectId: string, commit = sha()): Promise<string> {
  const res = await admin.post('/deploy', { projectId, commit });
  expect(res.status, res.text).toBe(200);
  commits[res.json.deployId] = commit;
  return res.json.deployId;
}

/** Ends a waiting deployment as the scheduler would have (no agent serves these projects). */
async function finish(id: string, status: 'success' | 'failed' | 'timed_out') {
  await sql(
    coord,
    `update deployments set status = ?, finished_at = started_at + interval '83 seconds' where id = ?`,
    [status, id],
  );
}

/** The rows of the page's table: [started link href, project, badge, commit]. */
async function rows(p: Page) {
  return p.locator('table.deployment-table tbody tr').evaluateAll((trs) =>
    trs.map((tr) => {
      const cells = [...tr.querySelectorAll('td')];
      return {
        href: cells[0]!.querySelector('a')!.getAttribute('href')!,
        project: cells[1]!.textContent!.trim(),
        badge: cells[2]!.querySelector('.badge')!.textContent!.trim(),
        commit: cells[3]!.textContent!.trim(),
      };
    }),
  );
}

async function selectFilters(p: Page, project: string, status: string) {
  await p.getByLabel('Project').selectOption({ label: project });
  await p.getByLabel('Status').selectOption({ label: status });
  await p.getByRole('button', { name: 'Filter' }).click();
  await p.waitForLoadState('load');
}

beforeAll(async () => {
  coord = await startCoordinator({ SCHEDULER_INTERVAL_MS: '200' });
  browser = await launchBrowser();
  page = await browser.newPage();
  await registerAdmin(page, coord.url, ADMIN, PASSWORD);
  admin = new Client(coord.url);
  expect((await admin.post('/login', { email: ADMIN, password: PASSWORD })).status).toBe(200);
}, 60_000);

afterAll(async () => {
  await browser?.close();
  await coord?.close();
}, 60_000);

describe('the Deployments page', () => {
  it('with nothing deployed: says so and points to creating a project', async () => {
    await page.goto(coord.url);
    await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Deployments' }).click();
    await page.waitForURL(`${coord.url}/deployments`);
    expect(await page.locator('h1').textContent()).toBe('Deployments');
    expect(await page.locator('.empty').getByText('No deployments yet.').count()).toBe(1);
    expect(
      await page.locator('.empty').getByRole('link', { name: 'creating a project' }).getAttribute('href'),
    ).toBe('/projects/new');
    await screenshot(page, 'lists-deployments-empty');
  });

  it('lists every project’s deployments: project, status badge, short commit, time, duration', async () => {
    projects.alpha = await createProject('alpha');
    projects.beta = await createProject('beta');
    made.alphaSuccess = await deploy(projects.alpha);
    made.betaTimedOut = await deploy(projects.beta);
    made.alphaFailed = await deploy(projects.alpha);
    made.betaCancelled = await deploy(projects.beta);
    made.alphaQueued = await deploy(projects.alpha);
    await finish(made.alphaSuccess, 'success');
    await finish(made.alphaFailed, 'failed');
    await finish(made.betaTimedOut, 'timed_out');
    expect((await admin.post(`/deploy/${made.betaCancelled}/cancel`)).status).toBe(200);

    await page.goto(`${coord.url}/deployments`);
    expect(await rows(page)).toEqual(
      [
        [made.alphaQueued, 'alpha', 'queued'],
        [made.betaCancelled, 'beta', 'cancelled'],
        [made.alphaFailed, 'alpha', 'failed'],
        [made.betaTimedOut, 'beta', 'timed out'],
        [made.alphaSuccess, 'alpha', 'success'],
      ].map(([id, project, badge]) => ({
        href: `/deploy/${id}`,
        project,
        badge,
        commit: commits[id!]!.slice(0, 10),
      })),
    );
    // Status is not colour alone: each badge carries a symbol before its word.
    // (A string, run in the page: these tests are not compiled with the DOM's types.)
    const symbols = (await page.evaluate(
      `[...document.querySelectorAll('table.deployment-table .badge')].map((b) => getComputedStyle(b, '::before').content)`,
    )) as string[];
    expect(symbols).toHaveLength(5);
    expect(symbols.filter((s) => !/^".+"$/.test(s))).toEqual([]);
    const first = page.locator('table.deployment-table tbody tr').first();
    expect(await first.getByRole('link', { name: 'alpha' }).getAttribute('href')).toBe(
      `/projects/${projects.alpha}`,
    );
    // The exact time is kept beside the relative one, and the whole commit in the title.
    const started = (await admin.get(`/deploy/${made.alphaQueued}`)).json.deployment.started_at;
    expect(await first.locator('time').getAttribute('datetime')).toBe(started);
    expect(await first.locator('time').getAttribute('title')).toMatch(/^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$/);
    expect(await first.locator('time').textContent()).toBe('just now');
    expect(await first.locator('code').getAttribute('title')).toBe(commits[made.alphaQueued]);
    const failedRow = page.locator('table.deployment-table tbody tr', {
      has: page.locator(`a[href="/deploy/${made.alphaFailed}"]`),
    });
    expect(await failedRow.locator('td').last().textContent()).toBe('1 min 23 s');
    expect(browser.errors).toEqual([]);
    await screenshot(page, 'lists-deployments');
  });

  it('filters by project and by status with the JSON’s query parameters', async () => {
    await page.goto(`${coord.url}/deployments`);
    await selectFilters(page, 'alpha', 'Any status');
    const url = new URL(page.url());
    expect(url.pathname).toBe('/deployments');
    expect(url.searchParams.get('project_id')).toBe(projects.alpha);
    expect((await rows(page)).map((r) => r.href)).toEqual(
      [made.alphaQueued, made.alphaFailed, made.alphaSuccess].map((id) => `/deploy/${id}`),
    );
    // The form shows what is filtered, and the same URL answers JSON with the same list (less the
    // empty "Any status", which only a browser's form sends and the JSON API refuses).
    expect(await page.getByLabel('Project').inputValue()).toBe(projects.alpha);
    expect(url.searchParams.get('status')).toBe('');
    const chosen = new URLSearchParams([...url.searchParams].filter(([, value]) => value !== ''));
    const json = await admin.get(`${url.pathname}?${chosen}`);
    expect(json.json.deployments.map((d: { id: string }) => d.id)).toEqual([
      made.alphaQueued,
      made.alphaFailed,
      made.alphaSuccess,
    ]);

    await selectFilters(page, 'All projects', 'failed');
    expect(new URL(page.url()).searchParams.get('status')).toBe('failed');
    expect((await rows(page)).map((r) => r.href)).toEqual([`/deploy/${made.alphaFailed}`]);
    await screenshot(page, 'lists-deployments-filtered');

    await selectFilters(page, 'beta', 'timed out');
    expect((await rows(page)).map((r) => r.href)).toEqual([`/deploy/${made.betaTimedOut}`]);

    // Nothing matches: said so, with the way back.
    await selectFilters(page, 'beta', 'success');
    expect(await page.locator('table').count()).toBe(0);
    expect(await page.locator('.empty').textContent()).toContain(
      'No deployments match these filters (beta, success).',
    );
    await screenshot(page, 'lists-deployments-filtered-empty');
    await page.locator('.empty').getByRole('link', { name: 'Show all deployments' }).click();
    await page.waitForURL(`${coord.url}/deployments`);
    expect(await rows(page)).toHaveLength(5);
  });

  it('pages with Older (50 a page) and back to the newest, filters kept', async () => {
    projects.gamma = await createProject('gamma');
    const gamma: string[] = [];
    for (let i = 0; i < 50; i++) gamma.push(await deploy(projects.gamma));

    await page.goto(`${coord.url}/deployments`);
    const firstPage = await rows(page);
    expect(firstPage).toHaveLength(50);
    expect(firstPage.map((r) => r.href)).toEqual(gamma.toReversed().map((id) => `/deploy/${id}`));
    expect(await page.getByRole('link', { name: '← Newest' }).count()).toBe(0);
    await page.getByRole('link', { name: 'Older →' }).click();
    await page.waitForLoadState('load');
    expect(new URL(page.url()).searchParams.get('before')).toBe(gamma[0]);
    expect((await rows(page)).map((r) => r.href)).toEqual(
      [made.alphaQueued, made.betaCancelled, made.alphaFailed, made.betaTimedOut, made.alphaSuccess].map(
        (id) => `/deploy/${id}`,
      ),
    );
    expect(await page.getByRole('link', { name: 'Older →' }).count()).toBe(0);
    await screenshot(page, 'lists-deployments-older');
    await page.getByRole('link', { name: '← Newest' }).click();
    await page.waitForURL(`${coord.url}/deployments`);
    expect(await rows(page)).toHaveLength(50);

    // A page size given in the URL is kept, as are the filters, from page to page.
    await page.goto(`${coord.url}/deployments?project_id=${projects.alpha}&limit=2`);
    expect((await rows(page)).map((r) => r.href)).toEqual(
      [made.alphaQueued, made.alphaFailed].map((id) => `/deploy/${id}`),
    );
    await page.getByRole('link', { name: 'Older →' }).click();
    await page.waitForLoadState('load');
    const older = new URL(page.url()).searchParams;
    expect(Object.fromEntries(older)).toEqual({
      project_id: projects.alpha,
      limit: '2',
      before: made.alphaFailed,
    });
    expect((await rows(page)).map((r) => r.href)).toEqual([`/deploy/${made.alphaSuccess}`]);

    // Past the oldest: the empty page says so and links back.
    await page.goto(`${coord.url}/deployments?before=${made.alphaSuccess}`);
    expect(await page.locator('.empty').textContent()).toContain('No older deployments.');
    expect(await page.getByRole('link', { name: '← Newest' }).getAttribute('href')).toBe('/deployments');
  }, 60_000);
});

describe('the audit log pages', () => {
  let viewer: Client;
  const VIEWER = 'viewer@example.com';
  const DEPLOYER = 'deployer@example.com';

  it('shows what was done: when, who and from where, the action, its target', async () => {
    await page.goto(coord.url);
    await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Audit log' }).click();
    await page.waitForURL(`${coord.url}/audit`);
    expect(await page.locator('h1').textContent()).toBe('Audit log');
    const table = page.locator('table.audit-table');
    // Newest first: the last of gamma's deployments, triggered by the admin from this machine.
    const newest = table.locator('tbody tr').first();
    expect(await newest.locator('td').nth(1).textContent()).toBe(`${ADMIN} userfrom 127.0.0.1`);
    expect(await newest.locator('td').nth(2).textContent()).toContain('Deployment triggered');
    expect(await newest.getByRole('link', { name: /^deployment / }).getAttribute('href')).toMatch(
      /^\/deploy\//,
    );
    expect(await newest.getByRole('link', { name: 'gamma' }).getAttribute('href')).toBe(
      `/projects/${projects.gamma}`,
    );
    expect(await newest.locator('time').getAttribute('datetime')).toMatch(/Z$/);

    const row = (action: string, target: string) =>
      table
        .locator('tbody tr', { hasText: action })
        .filter({ has: page.getByRole('link', { name: target, exact: true }) });
    expect(await row('Project created', 'alpha').count()).toBe(1);
    expect(await row('Deployment cancelled', `deployment ${made.betaCancelled!.slice(0, 8)}`).count()).toBe(
      1,
    );

    // Paged by time, as the JSON's `before` does: the second page follows on without overlap.
    await page.goto(`${coord.url}/audit?limit=5`);
    await screenshot(page, 'lists-audit');
    const ids = async () =>
      table
        .locator('tbody tr td:first-child time')
        .evaluateAll((ts) => ts.map((t) => t.getAttribute('datetime')));
    const firstPage = await ids();
    expect(firstPage).toHaveLength(5);
    await page.getByRole('link', { name: 'Older →' }).click();
    await page.waitForLoadState('load');
    expect(new URL(page.url()).searchParams.get('limit')).toBe('5');
    const secondPage = await ids();
    expect(secondPage).toHaveLength(5);
    expect(Date.parse(secondPage[0]!)).toBeLessThanOrEqual(Date.parse(firstPage.at(-1)!));
    const json = await admin.get(`/audit?limit=10`);
    expect(json.json.audit_events.map((e: { created_at: string }) => e.created_at)).toEqual([
      ...firstPage,
      ...secondPage,
    ]);

    // Before anything was recorded: nothing older.
    await page.goto(`${coord.url}/audit?before=2000-01-01T00:00:00.000Z`);
    expect(await page.locator('.empty').textContent()).toContain('No older entries.');
    expect(browser.errors).toEqual([]);
  });

  it('a project’s audit log, linked from its page, holds only that project', async () => {
    await page.goto(`${coord.url}/projects/${projects.beta}`);
    await page.getByRole('link', { name: 'Who deployed and changed what, when' }).click();
    await page.waitForURL(`${coord.url}/projects/${projects.beta}/audit`);
    expect(await page.locator('h1').textContent()).toBe('Audit log · beta');
    const actions = await page
      .locator('table.audit-table tbody tr td:nth-child(3) > span[title]')
      .evaluateAll((spans) => spans.map((s) => s.textContent));
    expect(actions).toEqual([
      'Deployment cancelled',
      'Deployment triggered',
      'Deployment triggered',
      'Project created',
    ]);
    expect(await page.locator('table.audit-table').textContent()).not.toContain('alpha');
    await screenshot(page, 'lists-project-audit');
  });

  it('is refused to a deployer and a viewer, as GET /audit is; a project’s stays readable', async () => {
    for (const [email, role] of [
      [DEPLOYER, 'deployer'],
      [VIEWER, 'viewer'],
    ] as const) {
      const invited = await admin.post('/users/invitations', { email, role });
      expect(invited.status, invited.text).toBe(201);
      const invitation = new URL(invited.json.url).searchParams.get('invitation');
      const client = new Client(coord.url);
      expect((await client.post('/register', { email, password: PASSWORD, invitation })).status).toBe(201);
      expect((await client.get('/audit')).status).toBe(403);
      const html = await client.get('/audit', { headers: { accept: BROWSER_ACCEPT } });
      expect(html.status).toBe(403);
      expect(html.text).toContain('Not allowed');
      if (role === 'viewer') viewer = client;
    }
    expect((await viewer.get(`/projects/${projects.beta}/audit`)).json.audit_events).toHaveLength(4);

    const other = await launchBrowser();
    try {
      const p = await other.newPage();
      await signIn(p, coord.url, VIEWER, PASSWORD);
      expect(
        await p.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Audit log' }).count(),
      ).toBe(0);
      const res = await p.goto(`${coord.url}/audit`);
      expect(res?.status()).toBe(403);
      expect(await p.locator('h1').textContent()).toBe('Not allowed');
      expect(await p.locator('table').count()).toBe(0);
      await screenshot(p, 'lists-audit-refused');
      await p.goto(`${coord.url}/projects/${projects.beta}/audit`);
      expect(await p.locator('table.audit-table tbody tr').count()).toBe(4);
      // A viewer's Deployments page: the same list, and no "create a project" for an empty one.
      await p.goto(`${coord.url}/deployments?status=running`);
      expect(await p.locator('.empty').textContent()).toContain(
        'No deployments match these filters (running).',
      );
    } finally {
      await other.close();
    }
  }, 60_000);
});

describe('on a phone and in dark mode', () => {
  it('fits a phone in dark mode: nothing wider than the screen, tables included', async () => {
    // Long content: a project name with no space to break at, on a long branch.
    const long = await createProject('payments-service-eu-west-production-blue-green');
    await admin.request('PATCH', `/projects/${long}`, {
      json: { branch_name: 'release/2026-q4-hotfix-for-the-checkout' },
    });
    await deploy(long);
    const phone = await launchBrowser(PHONE_DARK);
    try {
      const p = await phone.newPage();
      await signIn(p, coord.url, ADMIN, PASSWORD);
      for (const [path, name] of [
        ['/deployments', 'lists-deployments-phone-dark'],
        [
          `/deployments?project_id=${projects.beta}&status=success`,
          'lists-deployments-filtered-empty-phone-dark',
        ],
        ['/audit', 'lists-audit-phone-dark'],
        [`/projects/${projects.beta}/audit`, 'lists-project-audit-phone-dark'],
      ] as const) {
        await p.goto(coord.url + path);
        await screenshot(p, name);
        expect(await horizontalOverflow(p), path).toBeLessThanOrEqual(0);
        // Not even inside a scrolling table: the columns a phone cannot fit are left out.
        const tableOverflow = await p.evaluate(
          'Math.max(0, ...[...document.querySelectorAll(".table-wrap")].map((w) => w.scrollWidth - w.clientWidth))',
        );
        expect(tableOverflow, path).toBeLessThanOrEqual(0);
      }
      // The dashboard and the projects list with the same content (their tables may scroll).
      for (const [path, name] of [
        ['/', 'lists-dashboard-phone-dark'],
        ['/projects', 'lists-projects-phone-dark'],
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

  it('dark mode on a desktop', async () => {
    const dark = await launchBrowser({ colorScheme: 'dark' });
    try {
      const p = await dark.newPage();
      await signIn(p, coord.url, ADMIN, PASSWORD);
      await p.goto(`${coord.url}/deployments?project_id=${projects.alpha}`);
      await screenshot(p, 'lists-deployments-dark');
      // The badges keep their dark-mode colours (not the light ones).
      const bg = await p.evaluate(
        `getComputedStyle(document.querySelector('.badge-failed')).backgroundColor`,
      );
      expect(bg).toBe('rgb(59, 26, 24)');
      await p.goto(`${coord.url}/audit`);
      await screenshot(p, 'lists-audit-dark');
      expect(dark.errors).toEqual([]);
    } finally {
      await dark.close();
    }
  }, 60_000);
});
