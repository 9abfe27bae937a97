// The agent as one file (dist/deckhand-agent.js, built by scripts/build-agent.ts), as this
// coordinator serves it to installers and agents. Built on demand when missing — once, however
// many ask at the same time — by running the build script in a child process (the coordinator
// does not import build tooling); an image built without it must ship the bundle.
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const exec = promisify(execFile);
const ROOT = fileURLToPath(new URL('../../../../', import.meta.url));
const BUILD_TIMEOUT_MS = 120_000;

export interface AgentBundleFile {
  version: string;
  sha256: string;
  code: Buffer;
}

/** The agent's version, as its bundle's banner states it (`// deckhand-agent 1.2.3: …`). */
export function bundleVersion(code: Buffer): string | null {
  const head = code.subarray(0, 512).toString('utf8');
  return /^\/\/ deckhand-agent (\S+):/m.exec(head)?.[1] ?? null;
}

export class AgentBundleUnavailable extends Error {}

export class AgentBundle {
  readonly file: string;
  #building: Promise<void> | null = null;
  #cached: { mtimeKey: string; value: AgentBundleFile } | null = null;

  constructor(file = path.join(ROOT, 'dist', 'deckhand-agent.js')) {
    this.file = file;
  }

  /** The bundle, built first if it is missing. Rejects with AgentBundleUnavailable when it cannot be. */
  async get(): Promise<AgentBundleFile> {
    if (!existsSync(this.file)) await this.#build();
    let code: Buffer;
    try {
      code = await readFile(this.file);
    } catch (err) {
      throw new AgentBundleUnavailable(`The agent bundle cannot be read: ${(err as Error).message}`);
    }
    const key = `${code.length}:${code.subarray(0, 256).toString('base64')}`;
    if (this.#cached?.mtimeKey === key) return this.#cached.value;
    const version = bundleVersion(code);
    if (!version) throw new AgentBundleUnavailable(`${this.file} is not a Deckhand agent bundle`);
    const value = { version, sha256: createHash('sha256').update(code).digest('hex'), code };
    this.#cached = { mtimeKey: key, value };
    return value;
  }

  #build(): Promise<void> {
    this.#building ??= (async () => {
      const script = path.join(ROOT, 'scripts', 'build-agent.ts');
      if (!existsSync(script)) {
        throw new AgentBundleUnavailable(
          `The agent bundle ${this.file} is missing and this installation cannot build it: run \`npm run build:agent\` in a full checkout`,
        );
      }
      try {
        await exec(process.execPath, [script, this.file], { cwd: ROOT, timeout: BUILD_TIMEOUT_MS });
      } catch (err) {
        const stderr = String((err as { stderr?: unknown }).stderr ?? '').trim();
        throw new AgentBundleUnavailable(
          `The agent bundle could not be built (npm run build:agent): ${stderr.split('\n').slice(-3).join(' ') || (err as Error).message}`,
        );
      }
    })().finally(() => (this.#building = null));
    return this.#building;
  }
}
