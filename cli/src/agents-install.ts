// `deckhand agents install`: puts a working agent on a host over SSH, in one command. It connects
// (the host key confirmed: --host-key-fingerprint, or a prompt on a terminal; an unknown key is
// refused otherwise), checks the host has Node 22+ (or says how to get it), git and bash,
// registers the agent with the coordinator (POST /agents: its token goes straight into a file
// only the agent's user can read, over the SSH channel's stdin, never on a command line),
// uploads the agent as one file (GET /agent/download), and starts it: a systemd unit where
// systemd runs — a system unit running as the unprivileged `deckhand` user when logging in as
// root, a user unit otherwise — else with nohup, saying how to start it again. Then it waits
// until the agent is online (GET /agents). A failure after registering removes the agent again.
//
// Needs the `ssh2` package, so it runs from a full Deckhand checkout after `npm install` (the
// other commands need nothing but Node).
import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { homedir } from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline/promises';
import { parseArgs } from 'node:util';
import type Ssh2 from 'ssh2';
import type { Client as SshClient, ConnectConfig } from 'ssh2';
import { Api, networkMessage, sleep } from './api.ts';
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

const NAME = /^[A-Za-z0-9][A-Za-z0-9_.:-]{0,62}$/;
const MIN_NODE_MAJOR = 22;
const LOOPBACK = /^(localhost|127(\.\d+){3}|\[::1\])$/;

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
  const api = new Api(connection, io.fetch);
  return sub === 'install' ? install(options, api, connection, io) : upgrade(options, api, connection, io);
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

/** Single-quotes a word for a POSIX shell. */
function q(word: string): string {
  return `'${word.replaceAll("'", `'\\''`)}'`;
}

function fingerprintOf(key: Buffer): string {
  return `SHA256:${createHash('sha256').update(key).digest('base64').replace(/=+$/, '')}`;
}

function keyAlgorithm(key: Buffer): string {
  const n = key.length >= 4 ? key.readUInt32BE(0) : 0;
  return n > 0 && n < 64 && key.length >= 4 + n ? key.subarray(4, 4 + n).toString('latin1') : 'unknown';
}

class HostError extends CliError {
  constructor(message: string) {
    super(message, EXIT.failed);
  }
}

interface Remote {
  run(script: string, stdin?: Buffer): Promise<{ code: number | null; stdout: string; stderr: string }>;
  end(): void;
}

async function loadSsh2(): Promise<typeof Ssh2> {
  try {
    return (await import('ssh2')).default;
  } catch {
    throw new UsageError(
      "'deckhand agents install' needs the ssh2 package: run it from a full Deckhand checkout after 'npm install'.",
    );
  }
}

/** How to log in: --key, else ssh-agent, else the usual key files. */
async function authentication(
  ssh2: typeof Ssh2,
  o: InstallOptions,
  env: NodeJS.ProcessEnv,
): Promise<Partial<ConnectConfig>> {
  const readKey = async (file: string) => {
    const text = await readFile(file, 'utf8');
    const parsed = ssh2.utils.parseKey(text);
    if (parsed instanceof Error) {
      if (/passphrase|encrypted/i.test(parsed.message)) {
        throw new UsageError(
          `${file} is protected by a passphrase: add it to ssh-agent (ssh-add ${file}) and run again without --key.`,
        );
      }
      throw new UsageError(`${file} is not a private key ssh can use: ${parsed.message}`);
    }
    return text;
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

/** Host key algorithms, one group per kind of key (the name a key blob carries comes first). */
const HOST_KEY_KINDS = [
  ['ssh-ed25519'],
  ['ecdsa-sha2-nistp256'],
  ['ecdsa-sha2-nistp384'],
  ['ecdsa-sha2-nistp521'],
  ['ssh-rsa', 'rsa-sha2-512', 'rsa-sha2-256'],
];

/**
 * Connects and logs in. With --host-key-fingerprint, a host whose first key does not match is
 * asked for each other kind of key it may hold (the pin may name its RSA key, say); only a key
 * that matches is accepted.
 */
async function connect(
  o: InstallOptions,
  io: InstallIo,
): Promise<{ remote: Remote; fingerprint: string; algorithm: string }> {
  const ssh2 = await loadSsh2();
  const auth = await authentication(ssh2, o, io.env);
  try {
    return await connectOnce(ssh2, auth, o, io, undefined);
  } catch (first) {
    if (!(first instanceof HostKeyRefused) || o.fingerprint === null) throw first;
    for (const kinds of HOST_KEY_KINDS) {
      if (kinds.includes(first.algorithm)) continue;
      try {
        return await connectOnce(ssh2, auth, o, io, kinds);
      } catch (err) {
        if (err instanceof HostKeyRefused || err instanceof NoSuchHostKey) continue;
        throw err;
      }
    }
    throw first;
  }
}

class HostKeyRefused extends UsageError {
  readonly algorithm: string;
  constructor(message: string, algorithm: string) {
    super(message);
    this.algorithm = algorithm;
  }
}

class NoSuchHostKey extends Error {}

async function connectOnce(
  ssh2: typeof Ssh2,
  auth: Partial<ConnectConfig>,
  o: InstallOptions,
  io: InstallIo,
  kinds: string[] | undefined,
): Promise<{ remote: Remote; fingerprint: string; algorithm: string }> {
  const where = `${o.user}@${o.host}:${o.port}`;
  let presented: { fingerprint: string; algorithm: string } | undefined;
  let refused: CliError | undefined;
  const client: SshClient = new ssh2.Client();
  await new Promise<void>((resolve, reject) => {
    client.once('ready', () => resolve());
    // (After `ready` a rejection changes nothing.)
    client.on('close', () =>
      reject(
        refused ??
          (kinds && !presented
            ? new NoSuchHostKey('closed')
            : new HostError(`Cannot connect to ${where}: the connection closed during login`)),
      ),
    );
    client.on('error', (err: Error & { level?: string }) => {
      client.end();
      if (refused) reject(refused);
      // Asked for one kind of key only: a host without it hangs up before showing any.
      else if (kinds && !presented) reject(new NoSuchHostKey(err.message));
      else if (err.level === 'client-authentication')
        reject(
          new HostError(
            `${where} refused the key: add your public key to ~${o.user}/.ssh/authorized_keys there, or pass --key.`,
          ),
        );
      else reject(new HostError(`Cannot connect to ${where}: ${err.message}`));
    });
    client.connect({
      host: o.host.replace(/^\[(.*)\]$/, '$1'),
      port: o.port,
      username: o.user,
      readyTimeout: 20_000,
      tryKeyboard: false,
      ...auth,
      ...(kinds ? { algorithms: { serverHostKey: kinds } } : {}),
      hostVerifier: (key: Buffer, verify: (ok: boolean) => void) => {
        presented = { fingerprint: fingerprintOf(key), algorithm: keyAlgorithm(key) };
        const fp = presented.fingerprint;
        if (o.fingerprint !== null) {
          const ok = fp === o.fingerprint.replace(/=+$/, '');
          if (!ok)
            refused = new HostKeyRefused(
              `Host key verification failed for ${where}: it presented ${fp} (${presented.algorithm}), not ${o.fingerprint}. Nothing was sent.`,
              presented.algorithm,
            );
          verify(ok);
          return;
        }
        void confirmHostKey(io, where, fp, presented.algorithm).then(
          (ok) => {
            if (!ok)
              refused = new UsageError(
                `The host key of ${where} is ${fp} (${presented!.algorithm}), and it was not confirmed. Check it on the host (ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub) and pass --host-key-fingerprint ${fp}.`,
              );
            verify(ok);
          },
          () => verify(false),
        );
      },
    } as ConnectConfig);
  });
  client.on('error', () => undefined);
  const remote: Remote = {
    run: (script, stdin) =>
      new Promise((resolve, reject) => {
        client.exec(`exec bash --norc -c ${q(script)}`, (err, ch) => {
          if (err) return reject(new HostError(`Cannot run a command on ${where}: ${err.message}`));
          let stdout = '';
          let stderr = '';
          let code: number | null = null;
          ch.on('data', (d: Buffer) => (stdout += d.toString('utf8')));
          ch.stderr.on('data', (d: Buffer) => (stderr += d.toString('utf8')));
          ch.on('exit', (c: number | null) => (code = c));
          ch.on('close', () => resolve({ code, stdout, stderr }));
          ch.end(stdin ?? Buffer.alloc(0));
        });
      }),
    end: () => client.end(),
  };
  return { remote, ...presented! };
}

interface HostFacts {
  uid: number;
  user: string;
  home: string;
  node: string;
  nodeVersion: string;
  git: string;
  systemd: boolean;
  userSystemd: boolean;
}

async function probe(remote: Remote, o: InstallOptions): Promise<HostFacts> {
  const script = `uid=$(id -u); echo "uid=$uid"; echo "user=$(id -un)"; echo "home=$HOME"
node=${o.node ? q(o.node) : '""'}
case "$node" in "~/"*) node="$HOME/\${node#\\~/}";; esac
if [ -z "$node" ]; then node=$(command -v node 2>/dev/null || bash -lc 'command -v node' 2>/dev/null || true); fi
echo "node=$node"
[ -n "$node" ] && echo "node_version=$("$node" --version 2>/dev/null)"
echo "git=$(command -v git 2>/dev/null)"
if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then echo systemd=yes; else echo systemd=no; fi
if [ "$uid" != 0 ] && systemctl --user show-environment >/dev/null 2>&1; then echo user_systemd=yes; else echo user_systemd=no; fi
`;
  const r = await remote.run(script);
  const facts = Object.fromEntries(
    r.stdout
      .split('\n')
      .filter((l) => l.includes('='))
      .map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1).trim()]),
  );
  if (r.code !== 0 || facts.uid === undefined) {
    throw new HostError(
      `Could not look around on the host (exit ${r.code}): ${r.stderr.trim() || r.stdout.trim()}`,
    );
  }
  return {
    uid: Number(facts.uid),
    user: facts.user ?? '',
    home: facts.home ?? '',
    node: facts.node ?? '',
    nodeVersion: facts.node_version ?? '',
    git: facts.git ?? '',
    systemd: facts.systemd === 'yes',
    userSystemd: facts.user_systemd === 'yes',
  };
}

const NODE_HOWTO =
  'Install Node.js 22 or newer there — Debian/Ubuntu: https://github.com/nodesource/distributions ' +
  '(curl -fsSL https://deb.nodesource.com/setup_22.x | sudo bash - && sudo apt-get install -y nodejs), ' +
  'or a tarball from https://nodejs.org/en/download — then run this again (with --node <path> if it is not on the PATH).';

function checkHost(f: HostFacts, where: string): void {
  if (!f.node)
    throw new HostError(`No Node.js on ${where}: the agent needs Node ${MIN_NODE_MAJOR}+. ${NODE_HOWTO}`);
  const major = Number(/^v(\d+)\./.exec(f.nodeVersion)?.[1] ?? NaN);
  if (!(major >= MIN_NODE_MAJOR)) {
    throw new HostError(
      `Node ${f.nodeVersion || '(unknown version)'} at ${f.node} on ${where} is too old: the agent needs Node ${MIN_NODE_MAJOR}+. ${NODE_HOWTO}`,
    );
  }
  if (!f.git)
    throw new HostError(
      `No git on ${where}: the agent checks out with git. Install it (apt-get install git) and run this again.`,
    );
}

type Mode = 'system' | 'user' | 'nohup';

interface Layout {
  mode: Mode;
  dir: string;
  envFile: string;
  unitName: string;
  unitFile: string | null;
  /** Who the agent runs as. */
  runAs: string;
}

function layout(o: InstallOptions, f: HostFacts): Layout {
  const unitName = `deckhand-agent-${o.name.replaceAll(':', '-')}.service`;
  const expand = (p: string) => (p.startsWith('~/') ? `${f.home}/${p.slice(2)}` : p);
  if (f.uid === 0 && f.systemd) {
    const dir = expand(o.dir ?? `/var/lib/deckhand-agent/${o.name}`);
    return {
      mode: 'system',
      dir,
      envFile: `/etc/deckhand/agent-${o.name}.env`,
      unitName,
      unitFile: `/etc/systemd/system/${unitName}`,
      runAs: 'deckhand',
    };
  }
  const dir = expand(
    o.dir ?? (f.uid === 0 ? `/var/lib/deckhand-agent/${o.name}` : `${f.home}/.deckhand-agent/${o.name}`),
  );
  if (f.uid !== 0 && f.userSystemd) {
    return {
      mode: 'user',
      dir,
      envFile: `${dir}/agent.env`,
      unitName,
      unitFile: `${f.home}/.config/systemd/user/${unitName}`,
      runAs: f.user,
    };
  }
  return { mode: 'nohup', dir, envFile: `${dir}/agent.env`, unitName, unitFile: null, runAs: f.user };
}

/** The systemd unit: restarted on failure, never after exit 2 (refused for good); SIGTERM first. */
export function unitText(l: Pick<Layout, 'mode' | 'dir' | 'envFile'>, node: string, name: string): string {
  const lines = [
    `# Deckhand agent ${name}, written by 'deckhand agents install'.`,
    '[Unit]',
    `Description=Deckhand agent ${name}`,
    'After=network-online.target',
    'Wants=network-online.target',
    '',
    '[Service]',
    'Type=simple',
  ];
  if (l.mode === 'system') lines.push('User=deckhand', 'Group=deckhand');
  lines.push(
    `EnvironmentFile=${l.envFile}`,
    `WorkingDirectory=${l.dir}`,
    `ExecStart=${node} ${l.dir}/deckhand-agent.js`,
    'Restart=always',
    'RestartSec=5',
    '# Exit 2: the token was refused or the protocol differs; restarting will not help.',
    'RestartPreventExitStatus=2',
    '# SIGTERM lets the agent stop running commands (their process groups) before it exits.',
    'KillMode=mixed',
    'TimeoutStopSec=30',
  );
  if (l.mode === 'system') lines.push('NoNewPrivileges=true', 'PrivateTmp=true');
  lines.push('', '[Install]', `WantedBy=${l.mode === 'system' ? 'multi-user.target' : 'default.target'}`, '');
  return lines.join('\n');
}

async function writeRemote(remote: Remote, file: string, content: Buffer, mode: string): Promise<void> {
  const dir = path.posix.dirname(file);
  const r = await remote.run(
    `set -e; umask 077; mkdir -p ${q(dir)}; tmp=${q(file)}.tmp-$$; cat > "$tmp"; chmod ${mode} "$tmp"; mv -f "$tmp" ${q(file)}`,
    content,
  );
  if (r.code !== 0) throw new HostError(`Could not write ${file} on the host: ${r.stderr.trim()}`);
}

async function must(remote: Remote, what: string, script: string): Promise<string> {
  const r = await remote.run(script);
  if (r.code !== 0)
    throw new HostError(
      `${what} failed (exit ${r.code}): ${(r.stderr || r.stdout).trim().split('\n').slice(-5).join(' | ')}`,
    );
  return r.stdout;
}

interface AgentRow {
  id: string;
  name: string;
  online: boolean;
  version: string | null;
}

/** The agent file the coordinator serves, with its version. */
async function downloadAgent(api: Api, connection: Connection): Promise<{ code: Buffer; version: string }> {
  let bundle: { code: Buffer; version: string };
  try {
    const res = await api.fetchRaw('/agent/download', {
      method: 'GET',
      headers: { accept: 'text/javascript' },
    });
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
    bundle = {
      code: Buffer.from(await res.arrayBuffer()),
      version: res.headers.get('x-deckhand-agent-version') ?? 'unknown',
    };
  } catch (err) {
    if (err instanceof CliError) throw err;
    throw new CliError(
      `Cannot reach the coordinator at ${connection.baseUrl}: ${networkMessage(err)}`,
      EXIT.unavailable,
    );
  }
  return bundle;
}

async function install(o: InstallOptions, api: Api, connection: Connection, io: InstallIo): Promise<number> {
  const say = (line: string) => io.stdout.write(`${line}\n`);
  const where = `${o.user}@${o.host}:${o.port}`;

  // The agent file first: nothing is touched on the host if the coordinator cannot serve it.
  const bundle = await downloadAgent(api, connection);

  say(`Connecting to ${where}…`);
  const { remote, fingerprint, algorithm } = await connect(o, io);
  let created: AgentRow | null = null;
  try {
    say(
      `Host key ${fingerprint} (${algorithm}) ${o.fingerprint ? 'matches --host-key-fingerprint' : 'confirmed'}.`,
    );
    const facts = await probe(remote, o);
    checkHost(facts, where);
    const l = layout(o, facts);
    say(`Node ${facts.nodeVersion} at ${facts.node}, git at ${facts.git}.`);

    // Registered only once the host can run it; removed again if anything below fails.
    const registered = await api.request<{ agent: AgentRow; token: string }>('POST', '/agents', {
      name: o.name,
      ...(o.labels.length ? { labels: o.labels } : {}),
    });
    created = registered.agent;
    say(`Registered agent ${o.name}${o.labels.length ? ` (labels: ${o.labels.join(', ')})` : ''}.`);

    if (l.mode === 'system') {
      await must(
        remote,
        "Creating the user 'deckhand'",
        `id -u deckhand >/dev/null 2>&1 || useradd --system --create-home --home-dir /var/lib/deckhand-agent --shell /usr/sbin/nologin deckhand`,
      );
    }
    await writeRemote(remote, `${l.dir}/deckhand-agent.js`, bundle.code, '755');
    const env = [
      `DECKHAND_URL=${o.agentUrl}`,
      `DECKHAND_TOKEN=${registered.token}`,
      `DECKHAND_WORK_DIR=${l.dir}/work`,
      ...(o.insecure ? ['DECKHAND_INSECURE=true'] : []),
      '',
    ].join('\n');
    // The token: readable by the agent's user (or, for a system unit, by root, which hands it over).
    await writeRemote(remote, l.envFile, Buffer.from(env), '600');
    if (l.mode === 'system')
      await must(remote, 'Handing the folder to deckhand', `chown -R deckhand:deckhand ${q(l.dir)}`);
    say(
      `Uploaded deckhand-agent ${bundle.version} (${Math.round(bundle.code.length / 1024)} KiB) to ${l.dir}.`,
    );

    if (l.mode === 'nohup') {
      const start = `#!/bin/sh
# Starts the Deckhand agent ${o.name} in the background (written by 'deckhand agents install').
cd ${q(l.dir)} || exit 1
if [ -f agent.pid ] && kill -0 "$(cat agent.pid)" 2>/dev/null; then echo "already running (pid $(cat agent.pid))"; exit 0; fi
set -a; . ${q(l.envFile)}; set +a
setsid nohup ${q(facts.node)} ${q(`${l.dir}/deckhand-agent.js`)} >> agent.log 2>&1 < /dev/null &
echo $! > agent.pid
echo "started (pid $!)"
`;
      await writeRemote(remote, `${l.dir}/start.sh`, Buffer.from(start), '755');
      const out = await must(remote, 'Starting the agent', `${q(`${l.dir}/start.sh`)}`);
      say(
        `No systemd${facts.uid === 0 ? '' : ' user instance'} on this host: the agent was ${out.trim()} with nohup, logging to ${l.dir}/agent.log.` +
          `\nStart it again with ${l.dir}/start.sh (e.g. from cron: @reboot ${l.dir}/start.sh).`,
      );
      if (facts.uid === 0)
        say(
          'Note: it runs as root; a dedicated user is safer (install as that user, or where systemd runs).',
        );
    } else {
      const unit = unitText(l, facts.node, o.name);
      await writeRemote(remote, l.unitFile!, Buffer.from(unit), '644');
      const ctl = l.mode === 'system' ? 'systemctl' : 'systemctl --user';
      await must(
        remote,
        'Starting the service',
        `${ctl} daemon-reload && ${ctl} enable --now ${q(l.unitName)}`,
      );
      say(`Installed and started ${l.unitFile} (${ctl} status ${l.unitName}).`);
      if (l.mode === 'user') {
        const linger = await remote.run('loginctl enable-linger 2>&1');
        if (linger.code !== 0) {
          say(
            `Note: it stops when ${facts.user} logs out unless lingering is on: sudo loginctl enable-linger ${facts.user}`,
          );
        }
      }
    }

    say(`Waiting for ${o.name} to come online…`);
    const deadline = Date.now() + o.waitMs;
    for (;;) {
      const { agents } = await api.request<{ agents: AgentRow[] }>('GET', '/agents');
      const me = agents.find((a) => a.id === created!.id);
      if (me?.online) {
        say(`${o.name} is online (agent ${me.version ?? bundle.version}).`);
        return EXIT.success;
      }
      if (Date.now() > deadline) {
        const tail =
          l.mode === 'nohup'
            ? await remote.run(`tail -n 20 ${q(`${l.dir}/agent.log`)}`)
            : await remote.run(
                `journalctl ${l.mode === 'user' ? '--user ' : ''}-u ${q(l.unitName)} -n 20 --no-pager`,
              );
        throw new HostError(
          `${o.name} did not come online within ${o.waitMs / 1000} s. Can the host reach ${o.agentUrl}? Its log:\n${tail.stdout.trim()}`,
        );
      }
      await sleep(1_000);
    }
  } catch (err) {
    if (created) {
      // Nothing half-installed is left registered; what was written on the host stays for a look.
      await api
        .fetchRaw(`/agents/${created.id}`, { method: 'DELETE', headers: {} })
        .then(() => say(`Removed the registration of ${o.name} again.`))
        .catch(() => undefined);
    }
    throw err;
  } finally {
    remote.end();
  }
}

/** -1, 0 or 1 as version `a` is older than, the same as, or newer than `b` (major.minor.patch; a pre-release is older). */
export function compareVersions(a: string, b: string): number {
  const parse = (v: string) => {
    const m = /^v?(\d+)\.(\d+)\.(\d+)(-.+)?/.exec(v.trim());
    return m ? { n: [Number(m[1]), Number(m[2]), Number(m[3])], pre: m[4] ?? null } : null;
  };
  const x = parse(a);
  const y = parse(b);
  if (!x || !y) throw new CliError(`Cannot compare agent versions '${a}' and '${b}'.`, EXIT.failed);
  for (let i = 0; i < 3; i++) if (x.n[i] !== y.n[i]) return x.n[i]! < y.n[i]! ? -1 : 1;
  if (x.pre === y.pre) return 0;
  if (x.pre === null) return 1;
  if (y.pre === null) return -1;
  return x.pre < y.pre ? -1 : 1;
}

/**
 * `deckhand agents upgrade`: the coordinator's agent file replaces the installed one (token and
 * settings stay), and the agent is restarted the way it was installed; an older version than the
 * installed one is refused, the same one is left alone.
 */
async function upgrade(o: InstallOptions, api: Api, connection: Connection, io: InstallIo): Promise<number> {
  const say = (line: string) => io.stdout.write(`${line}\n`);
  const where = `${o.user}@${o.host}:${o.port}`;
  const bundle = await downloadAgent(api, connection);
  say(`Connecting to ${where}…`);
  const { remote, fingerprint, algorithm } = await connect(o, io);
  try {
    say(
      `Host key ${fingerprint} (${algorithm}) ${o.fingerprint ? 'matches --host-key-fingerprint' : 'confirmed'}.`,
    );
    const facts = await probe(remote, o);
    checkHost(facts, where);
    const l = layout(o, facts);
    const file = `${l.dir}/deckhand-agent.js`;
    const head = await remote.run(`head -c 512 ${q(file)}`);
    const installed = /^\/\/ deckhand-agent (\S+):/m.exec(head.stdout)?.[1];
    if (head.code !== 0 || !installed) {
      throw new HostError(
        `No agent is installed in ${l.dir} on ${where}: use 'deckhand agents install' (or name the folder with --dir).`,
      );
    }
    const order = compareVersions(bundle.version, installed);
    if (order < 0) {
      throw new HostError(
        `The coordinator serves deckhand-agent ${bundle.version}, older than the ${installed} installed in ${l.dir}: an upgrade never installs an older version. Upgrade the coordinator first.`,
      );
    }
    if (order === 0) {
      say(`deckhand-agent ${installed} is installed in ${l.dir} already: nothing to do.`);
      return EXIT.success;
    }
    const { agents } = await api.request<{ agents: AgentRow[] }>('GET', '/agents');
    const me = agents.find((a) => a.name === o.name);
    if (!me) throw new UsageError(`No agent named ${o.name} is registered with the coordinator.`);

    await writeRemote(remote, file, bundle.code, '755');
    if (l.mode === 'system')
      await must(remote, 'Handing the file to deckhand', `chown deckhand:deckhand ${q(file)}`);
    say(`Replaced deckhand-agent ${installed} with ${bundle.version} in ${l.dir}.`);
    if (l.mode === 'nohup') {
      // SIGTERM: the agent stops its running commands and exits; then it starts again.
      await must(
        remote,
        'Restarting the agent',
        `cd ${q(l.dir)} && if [ -f agent.pid ] && kill -TERM "$(cat agent.pid)" 2>/dev/null; then
  i=0; while kill -0 "$(cat agent.pid)" 2>/dev/null && [ "$i" -lt 350 ]; do sleep 0.1; i=$((i+1)); done
fi
./start.sh`,
      );
    } else {
      const ctl = l.mode === 'system' ? 'systemctl' : 'systemctl --user';
      await must(remote, 'Restarting the service', `${ctl} restart ${q(l.unitName)}`);
    }
    say(`Restarted; waiting for ${o.name} to come back with ${bundle.version}…`);
    const deadline = Date.now() + o.waitMs;
    for (;;) {
      const { agents: now } = await api.request<{ agents: AgentRow[] }>('GET', '/agents');
      const row = now.find((a) => a.id === me.id);
      if (row?.online && row.version === bundle.version) {
        say(`${o.name} is online (agent ${row.version}).`);
        return EXIT.success;
      }
      if (Date.now() > deadline) {
        throw new HostError(
          `${o.name} did not come back online with ${bundle.version} within ${o.waitMs / 1000} s.`,
        );
      }
      await sleep(1_000);
    }
  } finally {
    remote.end();
  }
}
