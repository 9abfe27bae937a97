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
//
// Where things are: connecting and running commands over SSH is ssh-remote.ts; probing the host,
// the layout, the unit and the start script are host-layout.ts; InstallError is install-error.ts.
// This file keeps the public types and the two procedures, installAgent and upgradeAgent.
import ssh2 from 'ssh2';
import {
  checkHost,
  journalTail,
  layout,
  type Layout,
  probe,
  startScript,
  stopStarted,
  unitAdvice,
  unitText,
} from './host-layout.ts';
import { hostError, InstallError } from './install-error.ts';
import { connect, must, q, writeRemote } from './ssh-remote.ts';

export { MIN_NODE_MAJOR, unitText } from './host-layout.ts';
export { InstallError, type InstallErrorKind } from './install-error.ts';

export const AGENT_NAME_PATTERN = /^[A-Za-z0-9][A-Za-z0-9_.:-]{0,62}$/;
const LOOPBACK = /^(localhost|127(\.\d+){3}|\[::1\])$/;

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
