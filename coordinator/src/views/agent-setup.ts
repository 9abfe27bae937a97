// What the agents page tells an admin: how to start a new agent (the exact command and a systemd
// unit to copy, README "Agents"), and which agents run an older version than the one this
// coordinator serves at GET /agent/download. Both ways start the one-file agent downloaded from
// this coordinator, since the agent's npm package is private: a host needs Node, curl, git, bash.
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { AgentBundle } from '../modules/agent-bundle/agent-bundle.ts';

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
const UNIT_FILE = path.join(ROOT, 'agent', 'systemd', 'deckhand-agent.service');
/** The user the unit runs as; the setup steps create it. */
export const AGENT_USER = 'deckhand';
/**
 * Where the setup steps put the one-file agent the coordinator serves; the unit's ExecStart runs
 * it. In the agent user's home, since the agent replaces its own file when it updates itself
 * (a new file beside it, renamed over it), which a folder owned by root would not allow.
 */
export const AGENT_FILE = '/var/lib/deckhand-agent/deckhand-agent.js';

/** The repository's unit (agent/systemd/), without its comment header. */
function unitText(): string | null {
  if (!existsSync(UNIT_FILE)) return null;
  const text = readFileSync(UNIT_FILE, 'utf8');
  return text.slice(text.indexOf('[Unit]'));
}

const UNIT = unitText();

/** A value for a shell command line, quoted only when it needs to be. */
function shellWord(value: string): string {
  return /^[A-Za-z0-9_@%+=:,./-]+$/.test(value) ? value : `'${value.replaceAll("'", "'\\''")}'`;
}

export interface AgentSetup {
  url: string;
  token: string;
  command: string;
  /** /etc/deckhand/agent.env, read by the unit. */
  envFile: string;
  /** The shell steps that install the unit, or null when this installation has no unit file. */
  install: string | null;
  unit: string | null;
}

export function agentSetup(url: string, token: string): AgentSetup {
  const envFile = `DECKHAND_URL=${url}\nDECKHAND_TOKEN=${token}\n`;
  return {
    url,
    token,
    command:
      `curl -fsSLo deckhand-agent.js ${shellWord(`${url}/agent/download`)}` +
      ` && node deckhand-agent.js --url ${shellWord(url)} --token ${shellWord(token)}`,
    envFile,
    install: UNIT
      ? [
          `sudo useradd --system --create-home --home-dir ${path.posix.dirname(AGENT_FILE)} --shell /usr/sbin/nologin ${AGENT_USER}`,
          `sudo -u ${AGENT_USER} curl -fsSL -o ${AGENT_FILE} ${shellWord(`${url}/agent/download`)}`,
          `sudo install -d -o root -g ${AGENT_USER} -m 0750 /etc/deckhand`,
          `sudo install -o root -g ${AGENT_USER} -m 0640 agent.env /etc/deckhand/agent.env`,
          'sudo cp deckhand-agent.service /etc/systemd/system/',
          'sudo systemctl enable --now deckhand-agent',
        ].join('\n')
      : null,
    unit: UNIT,
  };
}

const BUNDLE = new AgentBundle();
const AGENT_PACKAGE = path.join(ROOT, 'agent', 'package.json');

/**
 * The agent version GET /agent/version reports, read the way that route reads it (the bundle's
 * banner). A page never waits for a build: before the first one (a fresh `npm start`), it is the
 * version the build would stamp, agent/package.json's, so outdated agents are flagged from the
 * start. Null when neither can be read.
 */
export async function servedAgentVersion(
  bundle: AgentBundle = BUNDLE,
  agentPackage: string = AGENT_PACKAGE,
): Promise<string | null> {
  try {
    if (existsSync(bundle.file)) return (await bundle.get()).version;
    const { version } = JSON.parse(readFileSync(agentPackage, 'utf8')) as { version?: unknown };
    return typeof version === 'string' ? version : null;
  } catch {
    return null;
  }
}

/** `version` is an older release than `than` (dotted numbers; a pre-release sorts before its release). */
export function versionOlder(version: string | null, than: string | null): boolean {
  if (!version || !than) return false;
  const parse = (v: string) => {
    const [core = '', pre] = v.replace(/^v/, '').split('-', 2);
    return { nums: core.split('.').map((n) => Number.parseInt(n, 10) || 0), pre: pre ?? null };
  };
  const a = parse(version);
  const b = parse(than);
  for (let i = 0; i < Math.max(a.nums.length, b.nums.length); i++) {
    const x = a.nums[i] ?? 0;
    const y = b.nums[i] ?? 0;
    if (x !== y) return x < y;
  }
  if (a.pre !== null && b.pre === null) return true;
  if (a.pre !== null && b.pre !== null) return a.pre < b.pre;
  return false;
}
