// The bash that runs on an SSH target, the same steps an agent takes (agent/src/executor/):
// checkout (clone/fetch/checkout, or a git worktree per release), commands, the release switch
// with pruning, and the switch back after a failed health check. Everything runs under one
// wrapper (STEP_WRAPPER) that reads its step from stdin — folder, script, environment — so no
// secret is ever on a command line the host's `ps` shows, starts the script in a session of its
// own (setsid: its own process group), and watches stdin: when it ends (the coordinator stops
// the step, or the connection drops) the whole group gets SIGTERM, then SIGKILL after the
// grace, exactly as an agent stops a step. A connection that drops silently (packets lost,
// nothing closed) never ends stdin — sshd notices only with ClientAliveInterval, which is off by
// default — so the coordinator also sends a heartbeat on stdin, and a wrapper that hears nothing
// for the silence limit stops the group the same way. A host needs sshd, bash, git and
// coreutils/util-linux.

/** Single-quotes a word for a POSIX shell. */
export function shellQuote(word: string): string {
  return `'${word.replaceAll("'", `'\\''`)}'`;
}

/**
 * Where projects live on the host: `~/deckhand`, or DECKHAND_WORK_DIR when the host's sshd sets
 * it (`SetEnv DECKHAND_WORK_DIR=/srv/deckhand` in sshd_config). Step folders are relative to it.
 */
export const SSH_WORK_DIR = 'deckhand';

/** Lines on the wrapper's stderr that carry something for the runner rather than the log. */
export const ERROR_MARK = 'deckhand-error: ';
export const PREVIOUS_MARK = 'deckhand-previous: ';

/** What the coordinator writes to a running step's stdin every heartbeat: an empty field. */
export const HEARTBEAT = Buffer.from('\0');

/**
 * Reads from stdin, NUL-separated: the folder to run in (relative to the work folder, which is
 * fixed before the step's environment can change HOME), the script, then NAME=value pairs up to
 * an empty field; after that only heartbeats (HEARTBEAT). $1 is the kill grace in tenths of a
 * second, $3 the silence limit in seconds: no heartbeat for that long is a lost connection, and
 * stops the step as the end of stdin does. With $2 = `markers` the script
 * (one of Deckhand's own, never a project command) may write ERROR_MARK / PREVIOUS_MARK lines to
 * fd 4. stdout carries the script's output (stdout and stderr merged in order, as an agent merges
 * them); the wrapper's stderr carries only complaints (ERROR_MARK) and markers. Exits with the
 * script's status.
 */
const STEP_WRAPPER = `set -u
work="\${DECKHAND_WORK_DIR:-$HOME/${SSH_WORK_DIR}}"
IFS= read -r -d '' dir || { echo '${ERROR_MARK}no step was received' >&2; exit 254; }
IFS= read -r -d '' script || { echo '${ERROR_MARK}no step was received' >&2; exit 254; }
while IFS= read -r -d '' kv; do
  [ -z "$kv" ] && break
  export "$kv"
done
mkdir -p -- "$work" || { printf '${ERROR_MARK}cannot create the work folder %s\\n' "$work" >&2; exit 254; }
cd -- "$work/$dir" 2>/dev/null || { printf '${ERROR_MARK}the project folder %s does not exist\\n' "$work/$dir" >&2; exit 254; }
command -v setsid >/dev/null 2>&1 || { echo '${ERROR_MARK}setsid (util-linux) is missing on the host' >&2; exit 254; }
exec 3<&0
if [ "\${2-}" = markers ]; then setsid bash --norc -c "$script" 4>&2 2>&1 & else setsid bash --norc -c "$script" 2>&1 & fi
pid=$!
{
  trap 'exit 0' USR1
  # Ends on EOF (status 1) and on silence (read -t: above 128) alike.
  while IFS= read -r -t "$3" -d '' _; do :; done
  trap '' USR1
  kill -TERM -- "-$pid" 2>/dev/null
  i=0
  while [ "$i" -lt "$1" ] && kill -0 -- "-$pid" 2>/dev/null; do sleep 0.1; i=$((i+1)); done
  kill -KILL -- "-$pid" 2>/dev/null
} <&3 >/dev/null 2>&1 &
watch=$!
exec 3<&-
wait "$pid"
code=$?
kill -USR1 "$watch" 2>/dev/null
# A USR1 that lands before the watcher's trap is set kills it by the signal; bash would report
# that death ("User defined signal 1") on stderr, which is not the step's to show.
wait "$watch" 2>/dev/null
exit "$code"
`;

/**
 * The command line sshd hands to the login shell (any POSIX shell): bash with the wrapper. bash
 * started by sshd reads ~/.bashrc even when not interactive (Debian builds it so); `--norc` here
 * and for the step's own bash keeps that to the login shell's one read, and a step's bash sees
 * what an agent's would.
 */
export function wrapperCommand(graceMs: number, markers: boolean, silenceMs: number): string {
  const tenths = Math.max(1, Math.ceil(graceMs / 100));
  const silence = Math.max(1, Math.ceil(silenceMs / 1000));
  return `exec bash --norc -c ${shellQuote(STEP_WRAPPER)} deckhand-step ${tenths} ${markers ? 'markers' : 'plain'} ${silence}`;
}

/** What the wrapper reads from stdin for one step. */
export function stepInput(dir: string, script: string, env: Record<string, string>): Buffer {
  const fields = [dir, script];
  for (const [name, value] of Object.entries(env)) {
    // Environment values cannot hold NUL bytes on any host; names are checked by the API.
    fields.push(`${name}=${value.replaceAll('\0', '')}`);
  }
  fields.push('');
  return Buffer.from(fields.map((f) => `${f}\0`).join(''));
}

export interface CheckoutScriptInput {
  projectName: string;
  projectId: string;
  url: string;
  commit: string;
  /** With releases: the release (deployment id) to build as a worktree. */
  release: string | null;
  /** Deploy key given: written to a key file for ssh; its text comes in DECKHAND_SSH_KEY. */
  withKey: boolean;
  /** The forge's known_hosts lines come in DECKHAND_KNOWN_HOSTS. */
  withKnownHosts: boolean;
}

/** A URL as it may appear in the log: without a password or token in it. */
function redactUrl(url: string): string {
  return url.replace(/^([a-z][a-z0-9+.-]*:\/\/)[^/@]*@/i, '$1***@');
}

/**
 * Step 0: the project's folder at exactly the deployment's commit, as the agent does it
 * (agent/src/executor/checkout-step.ts): clone once without checkout, fetch every branch, check
 * the commit out detached and forcibly — or, with releases, add it as `releases/<id>`, a worktree
 * of `repo/`. Each git command line is echoed, so the log shows what happened. Runs in the work
 * folder with the git environment only (never the deployment's).
 */
export function checkoutScript(input: CheckoutScriptInput): string {
  const q = shellQuote;
  const lines = [
    'set -u',
    'work="$PWD"',
    `project="$work"/${q(input.projectName)}`,
    `url=${q(input.url)}`,
    `commit=${q(input.commit)}`,
    'mkdir -p "$work" || exit 1',
  ];
  if (input.withKey) {
    lines.push(
      'mkdir -p "$work/.deckhand/keys" && chmod 700 "$work/.deckhand" "$work/.deckhand/keys" || exit 1',
      `key="$work/.deckhand/keys/"${q(input.projectId)}`,
      // OpenSSH refuses a key without its final newline, and a key others can read.
      '( umask 077; printf \'%s\\n\' "${DECKHAND_SSH_KEY%$\'\\n\'}" > "$key" ) || exit 1',
      'unset DECKHAND_SSH_KEY',
      'GIT_SSH_COMMAND="ssh -i \'$key\' -o IdentitiesOnly=yes -o StrictHostKeyChecking=yes -o BatchMode=yes"',
    );
    if (input.withKnownHosts) {
      lines.push(
        '( umask 077; printf \'%s\\n\' "${DECKHAND_KNOWN_HOSTS%$\'\\n\'}" > "$key.known_hosts" ) || exit 1',
        // Only the project's known hosts count, not the machine-wide file too.
        'GIT_SSH_COMMAND="$GIT_SSH_COMMAND -o UserKnownHostsFile=\'$key.known_hosts\' -o GlobalKnownHostsFile=/dev/null"',
      );
    }
    lines.push('export GIT_SSH_COMMAND');
  }
  lines.push('unset DECKHAND_KNOWN_HOSTS 2>/dev/null');
  const redacted = q(redactUrl(input.url));
  if (input.release === null) {
    lines.push('dir="$project"');
  } else {
    lines.push('dir="$project/repo"', 'mkdir -p "$project" || exit 1');
  }
  lines.push(
    'if [ ! -d "$dir/.git" ]; then',
    `  printf '$ git clone --no-checkout %s %s\\n' ${redacted} "$dir"`,
    '  git clone --no-checkout -- "$url" "$dir" || exit $?',
    'else',
    '  existing=$(git -C "$dir" remote get-url origin 2>/dev/null); has=$?',
    '  if [ "$has" -ne 0 ] || [ "$existing" != "$url" ]; then',
    '    verb=set-url; [ "$has" -ne 0 ] && verb=add',
    `    printf '$ git remote %s origin %s\\n' "$verb" ${redacted}`,
    '    git -C "$dir" remote "$verb" origin "$url" || exit $?',
    '  fi',
    'fi',
    `echo "$ git fetch --force --prune origin '+refs/heads/*:refs/remotes/origin/*'"`,
    `git -C "$dir" fetch --force --prune origin '+refs/heads/*:refs/remotes/origin/*' || exit $?`,
  );
  if (input.release === null) {
    lines.push(
      'echo "$ git checkout --force --detach $commit"',
      'exec git -C "$dir" checkout --force --detach "$commit"',
    );
  } else {
    lines.push(
      `release=${q(input.release)}`,
      'target="$project/releases/$release"',
      'mkdir -p "$project/releases" || exit 1',
      'if [ -e "$target" ]; then',
      '  if [ "$(readlink "$project/current" 2>/dev/null)" = "releases/$release" ]; then',
      `    echo "${ERROR_MARK}releases/$release exists and is the current release: not rebuilding it" >&4; exit 254`,
      '  fi',
      '  echo "removing releases/$release, left over from an earlier attempt"',
      '  rm -rf -- "$target" || exit 1',
      '  echo "$ git worktree prune"',
      '  git -C "$dir" worktree prune || exit $?',
      'fi',
      'grep -qxF -- "$release" "$project/.deckhand-releases" 2>/dev/null || echo "$release" >> "$project/.deckhand-releases"',
      'echo "$ git -C $dir worktree add --detach --force $target $commit"',
      'exec git -C "$dir" worktree add --detach --force "$target" "$commit"',
    );
  }
  return `${lines.join('\n')}\n`;
}

/**
 * The `activate` step (agent/src/executor/releases.ts): `current` switched to `releases/<id>`
 * atomically (a new symlink renamed over it), then all but the newest `keep` releases pruned —
 * oldest first: folders nobody recorded (by age), then in recorded order — never the new release
 * nor the one `current` pointed to before (a failing health check switches back to it). Where
 * `current` pointed before goes to the runner on stderr (PREVIOUS_MARK). Runs in the project folder.
 */
export function activateScript(release: string, keep: number): string {
  return `set -u
release=${shellQuote(release)}
keep=${Math.max(1, Math.floor(keep))}
target="releases/$release"
[ -d "$target" ] || { echo "${ERROR_MARK}release $release is gone ($PWD/$target does not exist)" >&4; exit 254; }
previous=""
if [ -L current ]; then previous=$(readlink current); elif [ -e current ]; then echo "${ERROR_MARK}$PWD/current is not a symlink" >&4; exit 254; fi
tmp="current.tmp-$$-$RANDOM"
ln -s "$target" "$tmp" && mv -T -f "$tmp" current || { rm -f "$tmp"; echo "${ERROR_MARK}could not switch the release" >&4; exit 254; }
printf '${PREVIOUS_MARK}%s\\n' "$previous" >&4
if [ -n "$previous" ]; then echo "current -> $target (was $previous)"; else echo "current -> $target"; fi
recorded=()
if [ -f .deckhand-releases ]; then while IFS= read -r r; do [ -n "$r" ] && recorded+=("$r"); done < .deckhand-releases; fi
all=()
while IFS= read -r r; do
  [ -d "releases/$r" ] || continue
  found=0; for x in "\${recorded[@]}"; do [ "$x" = "$r" ] && found=1 && break; done
  [ "$found" -eq 0 ] && all+=("$r")
done < <(ls -1tr releases)
for r in "\${recorded[@]}"; do [ -d "releases/$r" ] && all+=("$r"); done
count=$(( \${#all[@]} - keep ))
spared="\${previous##*/}"
pruned=()
i=0
for r in "\${all[@]}"; do
  [ "$i" -ge "$count" ] && break
  i=$((i+1))
  [ "$r" = "$release" ] && continue
  [ -n "$spared" ] && [ "$r" = "$spared" ] && continue
  rm -rf -- "releases/$r" && pruned+=("$r") && echo "removed releases/$r (keeping the newest $keep)"
done
if [ "\${#pruned[@]}" -gt 0 ]; then
  : > .deckhand-releases.tmp
  for r in "\${recorded[@]}"; do
    keepit=1; for p in "\${pruned[@]}"; do [ "$p" = "$r" ] && keepit=0 && break; done
    [ "$keepit" -eq 1 ] && echo "$r" >> .deckhand-releases.tmp
  done
  mv -f .deckhand-releases.tmp .deckhand-releases
  [ -d repo/.git ] && git -C repo worktree prune 2>/dev/null
else
  n=\${#all[@]}; s=s; [ "$n" -eq 1 ] && s=
  echo "nothing to prune ($n release$s, keeping $keep)"
fi
exit 0
`;
}

/** After a failed health check: `current` back to where it pointed before (null: nowhere). Runs in the project folder. */
export function switchBackScript(previous: string | null): string {
  if (previous === null || previous === '') {
    return `echo 'no release was current before this one: current stays where it is'\n`;
  }
  const p = shellQuote(previous);
  return `tmp="current.tmp-$$-$RANDOM"
if ln -s ${p} "$tmp" && mv -T -f "$tmp" current; then echo "switched current back to "${p}; else rm -f "$tmp"; echo "could not switch current back to "${p}; fi
`;
}
