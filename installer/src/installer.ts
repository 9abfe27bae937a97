// Installing an agent on a host over SSH, shared by `deckhand agents install|upgrade` (cli/) and
// POST /agents/install (the Agents page). It connects (the host key checked against a pinned
// fingerprint, or confirmed by whoever runs it; an unknown key is refused), checks that the host
// has Node 22+ (or says how to get it), git and bash, registers the agent with the coordinator
// (its token goes straight into a file only the agent's user can read, over the SSH channel's
// stdin, never on a command line), uploads the agent as one file, and starts it: a systemd unit
// where systemd runs — a system unit running as the unprivileged `deckhand` user when logging in
// as root, a user unit otherwise — else with nohup, saying how to start it again. Then it waits
// until the agent is online. A failure after registering removes the agent again.
//
// What it needs of the coordinator (the agent file, registering, presence) comes through
// InstallCoordinator: HTTP with an API token for the CLI, the services themselves for the route.
// Nothing here touches the database, and it logs nothing: it reports through InstallReporter.
import { createHash, timingSafeEqual } from 'node:crypto';
import path from 'node:path';
import ssh2 from 'ssh2';
import type { Client as SshClient, ConnectConfig } from 'ssh2';

export const AGENT_NAME_PATTERN = /^[A-Za-z0-9][A-Za-z0-9_.:-]{0,62}$/;
export const MIN_NODE_MAJOR = 22;
const LOOPBACK = /^(localhost|127(\.\d+){3}|\[::1\])$/;

/**
 * Why an installation stopped: `usage` — what was asked cannot be done as asked (a host key not
 * confirmed or not the pinned one, a key ssh cannot use); `host` — the host lacks something or a
 * step failed there; `coordinator` — the coordinator could not serve the agent.
 */
export type InstallErrorKind = 'usage' | 'host' | 'coordinator';

export class InstallError extends Error {
  readonly kind: InstallErrorKind;
  constructor(kind: InstallErrorKind, message: string) {
    super(message);
    this.name = 'InstallError';
    this.kind = kind;
  }
}

/** How to log in: a private key (OpenSSH or PEM, no passphrase), or an ssh-agent socket. */
export type SshAuth = { privateKey: string } | { agent: string };

export interface InstallTarget {
  host: string;
  port: number;
  user: string;
  auth: SshAuth;
  /** The pinned host key (SHA256:…); null to ask InstallHooks.confirmHostKey. */
  fingerprint: string | null;
  name: string;
  labels: string[];
  /** How the agent reaches the coordinator. */
  agentUrl: string;
  /** The agent may use plain http:// beyond loopback. */
  insecure: boolean;
  /** Where the agent lives on the host (default by mode, see layout()). */
  dir: string | null;
  /** Node 22+ on the host (default: the one on its PATH). */
  node: string | null;
  /** How long to wait for the agent to come online. */
  waitMs: number;
}

export interface AgentFile {
  code: Buffer;
  version: string;
}

/** What the installer asks of the coordinator. */
export interface InstallCoordinator {
  /** The agent file the coordinator serves (GET /agent/download). */
  downloadAgent(): Promise<AgentFile>;
  /** Registers the agent (POST /agents): its id and its token (shown only here). */
  register(name: string, labels: string[]): Promise<{ id: string; token: string }>;
  /** Removes a registration again (DELETE /agents/:id). */
  unregister(id: string): Promise<void>;
  /** The registered agent of that id or name, with its presence; null when there is none. */
  agent(by: { id: string } | { name: string }): Promise<InstalledAgent | null>;
}

export interface InstalledAgent {
  id: string;
  online: boolean;
  version: string | null;
}

/** The steps of an installation, in order: what a progress display shows. */
export const INSTALL_STEPS = [
  'download',
  'connect',
  'check',
  'register',
  'upload',
  'start',
  'online',
] as const;
export type InstallStep = (typeof INSTALL_STEPS)[number];

export interface InstallReporter {
  /** A step begins (the one before it is done). */
  step(step: InstallStep): void;
  /** A line for the person watching. */
  say(line: string): void;
}

export interface InstallHooks {
  /** Asked when no fingerprint is pinned; the connection goes on only on true. */
  confirmHostKey?: (where: string, fingerprint: string, algorithm: string) => Promise<boolean>;
  sleep?: (ms: number) => Promise<void>;
}

/** Checks an agent URL: http(s), and not plain http beyond loopback unless insecure. */
export function checkAgentUrl(agentUrl: string, insecure: boolean): string {
  let parsed: URL;
  try {
    parsed = new URL(agentUrl);
  } catch {
    throw new InstallError('usage', `The agent URL is not a URL: '${agentUrl}'.`);
  }
  if (!['http:', 'https:'].includes(parsed.protocol))
    throw new InstallError('usage', 'The agent URL must be http(s)://.');
  if (parsed.protocol === 'http:' && !LOOPBACK.test(parsed.hostname) && !insecure) {
    throw new InstallError(
      'usage',
      `The agent would send its token unencrypted to ${parsed.host}: use an https:// agent URL (or allow insecure connections on a network you trust).`,
    );
  }
  return agentUrl.replace(/\/+$/, '');
}

/** A private key ssh2 can use, as text; a clear error for a passphrase-protected or broken one. */
export function parsePrivateKey(text: string, label: string): string {
  const parsed = ssh2.utils.parseKey(text);
  if (parsed instanceof Error) {
    if (/passphrase|encrypted/i.test(parsed.message)) {
      throw new InstallError(
        'usage',
        `${label} is protected by a passphrase: use a key without one, or an ssh-agent holding it.`,
      );
    }
    throw new InstallError('usage', `${label} is not a private key ssh can use: ${parsed.message}`);
  }
  return text;
}

/** `SHA256:<base64, no padding>` of a key blob, as `ssh-keygen -l` prints it. */
function fingerprintOf(key: Buffer): string {
  return `SHA256:${createHash('sha256').update(key).digest('base64').replace(/=+$/, '')}`;
}

function keyAlgorithm(key: Buffer): string {
  const n = key.length >= 4 ? key.readUInt32BE(0) : 0;
  return n > 0 && n < 64 && key.length >= 4 + n ? key.subarray(4, 4 + n).toString('latin1') : 'unknown';
}

function sameFingerprint(a: string, b: string): boolean {
  const x = Buffer.from(a.replace(/=+$/, ''));
  const y = Buffer.from(b.replace(/=+$/, ''));
  return x.length === y.length && timingSafeEqual(x, y);
}

/** Host key algorithms, one group per kind of key (the name a key blob carries comes first). */
const HOST_KEY_KINDS = [
  ['ssh-ed25519'],
  ['ecdsa-sha2-nistp256'],
  ['ecdsa-sha2-nistp384'],
  ['ecdsa-sha2-nistp521'],
  ['ssh-rsa', 'rsa-sha2-512', 'rsa-sha2-256'],
];

/** Single-quotes a word for a POSIX shell. */
function q(word: string): string {
  return `'${word.replaceAll("'", `'\\''`)}'`;
}

const hostError = (message: string) => new InstallError('host', message);

interface Remote {
  run(script: string, stdin?: Buffer): Promise<{ code: number | null; stdout: string; stderr: string }>;
  end(): void;
}

class HostKeyRefused extends InstallError {
  readonly algorithm: string;
  constructor(message: string, algorithm: string) {
    super('usage', message);
    this.algorithm = algorithm;
  }
}

class NoSuchHostKey extends Error {}

/**
 * Connects and logs in. With a pinned fingerprint, a host whose first key does not match is
 * asked for each other kind of key it may hold (the pin may name its RSA key, say); only a key
 * that matches is accepted.
 */
async function connect(
  t: InstallTarget,
  hooks: InstallHooks,
): Promise<{ remote: Remote; fingerprint: string; algorithm: string }> {
  try {
    return await connectOnce(t, hooks, undefined);
  } catch (first) {
    if (!(first instanceof HostKeyRefused) || t.fingerprint === null) throw first;
    for (const kinds of HOST_KEY_KINDS) {
      if (kinds.includes(first.algorithm)) continue;
      try {
        return await connectOnce(t, hooks, kinds);
      } catch (err) {
        if (err instanceof HostKeyRefused || err instanceof NoSuchHostKey) continue;
        throw err;
      }
    }
    throw first;
  }
}

async function connectOnce(
  t: InstallTarget,
  hooks: InstallHooks,
  kinds: string[] | undefined,
): Promise<{ remote: Remote; fingerprint: string; algorithm: string }> {
  const where = `${t.user}@${t.host}:${t.port}`;
  let presented: { fingerprint: string; algorithm: string } | undefined;
  let refused: InstallError | undefined;
  const client: SshClient = new ssh2.Client();
  await new Promise<void>((resolve, reject) => {
    client.once('ready', () => resolve());
    // (After `ready` a rejection changes nothing.)
    client.on('close', () =>
      reject(
        refused ??
          (kinds && !presented
            ? new NoSuchHostKey('closed')
            : hostError(`Cannot connect to ${where}: the connection closed during login`)),
      ),
    );
    client.on('error', (err: Error & { level?: string }) => {
      client.end();
      if (refused) reject(refused);
      // Asked for one kind of key only: a host without it hangs up before showing any.
      else if (kinds && !presented) reject(new NoSuchHostKey(err.message));
      else if (err.level === 'client-authentication')
        reject(
          hostError(`${where} refused the key: add its public key to ~${t.user}/.ssh/authorized_keys there.`),
        );
      else reject(hostError(`Cannot connect to ${where}: ${err.message}`));
    });
    client.connect({
      host: t.host.replace(/^\[(.*)\]$/, '$1'),
      port: t.port,
      username: t.user,
      readyTimeout: 20_000,
      tryKeyboard: false,
      ...t.auth,
      ...(kinds ? { algorithms: { serverHostKey: kinds } } : {}),
      hostVerifier: (key: Buffer, verify: (ok: boolean) => void) => {
        presented = { fingerprint: fingerprintOf(key), algorithm: keyAlgorithm(key) };
        const fp = presented.fingerprint;
        if (t.fingerprint !== null) {
          const ok = sameFingerprint(fp, t.fingerprint);
          if (!ok)
            refused = new HostKeyRefused(
              `Host key verification failed for ${where}: it presented ${fp} (${presented.algorithm}), not ${t.fingerprint}. Nothing was sent.`,
              presented.algorithm,
            );
          verify(ok);
          return;
        }
        const ask = hooks.confirmHostKey ?? (async () => false);
        void ask(where, fp, presented.algorithm).then(
          (ok) => {
            if (!ok)
              refused = new InstallError(
                'usage',
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
          if (err) return reject(hostError(`Cannot run a command on ${where}: ${err.message}`));
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

async function probe(remote: Remote, t: InstallTarget): Promise<HostFacts> {
  const script = `uid=$(id -u); echo "uid=$uid"; echo "user=$(id -un)"; echo "home=$HOME"
node=${t.node ? q(t.node) : '""'}
case "$node" in "~/"*) node="$HOME/\${node#\\~/}";; esac
if [ -z "$node" ]; then node=$(command -v node 2>/dev/null || bash -lc 'command -v node' 2>/dev/null || true); fi
echo "node=$node"
[ -n "$node" ] && echo "node_version=$("$node" --version 2>/dev/null)"
echo "git=$(command -v git 2>/dev/null)"
# "offline" is systemctl's word for a host where systemd is not PID 1 (a container, a chroot).
state=$(systemctl is-system-running 2>/dev/null || true)
if [ -n "$state" ] && [ "$state" != offline ]; then echo systemd=yes; else echo systemd=no; fi
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
    throw hostError(
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
  'or a tarball from https://nodejs.org/en/download — then run this again (naming its path if it is not on the PATH).';

function checkHost(f: HostFacts, where: string): void {
  if (!f.node)
    throw hostError(`No Node.js on ${where}: the agent needs Node ${MIN_NODE_MAJOR}+. ${NODE_HOWTO}`);
  const major = Number(/^v(\d+)\./.exec(f.nodeVersion)?.[1] ?? NaN);
  if (!(major >= MIN_NODE_MAJOR)) {
    throw hostError(
      `Node ${f.nodeVersion || '(unknown version)'} at ${f.node} on ${where} is too old: the agent needs Node ${MIN_NODE_MAJOR}+. ${NODE_HOWTO}`,
    );
  }
  if (!f.git)
    throw hostError(
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

function layout(t: InstallTarget, f: HostFacts): Layout {
  const unitName = `deckhand-agent-${t.name.replaceAll(':', '-')}.service`;
  const expand = (p: string) => (p.startsWith('~/') ? `${f.home}/${p.slice(2)}` : p);
  if (f.uid === 0 && f.systemd) {
    const dir = expand(t.dir ?? `/var/lib/deckhand-agent/${t.name}`);
    return {
      mode: 'system',
      dir,
      envFile: `/etc/deckhand/agent-${t.name}.env`,
      unitName,
      unitFile: `/etc/systemd/system/${unitName}`,
      runAs: 'deckhand',
    };
  }
  const dir = expand(
    t.dir ?? (f.uid === 0 ? `/var/lib/deckhand-agent/${t.name}` : `${f.home}/.deckhand-agent/${t.name}`),
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

/**
 * The systemd unit: restarted whenever it exits (a self-update exits to be started again with
 * the new file), never after exit 2 (refused for good); SIGTERM first.
 */
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
  if (r.code !== 0) throw hostError(`Could not write ${file} on the host: ${r.stderr.trim()}`);
}

async function must(remote: Remote, what: string, script: string): Promise<string> {
  const r = await remote.run(script);
  if (r.code !== 0)
    throw hostError(
      `${what} failed (exit ${r.code}): ${(r.stderr || r.stdout).trim().split('\n').slice(-5).join(' | ')}`,
    );
  return r.stdout;
}

const defaultSleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/**
 * Installs and starts the agent, and waits until it is online. Resolves with its id and version;
 * rejects with an InstallError (or whatever the InstallCoordinator threw), after removing the
 * registration if it got that far.
 */
export async function installAgent(
  t: InstallTarget,
  coordinator: InstallCoordinator,
  report: InstallReporter,
  hooks: InstallHooks = {},
): Promise<{ agentId: string; version: string }> {
  const say = (line: string) => report.say(line);
  const sleep = hooks.sleep ?? defaultSleep;
  const where = `${t.user}@${t.host}:${t.port}`;

  // The agent file first: nothing is touched on the host if the coordinator cannot serve it.
  report.step('download');
  const bundle = await coordinator.downloadAgent();

  report.step('connect');
  say(`Connecting to ${where}…`);
  const { remote, fingerprint, algorithm } = await connect(t, hooks);
  let created: { id: string } | null = null;
  let started: Layout | null = null;
  try {
    say(
      `Host key ${fingerprint} (${algorithm}) ${t.fingerprint ? 'matches the pinned fingerprint' : 'confirmed'}.`,
    );
    report.step('check');
    const facts = await probe(remote, t);
    checkHost(facts, where);
    const l = layout(t, facts);
    say(`Node ${facts.nodeVersion} at ${facts.node}, git at ${facts.git}.`);

    // Registered only once the host can run it; removed again if anything below fails.
    report.step('register');
    const registered = await coordinator.register(t.name, t.labels);
    created = { id: registered.id };
    say(`Registered agent ${t.name}${t.labels.length ? ` (labels: ${t.labels.join(', ')})` : ''}.`);

    report.step('upload');
    if (l.mode === 'system') {
      await must(
        remote,
        "Creating the user 'deckhand'",
        `id -u deckhand >/dev/null 2>&1 || useradd --system --create-home --home-dir /var/lib/deckhand-agent --shell /usr/sbin/nologin deckhand`,
      );
      // Folders above it that this creates must let deckhand through (writeRemote's umask would not).
      await must(
        remote,
        `Creating ${l.dir}`,
        `umask 022; mkdir -p ${q(l.dir)} && chown deckhand:deckhand ${q(l.dir)} && chmod 750 ${q(l.dir)}`,
      );
    }
    await writeRemote(remote, `${l.dir}/deckhand-agent.js`, bundle.code, '755');
    const env = [
      `DECKHAND_URL=${t.agentUrl}`,
      `DECKHAND_TOKEN=${registered.token}`,
      `DECKHAND_WORK_DIR=${l.dir}/work`,
      ...(t.insecure ? ['DECKHAND_INSECURE=true'] : []),
      '',
    ].join('\n');
    // The token: readable by the agent's user (or, for a system unit, by root, which hands it over).
    await writeRemote(remote, l.envFile, Buffer.from(env), '600');
    if (l.mode === 'system') {
      await must(remote, 'Handing the folder to deckhand', `chown -R deckhand:deckhand ${q(l.dir)}`);
      // Self-update writes the new file beside the old one and renames it: that takes a folder
      // the agent's own user can write, all the way down from /.
      const probeWrite = await remote.run(
        `su -s /bin/sh deckhand -c ${q(`test -w ${q(l.dir)} && test -r ${q(`${l.dir}/deckhand-agent.js`)}`)}`,
      );
      if (probeWrite.code !== 0) {
        throw hostError(
          `The user deckhand cannot write to ${l.dir} (a folder above it is closed to it), so the agent could neither run nor update itself there: choose a --dir deckhand can reach, e.g. under /var/lib/deckhand-agent.`,
        );
      }
    }
    say(
      `Uploaded deckhand-agent ${bundle.version} (${Math.round(bundle.code.length / 1024)} KiB) to ${l.dir}.`,
    );

    report.step('start');
    if (l.mode === 'nohup') {
      await writeRemote(remote, `${l.dir}/start.sh`, Buffer.from(startScript(t.name, l, facts.node)), '755');
      started = l;
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
      const unit = unitText(l, facts.node, t.name);
      await writeRemote(remote, l.unitFile!, Buffer.from(unit), '644');
      const ctl = l.mode === 'system' ? 'systemctl' : 'systemctl --user';
      started = l;
      // restart, not enable --now: a unit left running by an earlier installation of this name
      // would otherwise keep its old file and token.
      const r = await remote.run(
        `${ctl} daemon-reload && ${ctl} enable ${q(l.unitName)} 2>&1 && ${ctl} restart ${q(l.unitName)}`,
      );
      if (r.code !== 0) {
        throw hostError(
          `Starting ${l.unitName} failed (exit ${r.code}): ${lastLines(r.stderr || r.stdout, 5)}\n` +
            `${await journalTail(remote, l)}\n${unitAdvice(l)}`,
        );
      }
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

    report.step('online');
    say(`Waiting for ${t.name} to come online…`);
    const deadline = Date.now() + t.waitMs;
    for (;;) {
      const me = await coordinator.agent({ id: registered.id });
      if (me?.online) {
        say(`${t.name} is online (agent ${me.version ?? bundle.version}).`);
        return { agentId: registered.id, version: me.version ?? bundle.version };
      }
      if (Date.now() > deadline) {
        const didNot = `${t.name} did not come online within ${t.waitMs / 1000} s. Can the host reach ${t.agentUrl}?`;
        if (l.mode === 'nohup') {
          const tail = await remote.run(`tail -n 20 ${q(`${l.dir}/agent.log`)}`);
          throw hostError(`${didNot} Its log:\n${tail.stdout.trim()}`);
        }
        throw hostError(`${didNot}\n${await journalTail(remote, l)}\n${unitAdvice(l)}`);
      }
      await sleep(1_000);
    }
  } catch (err) {
    if (started) await stopStarted(remote, started, say);
    if (created) {
      // Nothing half-installed is left registered; what was written on the host stays for a look.
      await coordinator
        .unregister(created.id)
        .then(() => say(`Removed the registration of ${t.name} again.`))
        .catch(() => undefined);
    }
    throw err;
  } finally {
    remote.end();
  }
}

function lastLines(text: string, n: number): string {
  return text.trim().split('\n').slice(-n).join(' | ');
}

/** The unit's last journal lines, for a person to read what went wrong. */
async function journalTail(remote: Remote, l: Layout): Promise<string> {
  const user = l.mode === 'user' ? '--user ' : '';
  const r = await remote.run(`journalctl ${user}-u ${q(l.unitName)} -n 20 --no-pager 2>&1`);
  return `Its log (journalctl ${user}-u ${l.unitName}):\n${r.stdout.trim() || '(empty)'}`;
}

function unitAdvice(l: Layout): string {
  const ctl = l.mode === 'user' ? 'systemctl --user' : 'systemctl';
  return `Fix what the log says (see also: ${ctl} status ${l.unitName}; the files stay in ${l.unitFile} and ${l.dir}), then run the installation again.`;
}

/**
 * After a failure, stops what was started: its registration is about to be removed, so it could
 * only be refused, and a unit would do so again at every boot.
 */
async function stopStarted(remote: Remote, l: Layout, say: (line: string) => void): Promise<void> {
  if (l.mode === 'nohup') {
    await remote.run(`cd ${q(l.dir)} && [ -f agent.pid ] && kill -TERM "$(cat agent.pid)" 2>/dev/null`);
    return;
  }
  const ctl = l.mode === 'system' ? 'systemctl' : 'systemctl --user';
  const r = await remote.run(`${ctl} disable --now ${q(l.unitName)} 2>&1`);
  if (r.code === 0) say(`Stopped and disabled ${l.unitName}.`);
}

/** nohup mode: starts the agent in the background unless it runs already; its pid in agent.pid. */
function startScript(name: string, l: Layout, node: string): string {
  return `#!/bin/sh
# Starts the Deckhand agent ${name} in the background (written by 'deckhand agents install').
cd ${q(l.dir)} || exit 1
if [ -f agent.pid ] && kill -0 "$(cat agent.pid)" 2>/dev/null; then echo "already running (pid $(cat agent.pid))"; exit 0; fi
set -a; . ${q(l.envFile)}; set +a
setsid nohup ${q(node)} ${q(`${l.dir}/deckhand-agent.js`)} >> agent.log 2>&1 < /dev/null &
echo $! > agent.pid
echo "started (pid $!)"
`;
}

/** -1, 0 or 1 as version `a` is older than, the same as, or newer than `b` (major.minor.patch; a pre-release is older). */
export function compareVersions(a: string, b: string): number {
  const parse = (v: string) => {
    const m = /^v?(\d+)\.(\d+)\.(\d+)(-.+)?/.exec(v.trim());
    return m ? { n: [Number(m[1]), Number(m[2]), Number(m[3])], pre: m[4] ?? null } : null;
  };
  const x = parse(a);
  const y = parse(b);
  if (!x || !y) throw hostError(`Cannot compare agent versions '${a}' and '${b}'.`);
  for (let i = 0; i < 3; i++) if (x.n[i] !== y.n[i]) return x.n[i]! < y.n[i]! ? -1 : 1;
  if (x.pre === y.pre) return 0;
  if (x.pre === null) return 1;
  if (y.pre === null) return -1;
  return x.pre < y.pre ? -1 : 1;
}

/**
 * Upgrades an installed agent: the coordinator's agent file replaces the installed one (token and
 * settings stay), and the agent is restarted the way it was installed; an older version than the
 * installed one is refused, the same one is left alone. Resolves with the version now running.
 */
export async function upgradeAgent(
  t: InstallTarget,
  coordinator: InstallCoordinator,
  report: InstallReporter,
  hooks: InstallHooks = {},
): Promise<{ version: string; changed: boolean }> {
  const say = (line: string) => report.say(line);
  const sleep = hooks.sleep ?? defaultSleep;
  const where = `${t.user}@${t.host}:${t.port}`;
  report.step('download');
  const bundle = await coordinator.downloadAgent();
  report.step('connect');
  say(`Connecting to ${where}…`);
  const { remote, fingerprint, algorithm } = await connect(t, hooks);
  try {
    say(
      `Host key ${fingerprint} (${algorithm}) ${t.fingerprint ? 'matches the pinned fingerprint' : 'confirmed'}.`,
    );
    report.step('check');
    const facts = await probe(remote, t);
    checkHost(facts, where);
    const l = layout(t, facts);
    const file = `${l.dir}/deckhand-agent.js`;
    const head = await remote.run(`head -c 512 ${q(file)}`);
    const installed = /^\/\/ deckhand-agent (\S+):/m.exec(head.stdout)?.[1];
    if (head.code !== 0 || !installed) {
      throw hostError(
        `No agent is installed in ${l.dir} on ${where}: use 'deckhand agents install' (or name the folder with --dir).`,
      );
    }
    const order = compareVersions(bundle.version, installed);
    if (order < 0) {
      throw hostError(
        `The coordinator serves deckhand-agent ${bundle.version}, older than the ${installed} installed in ${l.dir}: an upgrade never installs an older version. Upgrade the coordinator first.`,
      );
    }
    if (order === 0) {
      say(`deckhand-agent ${installed} is installed in ${l.dir} already: nothing to do.`);
      return { version: installed, changed: false };
    }
    const me = await coordinator.agent({ name: t.name });
    if (!me) throw new InstallError('usage', `No agent named ${t.name} is registered with the coordinator.`);

    report.step('upload');
    await writeRemote(remote, file, bundle.code, '755');
    if (l.mode === 'system')
      await must(remote, 'Handing the file to deckhand', `chown deckhand:deckhand ${q(file)}`);
    say(`Replaced deckhand-agent ${installed} with ${bundle.version} in ${l.dir}.`);
    report.step('start');
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
    report.step('online');
    say(`Restarted; waiting for ${t.name} to come back with ${bundle.version}…`);
    const deadline = Date.now() + t.waitMs;
    for (;;) {
      const row = await coordinator.agent({ id: me.id });
      if (row?.online && row.version === bundle.version) {
        say(`${t.name} is online (agent ${row.version}).`);
        return { version: bundle.version, changed: true };
      }
      if (Date.now() > deadline) {
        throw hostError(
          `${t.name} did not come back online with ${bundle.version} within ${t.waitMs / 1000} s.`,
        );
      }
      await sleep(1_000);
    }
  } finally {
    remote.end();
  }
}
