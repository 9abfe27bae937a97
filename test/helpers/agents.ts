// Real `deckhand-agent` processes for end-to-end tests, each with its own work folder, and the
// agents a coordinator has registered.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'vitest';
import type { Client } from './coordinator.ts';
import { type Spawned, spawnNode } from './processes.ts';

export interface RunningAgent extends Spawned {
  workDir: string;
  stop(): Promise<void>;
}

export async function startAgent(
  url: string,
  token: string,
  extraArgs: string[] = [],
): Promise<RunningAgent> {
  const workDir = await mkdtemp(join(tmpdir(), 'deckhand-agent-'));
  const env: Record<string, string | undefined> = { ...process.env };
  for (const key of Object.keys(env)) if (key.startsWith('DECKHAND_')) delete env[key];
  const proc = spawnNode(
    'agent/bin/deckhand-agent.js',
    ['--url', url, '--token', token, '--work-dir', workDir, ...extraArgs],
    {
      ...env,
      LOG_LEVEL: 'debug',
    },
  );
  return {
    ...proc,
    workDir,
    async stop() {
      if (proc.child.exitCode === null && proc.child.signalCode === null) {
        proc.child.kill('SIGTERM');
        const timer = setTimeout(() => proc.child.kill('SIGKILL'), 5_000);
        await proc.exited;
        clearTimeout(timer);
      }
      await rm(workDir, { recursive: true, force: true });
    },
  };
}

/** GET /agents as `client`, expecting 200: the agents registered. */
export async function registeredAgents(
  client: Client,
): Promise<Array<{ id: string; name: string; online: boolean; version: string | null; labels: string[] }>> {
  const res = await client.get('/agents');
  expect(res.status).toBe(200);
  return res.json.agents;
}
