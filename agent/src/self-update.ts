// Self-update: an agent running as the one-file bundle (deckhand-agent.js) replaces itself with
// the newer agent its coordinator serves. The coordinator's welcome names that version and the
// file's SHA-256 (`update`, when the agent is older); the agent downloads GET /agent/download from
// the same coordinator, and installs it only if the file is exactly that (SHA-256) and really is
// newer (the version in its banner) — never an older or the same version. It writes the file
// beside itself and waits until it holds no job (running ones finish and are acknowledged first),
// then renames it over itself (atomic) and restarts: under systemd (INVOCATION_ID set) it exits
// with EXIT_RESTART for the unit's Restart= to start the new file; otherwise it starts the new
// file itself, detached, with the same arguments (and updates an agent.pid holding its own pid,
// as `deckhand agents install` writes for nohup), and exits.
//
// An agent run from source (agent/src) cannot replace itself and only logs the offer;
// DECKHAND_SELF_UPDATE=false turns it off.
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { chmod, open, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Welcome } from '@deckhand/protocol';
import type { Logger } from 'pino';

/** Exit code asking systemd (Restart=always or on-failure) to start the agent again. */
export const EXIT_RESTART = 75;
const DOWNLOAD_TIMEOUT_MS = 120_000;
const IDLE_POLL_MS = 1_000;
const BANNER = /^\/\/ deckhand-agent (\S+):/m;

export type UpdateOffer = NonNullable<Welcome['update']>;

/** -1, 0 or 1 as `a` is older than, the same as or newer than `b`; null when either is not x.y.z. */
export function compareVersions(a: string, b: string): number | null {
  const parse = (v: string) => {
    const m = /^v?(\d+)\.(\d+)\.(\d+)(-.+)?$/.exec(v.trim());
    return m ? { n: [Number(m[1]), Number(m[2]), Number(m[3])], pre: m[4] ?? null } : null;
  };
  const x = parse(a);
  const y = parse(b);
  if (!x || !y) return null;
  for (let i = 0; i < 3; i++) if (x.n[i] !== y.n[i]) return x.n[i]! < y.n[i]! ? -1 : 1;
  if (x.pre === y.pre) return 0;
  if (x.pre === null) return 1;
  if (y.pre === null) return -1;
  return x.pre < y.pre ? -1 : 1;
}

/** The version in a bundle's banner (`// deckhand-agent 1.2.3: …`), or null. */
export function bundleVersion(code: Buffer): string | null {
  return BANNER.exec(code.subarray(0, 512).toString('utf8'))?.[1] ?? null;
}

/** The running bundle file, or null when the agent runs from source. */
function runningBundle(): string | null {
  const file = fileURLToPath(import.meta.url);
  if (!file.endsWith('.js') || !existsSync(file)) return null;
  try {
    return bundleVersion(readFileSync(file).subarray(0, 512)) ? file : null;
  } catch {
    return null;
  }
}

/** The coordinator's HTTP base from the agent's URL (ws(s) → http(s), without /agent/ws). */
export function httpBase(url: URL): URL {
  const base = new URL(url.href);
  if (base.protocol === 'ws:') base.protocol = 'http:';
  else if (base.protocol === 'wss:') base.protocol = 'https:';
  base.pathname = base.pathname.replace(/\/+$/, '').replace(/\/agent\/ws$/, '');
  base.search = '';
  base.hash = '';
  return base;
}

export interface SelfUpdateOptions {
  currentVersion: string;
  coordinatorUrl: URL;
  log: Logger;
  /** No job held (running or waiting for its acknowledgement). */
  idle: () => boolean;
  /** Stops the agent (closes the connection) before it restarts. */
  stop: () => Promise<void>;
  /** The file to replace; default: the running bundle (null: from source, no self-update). */
  file?: string | null;
  env?: NodeJS.ProcessEnv;
  /** How the process ends once the new file is in place (default: restart as described above). */
  restart?: (file: string) => void;
}

export class SelfUpdater {
  readonly #o: SelfUpdateOptions;
  readonly #file: string | null;
  /** The update under way: one at a time, for the life of the process. */
  #busy = false;

  constructor(o: SelfUpdateOptions) {
    this.#o = o;
    this.#file = o.file === undefined ? runningBundle() : o.file;
  }

  /** The coordinator's welcome: acts on its `update` offer, if any, in the background. */
  offered(offer: UpdateOffer | undefined): void {
    if (!offer || this.#busy) return;
    const log = this.#o.log;
    if ((this.#o.env ?? process.env).DECKHAND_SELF_UPDATE === 'false') {
      log.info(
        { offered: offer.version },
        'a newer agent is available; self-update is off (DECKHAND_SELF_UPDATE)',
      );
      return;
    }
    if (!this.#file) {
      log.info(
        { offered: offer.version },
        'a newer agent is available; this one runs from source and cannot update itself',
      );
      return;
    }
    const order = compareVersions(offer.version, this.#o.currentVersion);
    if (order === null || order <= 0) {
      log.warn(
        { offered: offer.version, running: this.#o.currentVersion },
        'refusing the offered agent: it is not newer than this one (an update never installs an older version)',
      );
      return;
    }
    this.#busy = true;
    void this.#update(this.#file, offer).catch((err: Error) => {
      this.#busy = false;
      log.error(
        { err: err.message, offered: offer.version },
        'self-update failed; carrying on with this version',
      );
    });
  }

  async #update(file: string, offer: UpdateOffer): Promise<void> {
    const log = this.#o.log;
    const url = new URL(`${httpBase(this.#o.coordinatorUrl).href.replace(/\/+$/, '')}/agent/download`);
    log.info({ offered: offer.version, running: this.#o.currentVersion }, 'downloading the newer agent');
    const res = await fetch(url, { signal: AbortSignal.timeout(DOWNLOAD_TIMEOUT_MS), redirect: 'error' });
    if (!res.ok) throw new Error(`GET ${url.pathname} answered ${res.status}`);
    const code = Buffer.from(await res.arrayBuffer());
    const sha256 = createHash('sha256').update(code).digest('hex');
    if (sha256 !== offer.sha256) {
      throw new Error(
        `the downloaded file's SHA-256 is ${sha256}, not the ${offer.sha256} the coordinator named`,
      );
    }
    const version = bundleVersion(code);
    if (version !== offer.version) {
      throw new Error(
        `the downloaded file is version ${version ?? '(none)'}, not the ${offer.version} offered`,
      );
    }
    const order = compareVersions(version, this.#o.currentVersion);
    if (order === null || order <= 0) {
      throw new Error(`the downloaded file is version ${version}, not newer than ${this.#o.currentVersion}`);
    }
    // Beside the running file (same filesystem, so the rename is atomic), with its mode.
    const tmp = `${file}.update-${process.pid}`;
    const mode = (await stat(file)).mode & 0o777;
    await writeFile(tmp, code, { mode });
    await chmod(tmp, mode);
    const handle = await open(tmp, 'r');
    await handle.sync().finally(() => handle.close());

    if (!this.#o.idle())
      log.info({ version }, 'the newer agent is ready; waiting for the running jobs to finish');
    while (!this.#o.idle()) await new Promise((r) => setTimeout(r, IDLE_POLL_MS));
    try {
      await rename(tmp, file);
    } catch (err) {
      await rm(tmp, { force: true });
      throw err;
    }
    // A job given to it meanwhile finishes first, too.
    while (!this.#o.idle()) await new Promise((r) => setTimeout(r, IDLE_POLL_MS));
    log.info(
      { from: this.#o.currentVersion, to: version, file },
      'agent updated; restarting with the new version',
    );
    await this.#o.stop();
    (this.#o.restart ?? restartProcess)(file);
  }
}

/** Under systemd: exit for the unit to restart us. Otherwise: start the new file, then exit. */
function restartProcess(file: string): void {
  if (process.env.INVOCATION_ID) process.exit(EXIT_RESTART);
  const child = spawn(process.execPath, [...process.execArgv, file, ...process.argv.slice(2)], {
    detached: true,
    stdio: 'inherit',
    env: process.env,
  });
  child.unref();
  // `deckhand agents install` (nohup) keeps the agent's pid in agent.pid, in its folder.
  const pidFile = path.join(process.cwd(), 'agent.pid');
  void readFile(pidFile, 'utf8')
    .then(async (held) => {
      if (held.trim() === String(process.pid) && child.pid) await writeFile(pidFile, `${child.pid}\n`);
    })
    .catch(() => undefined)
    .finally(() => process.exit(0));
}
