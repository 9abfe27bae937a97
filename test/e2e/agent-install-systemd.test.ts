// `deckhand agents install` as root on a host where systemd runs — the path no other test reaches,
// since systemd is not PID 1 here. The SSH session's PATH starts with stand-ins for systemctl,
// journalctl and loginctl (and a useradd that records, then runs the real one): they record their
// arguments, and the stand-in systemctl runs a unit the way systemd would — ExecStart as User= and
// Group=, from WorkingDirectory=, in a clean environment plus EnvironmentFile=, started again when
// it exits (Restart=always) unless with RestartPreventExitStatus=. So the agent really runs as the
// unprivileged `deckhand` user in the layout the installer wrote: it comes online, deploys, and
// updates itself (which needs a folder it can write). Failures show the unit's journal and say what
// to do. The user `deckhand` is real (created by the installer, removed afterwards when this test
// created it), and so are the files in /etc and /var/lib, removed afterwards too.
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync, statSync } from 'node:fs';
import { chmod, copyFile, mkdir, mkdtemp, readdir, rm, rmdir, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { registeredAgents } from '../helpers/agents.ts';
import type { Client, TestCoordinator } from '../helpers/coordinator.ts';
import { createTestRepo, type TestRepo } from '../helpers/git.ts';
import { type InstallHost, runAgentsCommand, startInstallHost } from '../helpers/installer.ts';
import { freePort } from '../helpers/processes.ts';
import type { TestSshd } from '../helpers/sshd.ts';

const exec = promisify(execFile);
const SYSTEM_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

let host: InstallHost | undefined;
let coordinator: TestCoordinator | undefined;
let admin: Client;
let apiToken: string;
let sshd: TestSshd | undefined;
let repo: TestRepo | undefined;
let tmp: string;
let keyFile: string;
let fingerprint: string;
/** The stand-ins' folder (first on the session's PATH) and where they record what they did. */
let fakeBin: string;
let state: string;
/** A Node the user deckhand can run. */
let node: string;
/** Whether the user deckhand was there before (then it is left alone afterwards). */
let deckhandExisted: boolean;
let etcDeckhandExisted: boolean;
/** Agent names installed, to remove their files afterwards. */
const names: string[] = [];

const unitName = (name: string) => `deckhand-agent-${name}.service`;
const paths = (name: string) => ({
  unit: `/etc/systemd/system/${unitName(name)}`,
  env: `/etc/deckhand/agent-${name}.env`,
  dir: `/var/lib/deckhand-agent/${name}`,
});

/** systemctl: records; is-system-running says running; units run through unit-runner. */
const systemctl = (runner: string, state: string) => `#!/bin/bash
state=${state}
echo "systemctl $*" >> "$state/calls.log"
units=/etc/systemd/system
stop() {
  [ -f "$state/$1.pid" ] || return 0
  pid=$(cat "$state/$1.pid")
  kill -TERM -- "-$pid" 2>/dev/null
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL -- "-$pid" 2>/dev/null
  rm -f "$state/$1.pid"
}
start() {
  [ -f "$units/$1" ] || { echo "Failed to start $1: Unit $1 not found." >&2; return 5; }
  stop "$1"
  if [ -f "$state/fail-start" ]; then
    # A start job that fails, as systemd reports it.
    cat "$state/fail-start" >> "$state/$1.journal"
    echo "Job for $1 failed because the control process exited with error code." >&2
    echo "See \\"systemctl status $1\\" and \\"journalctl -xeu $1\\" for details." >&2
    return 1
  fi
  setsid ${runner} "$units/$1" >> "$state/$1.journal" 2>&1 < /dev/null &
  echo $! > "$state/$1.pid"
}
case "$1" in
  is-system-running) echo running ;;
  daemon-reload) ;;
  enable)
    if [ "$2" = --now ]; then start "$3"; exit; fi
    [ -f "$units/$2" ] || { echo "Failed to enable unit: Unit file $2 does not exist." >&2; exit 1; } ;;
  start|restart) start "$2" ;;
  stop) stop "$2" ;;
  disable) if [ "$2" = --now ]; then stop "$3"; fi ;;
  *) echo "stand-in systemctl: '$1' is not part of it" >&2; exit 1 ;;
esac
`;

/** Runs one unit as systemd would, restarting it like Restart=always (quickly, for the test). */
const unitRunner = `#!/bin/bash
unit=$1
get() { sed -n "s/^$1=//p" "$unit" | tail -n 1; }
user=$(get User); group=$(get Group); envfile=$(get EnvironmentFile)
wd=$(get WorkingDirectory); prevent=$(get RestartPreventExitStatus)
read -r -a cmd <<< "$(get ExecStart)"
env=(PATH=${SYSTEM_PATH})
as=()
if [ -n "$user" ]; then
  env+=("HOME=$(getent passwd "$user" | cut -d: -f6)" "USER=$user" "LOGNAME=$user")
  as=(setpriv "--reuid=$user" "--regid=\${group:-$user}" --init-groups)
  [ "$(get NoNewPrivileges)" = true ] && as+=(--no-new-privs)
fi
# systemd (as root) reads the file; the unit's user need not be able to.
if [ -n "$envfile" ]; then
  while IFS= read -r line; do case "$line" in ''|'#'*|';'*) ;; *) env+=("$line") ;; esac; done < "$envfile"
fi
while :; do
  echo "Started $(basename "$unit")."
  # The working directory is entered as the unit's user, as systemd does (status 200/CHDIR).
  "\${as[@]}" env -i "\${env[@]}" "INVOCATION_ID=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \\n')" \\
    /bin/sh -c 'cd "$1" || exit 200; shift; exec "$@"' sh "$wd" "\${cmd[@]}"
  code=$?
  echo "$(basename "$unit"): Main process exited, code=exited, status=$code"
  [ "$code" = "$prevent" ] && exit "$code"
  sleep 0.5
done
`;

const runInstall = (args: string[]) => runAgentsCommand('install', args, coordinator!.url, apiToken);

const installArgs = (name: string, wait = 30) => [
  '--host',
  '127.0.0.1',
  '--port',
  String(sshd!.port),
  '--user',
  sshd!.user,
  '--key',
  keyFile,
  '--host-key-fingerprint',
  fingerprint,
  '--name',
  name,
  '--labels',
  name,
  '--node',
  node,
  '--wait-seconds',
  String(wait),
];

const calls = () =>
  existsSync(join(state, 'calls.log'))
    ? readFileSync(join(state, 'calls.log'), 'utf8').trim().split('\n')
    : [];
const journal = (name: string) => {
  const file = join(state, `${unitName(name)}.journal`);
  return existsSync(file) ? readFileSync(file, 'utf8') : '';
};
const unitPid = (name: string) => {
  const file = join(state, `${unitName(name)}.pid`);
  return existsSync(file) ? Number(readFileSync(file, 'utf8').trim()) : null;
};

async function uidOf(user: string): Promise<number | null> {
  return exec('id', ['-u', user]).then(
    (r) => Number(r.stdout.trim()),
    () => null,
  );
}

const agents = () => registeredAgents(admin);

async function until<T>(what: string, check: () => Promise<T | undefined>, ms = 30_000): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = await check();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`${what} did not happen within ${ms / 1000} s`);
    await new Promise((r) => setTimeout(r, 250));
  }
}

/** Stops a unit's runner and agent (their process group), as the stand-in systemctl would. */
async function stopUnit(name: string): Promise<void> {
  const pid = unitPid(name);
  if (pid === null) return;
  try {
    process.kill(-pid, 'SIGTERM');
  } catch {
    return;
  }
  for (let i = 0; i < 100; i++) {
    try {
      process.kill(pid, 0);
    } catch {
      return;
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  try {
    process.kill(-pid, 'SIGKILL');
  } catch {
    // gone meanwhile
  }
}

beforeAll(async () => {
  tmp = await mkdtemp(join(tmpdir(), 'deckhand-install-systemd-'));
  // The unit's user reaches Node and the test's git forge through here.
  await chmod(tmp, 0o755);
  deckhandExisted = (await uidOf('deckhand')) !== null;
  etcDeckhandExisted = existsSync('/etc/deckhand');

  node = process.execPath;
  const reachable = await exec('setpriv', [
    '--reuid=65534',
    '--regid=65534',
    '--clear-groups',
    node,
    '--version',
  ]).then(
    () => true,
    () => false,
  );
  if (!reachable) {
    // Node lives somewhere only root reaches (a checkout under /root): a copy the unit's user can run.
    node = join(tmp, 'node', 'node');
    await mkdir(dirname(node), { mode: 0o755 });
    await copyFile(process.execPath, node);
    await chmod(node, 0o755);
  }

  fakeBin = join(tmp, 'fake-bin');
  state = join(tmp, 'systemd-state');
  await mkdir(fakeBin, { mode: 0o755 });
  await mkdir(state);
  const runner = join(fakeBin, 'unit-runner');
  const scripts: Record<string, string> = {
    systemctl: systemctl(runner, state),
    'unit-runner': unitRunner,
    journalctl: `#!/bin/bash
echo "journalctl $*" >> ${state}/calls.log
unit=; lines=10
while [ $# -gt 0 ]; do case "$1" in -u) unit=$2; shift ;; -n) lines=$2; shift ;; esac; shift; done
[ -f "${state}/$unit.journal" ] || { echo "-- No entries --"; exit 0; }
tail -n "$lines" "${state}/$unit.journal"
`,
    loginctl: `#!/bin/bash\necho "loginctl $*" >> ${state}/calls.log\n`,
    useradd: `#!/bin/bash\necho "useradd $*" >> ${state}/calls.log\nexec /usr/sbin/useradd "$@"\n`,
  };
  for (const [name, text] of Object.entries(scripts)) {
    await writeFile(join(fakeBin, name), text, { mode: 0o755 });
  }

  host = await startInstallHost(tmp, {
    keyComment: 'deckhand-installer-systemd-test',
    extraConfig: [`SetEnv PATH=${fakeBin}:${SYSTEM_PATH}`],
  });
  ({ coordinator, admin, apiToken, sshd, keyFile, fingerprint } = host);
  repo = await createTestRepo();
  await chmod(dirname(repo.url), 0o755);
  await repo.commit({ 'app.txt': 'installed as a unit\n' }, 'first');
}, 120_000);

afterAll(async () => {
  for (const name of names) await stopUnit(name);
  for (const name of names) {
    const p = paths(name);
    await rm(p.unit, { force: true });
    await rm(p.env, { force: true });
    await rm(p.dir, { recursive: true, force: true });
  }
  if (!etcDeckhandExisted && existsSync('/etc/deckhand') && (await readdir('/etc/deckhand')).length === 0)
    await rmdir('/etc/deckhand');
  if (!deckhandExisted && (await uidOf('deckhand')) !== null) {
    await exec('userdel', ['--remove', 'deckhand']).catch(() => undefined);
  }
  await host?.close();
  await repo?.remove();
  await rm(tmp, { recursive: true, force: true });
}, 60_000);

describe('deckhand agents install, as root where systemd runs', () => {
  let name: string;

  it('reaches the stand-ins: the session finds them first on its PATH', async () => {
    const { stdout } = await exec('ssh', [
      '-i',
      keyFile,
      '-p',
      String(sshd!.port),
      '-o',
      'BatchMode=yes',
      '-o',
      `UserKnownHostsFile=${join(tmp, 'known_hosts')}`,
      '-o',
      'StrictHostKeyChecking=no',
      `${sshd!.user}@127.0.0.1`,
      'command -v systemctl journalctl loginctl useradd',
    ]);
    expect(stdout.trim().split('\n')).toEqual(
      ['systemctl', 'journalctl', 'loginctl', 'useradd'].map((c) => join(fakeBin, c)),
    );
  });

  it('writes a unit running as deckhand, enables and starts it; the agent comes online and deploys', async () => {
    name = `unit-${randomBytes(3).toString('hex')}`;
    names.push(name);
    const p = paths(name);
    const res = await runInstall(installArgs(name));
    expect(res.code, `${res.stdout}\n${res.stderr}\n${journal(name)}`).toBe(0);
    expect(res.stdout).toContain(`Installed and started ${p.unit} (systemctl status ${unitName(name)}).`);
    expect(res.stdout).toMatch(new RegExp(`${name} is online \\(agent \\d+\\.\\d+\\.\\d+\\)\\.\\n$`));
    expect(res.stdout + res.stderr).not.toMatch(/dha_/);

    // What ran on the host, in order (and no loginctl: lingering is for user units).
    const expected = [
      'systemctl is-system-running',
      ...(deckhandExisted
        ? []
        : [
            'useradd --system --create-home --home-dir /var/lib/deckhand-agent --shell /usr/sbin/nologin deckhand',
          ]),
      'systemctl daemon-reload',
      `systemctl enable ${unitName(name)}`,
      `systemctl restart ${unitName(name)}`,
    ];
    expect(calls()).toEqual(expected);

    // The unit: the unprivileged user, the uploaded file run by the given Node, the token's file.
    const unit = readFileSync(p.unit, 'utf8');
    const field = (key: string) =>
      unit
        .split('\n')
        .find((l) => l.startsWith(`${key}=`))
        ?.slice(key.length + 1);
    expect(field('User')).toBe('deckhand');
    expect(field('Group')).toBe('deckhand');
    expect(field('ExecStart')).toBe(`${node} ${p.dir}/deckhand-agent.js`);
    expect(field('EnvironmentFile')).toBe(p.env);
    expect(field('WorkingDirectory')).toBe(p.dir);
    expect(field('Restart')).toBe('always');
    expect(field('RestartPreventExitStatus')).toBe('2');
    expect(field('WantedBy')).toBe('multi-user.target');
    expect(statSync(p.unit).mode & 0o777).toBe(0o644);

    // The token: only root reads it (systemd hands it to the agent); the agent owns its folder.
    const deckhand = (await uidOf('deckhand'))!;
    const env = statSync(p.env);
    expect(env.mode & 0o777).toBe(0o600);
    expect(env.uid).toBe(0);
    const envText = readFileSync(p.env, 'utf8');
    expect(envText).toContain(`DECKHAND_URL=${coordinator!.url}\n`);
    expect(envText).toMatch(/^DECKHAND_TOKEN=dha_/m);
    expect(envText).toContain(`DECKHAND_WORK_DIR=${p.dir}/work\n`);
    expect(statSync(p.dir).uid).toBe(deckhand);
    expect(statSync(join(p.dir, 'deckhand-agent.js')).uid).toBe(deckhand);

    expect((await agents()).find((a) => a.name === name)).toMatchObject({ online: true, labels: [name] });

    // It runs deployments, as deckhand: the checkout in its work folder is deckhand's.
    // (The forge is a folder owned by root here; git trusts it only when told to.)
    const home = (await exec('getent', ['passwd', 'deckhand'])).stdout.split(':')[5]!;
    await exec('git', ['config', '--file', join(home, '.gitconfig'), '--add', 'safe.directory', repo!.url]);
    const project = await admin.post('/projects', {
      name: `via-${name}`,
      forge_url: repo!.url,
      commands: ['cat app.txt', 'id -un'],
      target: { agents: { labels: [name] } },
    });
    expect(project.status, project.text).toBe(201);
    const deploy = await admin.post('/deploy', { projectId: project.json.project.id });
    const detail = await until('the deployment to finish', async () => {
      const d = await admin.get(`/deploy/${deploy.json.deployId}`);
      return ['success', 'failed', 'cancelled', 'timed_out'].includes(d.json.deployment.status)
        ? d
        : undefined;
    });
    expect(detail.json.deployment.status, JSON.stringify(detail.json) + journal(name)).toBe('success');
    const output = (detail.json.logs as Array<{ log: string }>).map((l) => l.log).join('');
    expect(output).toContain('installed as a unit\n');
    expect(output).toContain('deckhand\n');
    expect(statSync(join(p.dir, 'work', `via-${name}`, 'app.txt')).uid).toBe(deckhand);
  }, 90_000);

  it('lets the agent update itself: its folder is its own, and the unit starts the new file', async () => {
    const p = paths(name);
    const file = join(p.dir, 'deckhand-agent.js');
    const served = readFileSync(file, 'utf8');
    const version = /^\/\/ deckhand-agent (\S+):/m.exec(served)![1]!;
    // An older agent in its place (as root, keeping deckhand's ownership and the mode).
    const older = served
      .replace(/^\/\/ deckhand-agent \S+:/m, '// deckhand-agent 0.0.1:')
      .replace(/\{ "version": "[^"]+" \}\.version/, '{ "version": "0.0.1" }.version');
    expect(older).toContain('{ "version": "0.0.1" }.version');
    await writeFile(file, older);
    const pidBefore = unitPid(name);
    await exec(join(fakeBin, 'systemctl'), ['restart', unitName(name)]);
    expect(unitPid(name)).not.toBe(pidBefore);

    // Offered the served file, it replaces itself and exits for systemd to start it again.
    await until(`${name} to come back with ${version}`, async () => {
      const me = (await agents()).find((a) => a.name === name);
      return me?.online && me.version === version ? me : undefined;
    });
    expect(journal(name)).toContain(`${unitName(name)}: Main process exited, code=exited, status=75`);
    expect(readFileSync(file, 'utf8')).toBe(served);
    expect(statSync(file).uid).toBe((await uidOf('deckhand'))!);
    expect((await readdir(p.dir)).filter((f) => f.includes('.update-'))).toEqual([]);
  }, 60_000);

  it('says what to do when the unit does not start, and stops it and removes the registration', async () => {
    const failing = `fail-${randomBytes(3).toString('hex')}`;
    names.push(failing);
    const unit = unitName(failing);
    await writeFile(
      join(state, 'fail-start'),
      `${unit}: Failed to execute ${node}: Exec format error\n${unit}: Main process exited, code=exited, status=203/EXEC\n`,
    );
    const before = calls().length;
    const res = await runInstall(installArgs(failing)).finally(() => rm(join(state, 'fail-start')));
    expect(res.code, res.stdout + res.stderr).toBe(1);
    expect(res.stderr).toContain(
      `Starting ${unit} failed (exit 1): Job for ${unit} failed because the control process exited with error code.`,
    );
    expect(res.stderr).toContain(
      `Its log (journalctl -u ${unit}):\n${unit}: Failed to execute ${node}: Exec format error`,
    );
    expect(res.stderr).toContain('status=203/EXEC');
    expect(res.stderr).toContain(
      `Fix what the log says (see also: systemctl status ${unit}; the files stay in ${paths(failing).unit} and ${paths(failing).dir}), then run the installation again.`,
    );
    expect(res.stdout).toContain(`Stopped and disabled ${unit}.`);
    expect(res.stdout).toContain(`Removed the registration of ${failing} again.`);
    expect(calls().slice(before)).toEqual([
      'systemctl is-system-running',
      'systemctl daemon-reload',
      `systemctl enable ${unit}`,
      `systemctl restart ${unit}`,
      `journalctl -u ${unit} -n 20 --no-pager`,
      `systemctl disable --now ${unit}`,
    ]);
    expect((await agents()).map((a) => a.name)).not.toContain(failing);
  }, 60_000);

  it('shows the journal when the agent does not come online, and stops the unit', async () => {
    const unreachable = `away-${randomBytes(3).toString('hex')}`;
    names.push(unreachable);
    const unit = unitName(unreachable);
    const closed = `http://127.0.0.1:${await freePort()}`;
    const res = await runInstall([...installArgs(unreachable, 4), '--agent-url', closed]);
    expect(res.code, res.stdout + res.stderr).toBe(1);
    expect(res.stdout).toContain(`Installed and started ${paths(unreachable).unit}`);
    expect(res.stderr).toContain(
      `${unreachable} did not come online within 4 s. Can the host reach ${closed}?`,
    );
    // The agent's own words, from the journal.
    expect(res.stderr).toContain(`Its log (journalctl -u ${unit}):\nStarted ${unit}.`);
    expect(res.stderr).toMatch(/ECONNREFUSED|connect/i);
    expect(res.stderr).toContain('then run the installation again.');
    expect(res.stdout).toContain(`Stopped and disabled ${unit}.`);
    expect(unitPid(unreachable)).toBeNull();
    expect((await agents()).map((a) => a.name)).not.toContain(unreachable);
  }, 60_000);
});
