// What the deployment page's browser tests run against: a coordinator (fast heartbeats and
// scheduling), its admin, a git repository with one commit, a real agent labelled `web`, a folder
// of gate files for commands to wait on, and Chromium signed in as the admin through the form
// (its profile keeps the session for every page).
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'vitest';
import { type RunningAgent, startAgent } from './agents.ts';
import { launchBrowser, signIn, type TestBrowser } from './browser.ts';
import { type Client, signUp, startCoordinator, type TestCoordinator } from './coordinator.ts';
import { createTestRepo, type TestRepo } from './git.ts';

export interface DeploymentBrowser {
  coord: TestCoordinator;
  /** The admin's API client. */
  admin: Client;
  /** The admin's email; the password is the one given. */
  email: string;
  /** A repository whose `main` holds app.txt, "version 1". */
  repo: TestRepo;
  /** The agent `web-1`, labels `web`. */
  agent: RunningAgent;
  browser: TestBrowser;
  /** A folder for gate files (projects get it as $GATES). */
  gates: string;
  /** Stops all of it. */
  close(): Promise<void>;
}

/** Starts it all, the admin being admin@example.com with `password`; what started is closed on failure. */
export async function startDeploymentBrowser(password: string): Promise<DeploymentBrowser> {
  const parts: Partial<DeploymentBrowser> = {};
  const close = async () => {
    await parts.browser?.close();
    await parts.agent?.stop();
    await parts.coord?.close();
    await parts.repo?.remove();
    if (parts.gates) await rm(parts.gates, { recursive: true, force: true });
  };
  try {
    const coord = (parts.coord = await startCoordinator({
      AGENT_HEARTBEAT_MS: '500',
      SCHEDULER_INTERVAL_MS: '200',
    }));
    const account = await signUp(coord.url, 'admin@example.com', password);
    const repo = (parts.repo = await createTestRepo());
    await repo.commit({ 'app.txt': 'version 1\n' }, 'first');
    const gates = (parts.gates = await mkdtemp(join(tmpdir(), 'deckhand-gates-')));
    const res = await account.client.post('/agents', { name: 'web-1', labels: ['web'] });
    expect(res.status).toBe(201);
    const agent = (parts.agent = await startAgent(coord.url, res.json.token));
    const browser = (parts.browser = await launchBrowser());
    const page = await browser.newPage();
    await signIn(page, coord.url, account.email, password);
    await page.close();
    return { coord, admin: account.client, email: account.email, repo, agent, browser, gates, close };
  } catch (err) {
    await close();
    throw err;
  }
}
