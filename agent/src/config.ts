// The agent's configuration: command-line flags first, then DECKHAND_* environment variables.
// Refuses plain ws:// or http:// to anything but loopback unless --insecure, so a token never
// crosses a network in the clear by accident. The token comes as it is (--token, DECKHAND_TOKEN) or
// in a file (--token-file, DECKHAND_TOKEN_FILE: what `npm run agent:create` writes, and how
// docker-compose.yml hands it over), exactly one of the two.
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { MAX_CHUNK_BYTES } from '@deckhand/protocol';

export interface AgentConfig {
  url: URL;
  token: string;
  workDir: string;
  labels: string[];
  insecure: boolean;
  /** How long a cancelled step gets between SIGTERM and SIGKILL. */
  killGraceMs: number;
  /** Unacknowledged output held in memory (all jobs together); past it, it is spooled to disk. */
  spoolMemoryBytes: number;
  /** Unacknowledged output in all (memory and spool); past it, steps' output pipes are paused. */
  maxUnackedBytes: number;
}

export const DEFAULT_SPOOL_MEMORY_BYTES = 8 * 1024 * 1024;
export const DEFAULT_MAX_UNACKED_BYTES = 64 * 1024 * 1024;

function wholeNumber(flag: string, variable: string, raw: string, unit: string, min = 0): number {
  const value = Number(raw);
  if (!/^\d+$/.test(raw) || !Number.isSafeInteger(value) || value < min) {
    throw new AgentConfigError(
      `--${flag} (or ${variable}) must be a whole number of ${unit}${min > 0 ? ` of at least ${min}` : ''}, not ${raw}`,
    );
  }
  return value;
}

export class AgentConfigError extends Error {}

/** Empty counts as unset, as a compose file's `${VAR:-}` passes it. */
function agentToken(token: string | undefined, file: string | undefined): string {
  if (token && file) {
    throw new AgentConfigError(
      'Give the agent token one way: --token (DECKHAND_TOKEN) or --token-file (DECKHAND_TOKEN_FILE), not both',
    );
  }
  if (token) return token;
  if (!file) {
    throw new AgentConfigError(
      'Give the agent token: --token <token> (or DECKHAND_TOKEN), from POST /agents, or --token-file <path> (or DECKHAND_TOKEN_FILE)',
    );
  }
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    throw new AgentConfigError(`Cannot read the agent token file ${file}: ${(err as Error).message}`);
  }
  const fromFile = text.trim();
  if (!fromFile) throw new AgentConfigError(`The agent token file ${file} is empty`);
  return fromFile;
}

const LOOPBACK = /^(localhost|127(\.\d+){3}|\[::1\])$/;

export function loadAgentConfig(argv: string[], env: Record<string, string | undefined>): AgentConfig {
  const { values } = parseArgs({
    args: argv,
    options: {
      url: { type: 'string' },
      token: { type: 'string' },
      'token-file': { type: 'string' },
      'work-dir': { type: 'string' },
      labels: { type: 'string' },
      insecure: { type: 'boolean', default: false },
      'kill-grace-ms': { type: 'string' },
      'spool-memory-bytes': { type: 'string' },
      'max-unacked-bytes': { type: 'string' },
    },
    strict: true,
  });
  const rawUrl = values.url ?? env.DECKHAND_URL;
  if (!rawUrl)
    throw new AgentConfigError(
      'Give the coordinator URL: --url https://deploy.example.com (or DECKHAND_URL)',
    );
  const token = agentToken(
    values.token ?? env.DECKHAND_TOKEN,
    values['token-file'] ?? env.DECKHAND_TOKEN_FILE,
  );
  let url: URL;
  try {
    url = new URL(rawUrl);
  } catch {
    throw new AgentConfigError(`Not a URL: ${rawUrl}`);
  }
  if (!['http:', 'https:', 'ws:', 'wss:'].includes(url.protocol)) {
    throw new AgentConfigError(`The coordinator URL must be http(s):// or ws(s)://, not ${url.protocol}`);
  }
  const insecure = values.insecure === true || env.DECKHAND_INSECURE === 'true';
  const plain = url.protocol === 'http:' || url.protocol === 'ws:';
  if (plain && !LOOPBACK.test(url.hostname) && !insecure) {
    throw new AgentConfigError(
      `Refusing to send the agent token unencrypted to ${url.host}: use https:// (or pass --insecure on a network you trust)`,
    );
  }
  const labels = (values.labels ?? env.DECKHAND_LABELS ?? '')
    .split(',')
    .map((l) => l.trim())
    .filter(Boolean);
  const killGraceMs = wholeNumber(
    'kill-grace-ms',
    'DECKHAND_KILL_GRACE_MS',
    values['kill-grace-ms'] ?? env.DECKHAND_KILL_GRACE_MS ?? '10000',
    'milliseconds',
  );
  const spoolMemoryBytes = wholeNumber(
    'spool-memory-bytes',
    'DECKHAND_SPOOL_MEMORY_BYTES',
    values['spool-memory-bytes'] ?? env.DECKHAND_SPOOL_MEMORY_BYTES ?? String(DEFAULT_SPOOL_MEMORY_BYTES),
    'bytes',
  );
  const maxUnackedBytes = wholeNumber(
    'max-unacked-bytes',
    'DECKHAND_MAX_UNACKED_BYTES',
    values['max-unacked-bytes'] ?? env.DECKHAND_MAX_UNACKED_BYTES ?? String(DEFAULT_MAX_UNACKED_BYTES),
    'bytes',
    // At least one full output chunk must fit, or a step could never send anything.
    MAX_CHUNK_BYTES,
  );
  return {
    url,
    token,
    workDir: values['work-dir'] ?? env.DECKHAND_WORK_DIR ?? '.deckhand-agent',
    labels,
    insecure,
    killGraceMs,
    spoolMemoryBytes,
    maxUnackedBytes,
  };
}
