// Reading the repository's packaging files as the tools would (Dockerfiles' stages and CMD,
// docker-compose.yml's services), finding a tool on the PATH, and waiting for an agent to be online:
// shared by the packaging tests (test/e2e/packaging.test.ts, test/e2e/compose-agent.test.ts).
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { expect } from 'vitest';
import type { Client } from './coordinator.ts';
import { repoRoot, type Spawned } from './processes.ts';

export function which(tool: string): string | null {
  for (const dir of (process.env.PATH ?? '').split(':').concat(['/usr/bin', '/usr/local/bin'])) {
    if (dir && existsSync(join(dir, tool))) return join(dir, tool);
  }
  return null;
}

/** The stages of a Dockerfile: each FROM with the instructions after it (continuations joined). */
export function stages(dockerfile: string): Array<{ from: string; lines: string[] }> {
  const text = readFileSync(join(repoRoot, dockerfile), 'utf8').replace(/\\\n\s*/g, ' ');
  const result: Array<{ from: string; lines: string[] }> = [];
  for (const raw of text.split('\n')) {
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) continue;
    if (/^FROM\s/i.test(line)) result.push({ from: line, lines: [] });
    else result.at(-1)?.lines.push(line);
  }
  return result;
}

/** The final stage's CMD, exec form. */
export function cmdOf(dockerfile: string): string[] {
  const cmd = stages(dockerfile)
    .at(-1)!
    .lines.filter((l) => /^CMD\s/i.test(l))
    .at(-1)!;
  return JSON.parse(cmd.replace(/^CMD\s+/i, '')) as string[];
}

/** A service's block of docker-compose.yml, as written (two-space indents, as the file keeps them). */
export function composeService(name: string): string[] {
  const lines = readFileSync(join(repoRoot, 'docker-compose.yml'), 'utf8').split('\n');
  const start = lines.indexOf(`  ${name}:`);
  expect(start, `service ${name} in docker-compose.yml`).toBeGreaterThan(0);
  const end = lines.findIndex((l, i) => i > start && /^ {0,2}\S/.test(l));
  return lines.slice(start + 1, end);
}

/** A block-sequence key of a service (`command:`, `volumes:`), its items unquoted. */
export function composeList(service: string[], key: string): string[] {
  const start = service.indexOf(`    ${key}:`);
  expect(start, `${key} in the service`).toBeGreaterThanOrEqual(0);
  const items: string[] = [];
  for (const line of service.slice(start + 1)) {
    const m = /^ {6}- (.*)$/.exec(line);
    if (!m) break;
    items.push(m[1]!.replace(/^'(.*)'$/, '$1'));
  }
  return items;
}

/** Polls GET /agents until the agent of that name is online (or its process ends, or 30 s pass). */
export async function waitOnline(
  name: string,
  proc: Spawned,
  client: Client,
): Promise<{ id: string; online: boolean; version: string | null }> {
  const deadline = Date.now() + 30_000;
  for (;;) {
    const res = await client.get('/agents');
    const agent = (
      res.json.agents as Array<{ id: string; name: string; online: boolean; version: string | null }>
    ).find((a) => a.name === name);
    if (agent?.online) return agent;
    if (Date.now() > deadline || proc.child.exitCode !== null) {
      throw new Error(`agent ${name} did not come online:\n${proc.output()}`);
    }
    await new Promise((r) => setTimeout(r, 200));
  }
}
