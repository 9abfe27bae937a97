// What the host has and where the agent goes on it: one probe of the host (user, Node, git,
// systemd), the check that it can run the agent (with how to get what it lacks), and from those
// facts the layout — system unit, user unit or nohup, and the folder, env file and unit file that
// go with it — plus the files written for that layout (the unit, the nohup start script) and how
// to read or undo what was started. installAgent and upgradeAgent both derive the layout here,
// so an upgrade finds exactly what an installation put there.
import type { InstallTarget } from './installer.ts';
import { hostError } from './install-error.ts';
import { q, type Remote } from './ssh-remote.ts';

export const MIN_NODE_MAJOR = 22;

export interface HostFacts {
  uid: number;
  user: string;
  home: string;
  node: string;
  nodeVersion: string;
  git: string;
  systemd: boolean;
  userSystemd: boolean;
}

export async function probe(remote: Remote, t: InstallTarget): Promise<HostFacts> {
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

export function checkHost(f: HostFacts, where: string): void {
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

export type Mode = 'system' | 'user' | 'nohup';

export interface Layout {
  mode: Mode;
  dir: string;
  envFile: string;
  unitName: string;
  unitFile: string | null;
  /** Who the agent runs as. */
  runAs: string;
}

export function layout(t: InstallTarget, f: HostFacts): Layout {
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

/** The unit's last journal lines, for a person to read what went wrong. */
export async function journalTail(remote: Remote, l: Layout): Promise<string> {
  const user = l.mode === 'user' ? '--user ' : '';
  const r = await remote.run(`journalctl ${user}-u ${q(l.unitName)} -n 20 --no-pager 2>&1`);
  return `Its log (journalctl ${user}-u ${l.unitName}):\n${r.stdout.trim() || '(empty)'}`;
}

export function unitAdvice(l: Layout): string {
  const ctl = l.mode === 'user' ? 'systemctl --user' : 'systemctl';
  return `Fix what the log says (see also: ${ctl} status ${l.unitName}; the files stay in ${l.unitFile} and ${l.dir}), then run the installation again.`;
}

/**
 * After a failure, stops what was started: its registration is about to be removed, so it could
 * only be refused, and a unit would do so again at every boot.
 */
export async function stopStarted(remote: Remote, l: Layout, say: (line: string) => void): Promise<void> {
  if (l.mode === 'nohup') {
    await remote.run(`cd ${q(l.dir)} && [ -f agent.pid ] && kill -TERM "$(cat agent.pid)" 2>/dev/null`);
    return;
  }
  const ctl = l.mode === 'system' ? 'systemctl' : 'systemctl --user';
  const r = await remote.run(`${ctl} disable --now ${q(l.unitName)} 2>&1`);
  if (r.code === 0) say(`Stopped and disabled ${l.unitName}.`);
}

/** nohup mode: starts the agent in the background unless it runs already; its pid in agent.pid. */
export function startScript(name: string, l: Layout, node: string): string {
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
