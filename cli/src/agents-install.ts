// `deckhand agents install|upgrade`: puts a working agent on a host over SSH in one command, or
// replaces an installed one with the coordinator's version. This file parses the options, finds
// the SSH key, asks about an unconfirmed host key on a terminal, and prints; the installation
// itself (connect, check Node, register, upload, start, wait online) is @deckhand/installer
// (installer/), which the coordinator's Agents page uses too. It talks to the
// coordinator over its HTTP API with an admin API token.
//
// The core and its `ssh2` package are loaded only for these commands, so they run from a full
// Deckhand checkout after `npm install` (the other commands need nothing but Node).
import { readFile } from 'node:fs/promises';
import { homedir } from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline/promises';
import { parseArgs } from 'node:util';
import type * as Installer from '@deckhand/installer';
import { Api, networkMessage } from './api.ts';
import { type Connection, resolveConnection } from './args.ts';
import type { Io } from './cli.ts';
import { CliError, EXIT, UsageError } from './exit-codes.ts';

export const INSTALL_HELP = `deckhand agents install — put an agent on a host over SSH

Usage: deckhand agents install --host <host> --user <user> --name <name> [options]

  --host <host>                  the host to install on (SSH)
  --port <port>                  its SSH port (22)
  --user <user>                  who to log in as; as root the agent runs as the user 'deckhand'
  --key <file>                   private key to log in with (default: ssh-agent, then ~/.ssh/id_*)
  --host-key-fingerprint <fp>    the host key's SHA256:… fingerprint, checked on the host with
                                 'ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub'; without it
                                 the key is shown for you to confirm (refused when not on a terminal)
  --name <name>                  the agent's name (letters, digits, . _ -)
  --labels <a,b>                 its labels
  --agent-url <url>              how the agent reaches the coordinator (default: --url)
  --dir <path>                   where the agent lives on the host
                                 (default: /var/lib/deckhand-agent/<name> as root, else ~/.deckhand-agent/<name>)
  --node <path>                  Node 22+ on the host (default: the one on its PATH)
  --wait-seconds <n>             how long to wait for the agent to come online (60)
  --url, --token, --insecure     the coordinator and an admin API token (DECKHAND_URL, DECKHAND_TOKEN)

deckhand agents upgrade --host <host> --user <user> --name <name> [--dir, --key, --host-key-fingerprint, --node]

Replaces an installed agent's file with the coordinator's (GET /agent/download) and restarts it,
keeping its token and settings; it never installs an older version than the one there.

Exit codes: 0 installed (or upgraded) and online, 1 the installation failed on the host, 64 usage or a host key
not confirmed, 69 the coordinator could not be reached.`;

const OPTIONS = {
  host: { type: 'string' },
  port: { type: 'string' },
  user: { type: 'string' },
  key: { type: 'string' },
  'host-key-fingerprint': { type: 'string' },
  name: { type: 'string' },
  labels: { type: 'string' },
  'agent-url': { type: 'string' },
  dir: { type: 'string' },
  node: { type: 'string' },
  'wait-seconds': { type: 'string' },
  url: { type: 'string' },
  token: { type: 'string' },
  insecure: { type: 'boolean' },
  help: { type: 'boolean', short: 'h' },
} as const;

const LOOPBACK = /^(localhost|127(\.\d+){3}|\[::1\])$/;
const NAME = /^[A-Za-z0-9][A-Za-z0-9_.:-]{0,62}$/;

export interface InstallIo extends Io {
  /** For the host-key prompt; a terminal only. */
  stdin?: NodeJS.ReadableStream & { isTTY?: boolean };
}

interface InstallOptions {
  host: string;
  port: number;
  user: string;
  keyFile: string | null;
  fingerprint: string | null;
  name: string;
  labels: string[];
  agentUrl: string;
  insecure: boolean;
  dir: string | null;
  node: string | null;
  waitMs: number;
}

type InstallerModule = typeof Installer;

async function loadInstaller(): Promise<InstallerModule> {
  try {
    return await import('@deckhand/installer');
  } catch {
    throw new UsageError(
      "'deckhand agents install' needs the installer and its ssh2 package: run it from a full Deckhand checkout after 'npm install'.",
    );
  }
}

/** `deckhand agents <subcommand> …` */
export async function agentsCommand(argv: string[], io: InstallIo): Promise<number> {
  const [sub, ...rest] = argv;
  if (sub === undefined || sub === 'help' || sub === '--help' || sub === '-h') {
    io.stdout.write(`${INSTALL_HELP}\n`);
    return EXIT.success;
  }
  if (sub !== 'install' && sub !== 'upgrade')
    throw new UsageError(`Unknown command 'agents ${sub}'. Try 'deckhand agents install --help'.`);
  let parsed;
  try {
    parsed = parseArgs({ args: rest, options: OPTIONS, allowPositionals: false, strict: true });
  } catch (err) {
    throw new UsageError(
      `${(err as Error).message.replace(/\. To specify a positional argument.*$/s, '')}. See 'deckhand agents install --help'.`,
    );
  }
  const v = parsed.values;
  if (v.help) {
    io.stdout.write(`${INSTALL_HELP}\n`);
    return EXIT.success;
  }
  const connection = resolveConnection(
    { url: v.url ?? null, token: v.token ?? null, insecure: v.insecure === true } as Parameters<
      typeof resolveConnection
    >[0],
    io.env,
  );
  const options = installOptions(v, connection, io.env);
  const installer = await loadInstaller();
  return run(sub, installer, options, new Api(connection, io.fetch), connection, io);
}

function installOptions(
  v: { [K in keyof typeof OPTIONS]?: string | boolean },
  connection: Connection,
  env: NodeJS.ProcessEnv,
): InstallOptions {
  const str = (k: keyof typeof OPTIONS) => (typeof v[k] === 'string' ? (v[k] as string) : null);
  const host = str('host');
  const user = str('user');
  const name = str('name');
  if (!host) throw new UsageError("'deckhand agents install' needs --host <host>.");
  if (!/^[A-Za-z0-9.:_[\]-]+$/.test(host) || host.startsWith('-'))
    throw new UsageError(`Not a host name: '${host}'.`);
  if (!user) throw new UsageError("'deckhand agents install' needs --user <user>.");
  if (!/^[A-Za-z0-9._][A-Za-z0-9._-]*$/.test(user)) throw new UsageError(`Not a user name: '${user}'.`);
  if (!name) throw new UsageError("'deckhand agents install' needs --name <agent name>.");
  if (!NAME.test(name))
    throw new UsageError(`--name must be letters, digits, '.', '_', ':' or '-', not '${name}'.`);
  const port = Number(str('port') ?? '22');
  if (!Number.isInteger(port) || port < 1 || port > 65535)
    throw new UsageError(`--port must be a port number, not '${str('port')}'.`);
  const fingerprint = str('host-key-fingerprint');
  if (fingerprint !== null && !/^SHA256:[A-Za-z0-9+/]{43}=?$/.test(fingerprint)) {
    throw new UsageError(
      "--host-key-fingerprint must look like 'SHA256:' and 43 base64 characters, as ssh-keygen -l prints it.",
    );
  }
  const labels = (str('labels') ?? '')
    .split(',')
    .map((l) => l.trim())
    .filter(Boolean);
  for (const l of labels) {
    if (!NAME.test(l)) throw new UsageError(`Not a label: '${l}'.`);
  }
  const waitSeconds = Number(str('wait-seconds') ?? '60');
  if (!Number.isInteger(waitSeconds) || waitSeconds < 1)
    throw new UsageError('--wait-seconds must be a whole number of seconds.');
  const insecure = v.insecure === true || env.DECKHAND_INSECURE === 'true';
  const agentUrl = str('agent-url') ?? connection.baseUrl;
  let parsedAgentUrl: URL;
  try {
    parsedAgentUrl = new URL(agentUrl);
  } catch {
    throw new UsageError(`--agent-url is not a URL: '${agentUrl}'.`);
  }
  if (!['http:', 'https:'].includes(parsedAgentUrl.protocol))
    throw new UsageError('--agent-url must be http(s)://.');
  if (parsedAgentUrl.protocol === 'http:' && !LOOPBACK.test(parsedAgentUrl.hostname) && !insecure) {
    throw new UsageError(
      `The agent would send its token unencrypted to ${parsedAgentUrl.host}: use an https:// --agent-url (or --insecure on a network you trust).`,
    );
  }
  for (const [flag, value] of [
    ['--dir', str('dir')],
    ['--node', str('node')],
  ] as const) {
    if (value !== null && !/^[A-Za-z0-9_./~+-]+$/.test(value))
      throw new UsageError(`${flag} must be a plain path, not '${value}'.`);
  }
  return {
    host,
    port,
    user,
    keyFile: str('key'),
    fingerprint,
    name,
    labels,
    agentUrl: agentUrl.replace(/\/+$/, ''),
    insecure,
    dir: str('dir'),
    node: str('node'),
    waitMs: waitSeconds * 1000,
  };
}

/** How to log in: --key, else ssh-agent, else the usual key files. */
async function authentication(
  installer: InstallerModule,
  o: InstallOptions,
  env: NodeJS.ProcessEnv,
): Promise<Installer.SshAuth> {
  const readKey = async (file: string) => {
    const text = await readFile(file, 'utf8');
    try {
      return installer.parsePrivateKey(text, file);
    } catch (err) {
      if (err instanceof installer.InstallError && /passphrase/.test(err.message)) {
        throw new UsageError(
          `${file} is protected by a passphrase: add it to ssh-agent (ssh-add ${file}) and run again without --key.`,
        );
      }
      throw new UsageError((err as Error).message);
    }
  };
  if (o.keyFile) {
    try {
      return { privateKey: await readKey(o.keyFile) };
    } catch (err) {
      if (err instanceof CliError) throw err;
      throw new UsageError(`Cannot read --key ${o.keyFile}: ${(err as Error).message}`);
    }
  }
  if (env.SSH_AUTH_SOCK) return { agent: env.SSH_AUTH_SOCK };
  for (const name of ['id_ed25519', 'id_ecdsa', 'id_rsa']) {
    const file = path.join(homedir(), '.ssh', name);
    try {
      return { privateKey: await readKey(file) };
    } catch (err) {
      if (err instanceof CliError) throw err;
    }
  }
  throw new UsageError('No SSH key: pass --key <file>, or run an ssh-agent with your key (SSH_AUTH_SOCK).');
}

async function confirmHostKey(io: InstallIo, where: string, fp: string, algorithm: string): Promise<boolean> {
  const stdin = io.stdin ?? process.stdin;
  const ci = io.env.CI === 'true' || io.env.CI === '1';
  if (!stdin.isTTY || ci) return false;
  io.stderr.write(
    `The authenticity of ${where} can't be established.\n${algorithm} key fingerprint is ${fp}.\n`,
  );
  const rl = createInterface({ input: stdin, output: io.stderr as NodeJS.WritableStream });
  try {
    const answer = await rl.question(
      "Compare it with the host's own (ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub). Continue (yes/no)? ",
    );
    return answer.trim().toLowerCase() === 'yes';
  } finally {
    rl.close();
  }
}

/** The coordinator, for the installer core: its HTTP API with the admin token. */
function httpCoordinator(api: Api, connection: Connection): Installer.InstallCoordinator {
  interface AgentRow {
    id: string;
    name: string;
    online: boolean;
    version: string | null;
  }
  return {
    async downloadAgent() {
      let res: Response;
      try {
        res = await api.fetchRaw('/agent/download', {
          method: 'GET',
          headers: { accept: 'text/javascript' },
        });
      } catch (err) {
        throw new CliError(
          `Cannot reach the coordinator at ${connection.baseUrl}: ${networkMessage(err)}`,
          EXIT.unavailable,
        );
      }
      if (!res.ok) {
        const text = await res.text();
        let message = text;
        try {
          message = (JSON.parse(text) as { error?: string }).error ?? text;
        } catch {
          // not JSON: the text as is
        }
        throw new CliError(
          `The coordinator cannot serve the agent (HTTP ${res.status}): ${message}`,
          EXIT.unavailable,
        );
      }
      return {
        code: Buffer.from(await res.arrayBuffer()),
        version: res.headers.get('x-deckhand-agent-version') ?? 'unknown',
      };
    },
    async register(name, labels) {
      const r = await api.request<{ agent: AgentRow; token: string }>('POST', '/agents', {
        name,
        ...(labels.length ? { labels } : {}),
      });
      return { id: r.agent.id, token: r.token };
    },
    async unregister(id) {
      await api.fetchRaw(`/agents/${id}`, { method: 'DELETE', headers: {} });
    },
    async agent(by) {
      const { agents } = await api.request<{ agents: AgentRow[] }>('GET', '/agents');
      return agents.find((a) => ('id' in by ? a.id === by.id : a.name === by.name)) ?? null;
    },
  };
}

async function run(
  sub: 'install' | 'upgrade',
  installer: InstallerModule,
  o: InstallOptions,
  api: Api,
  connection: Connection,
  io: InstallIo,
): Promise<number> {
  const target: Installer.InstallTarget = {
    host: o.host,
    port: o.port,
    user: o.user,
    auth: await authentication(installer, o, io.env),
    fingerprint: o.fingerprint,
    name: o.name,
    labels: o.labels,
    agentUrl: o.agentUrl,
    insecure: o.insecure,
    dir: o.dir,
    node: o.node,
    waitMs: o.waitMs,
  };
  const report: Installer.InstallReporter = {
    step: () => undefined,
    say: (line) => io.stdout.write(`${line}\n`),
  };
  const hooks = {
    confirmHostKey: (where: string, fp: string, alg: string) => confirmHostKey(io, where, fp, alg),
  };
  try {
    if (sub === 'install')
      await installer.installAgent(target, httpCoordinator(api, connection), report, hooks);
    else await installer.upgradeAgent(target, httpCoordinator(api, connection), report, hooks);
    return EXIT.success;
  } catch (err) {
    if (err instanceof installer.InstallError) {
      const code = { usage: EXIT.usage, host: EXIT.failed, coordinator: EXIT.unavailable }[err.kind];
      throw new CliError(err.message, code);
    }
    throw err;
  }
}
