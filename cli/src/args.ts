// The command line: which command, its options, and the coordinator URL and API token (flags win
// over DECKHAND_URL / DECKHAND_TOKEN). Pure: nothing here touches the network or the process, so
// it is unit-tested as is. Every mistake is a UsageError (exit 64) whose message says what to do.
import { parseArgs } from 'node:util';
import { UsageError } from './exit-codes.ts';

export const COMMANDS = ['deploy', 'status', 'logs', 'cancel', 'projects', 'help'] as const;
export type CommandName = (typeof COMMANDS)[number];

const OPTIONS = {
  url: { type: 'string' },
  token: { type: 'string' },
  json: { type: 'boolean' },
  insecure: { type: 'boolean' },
  help: { type: 'boolean', short: 'h' },
  version: { type: 'boolean', short: 'V' },
  project: { type: 'string', short: 'p' },
  commit: { type: 'string', short: 'c' },
  branch: { type: 'string', short: 'b' },
  wait: { type: 'boolean', short: 'w' },
  follow: { type: 'boolean', short: 'f' },
  'cancel-on-interrupt': { type: 'boolean' },
} as const;

type OptionName = keyof typeof OPTIONS;

const GLOBAL: OptionName[] = ['url', 'token', 'json', 'insecure', 'help', 'version'];
const ALLOWED: Record<CommandName, OptionName[]> = {
  deploy: ['project', 'commit', 'branch', 'wait', 'cancel-on-interrupt'],
  status: [],
  logs: ['follow', 'cancel-on-interrupt'],
  cancel: [],
  projects: [],
  help: [],
};
/** How many positional arguments each command takes after its name. */
const POSITIONALS: Record<CommandName, { count: number; name?: string }> = {
  deploy: { count: 0 },
  status: { count: 1, name: '<deployment id>' },
  logs: { count: 1, name: '<deployment id>' },
  cancel: { count: 1, name: '<deployment id>' },
  projects: { count: 0 },
  help: { count: -1 },
};

export interface ParsedArgs {
  command: CommandName;
  /** The deployment id for status, logs and cancel; the topic for help. */
  target: string | null;
  help: boolean;
  version: boolean;
  json: boolean;
  insecure: boolean;
  url: string | null;
  token: string | null;
  project: string | null;
  commit: string | null;
  branch: string | null;
  wait: boolean;
  follow: boolean;
  cancelOnInterrupt: boolean;
}

const COMMIT = /^[0-9a-f]{7,64}$/i;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export function isUuid(s: string): boolean {
  return UUID.test(s);
}

function isCommand(s: string): s is CommandName {
  return (COMMANDS as readonly string[]).includes(s);
}

/** Parses argv (without node and the script). `deckhand` alone, `-h` and `--help` ask for help. */
export function parseCommandLine(argv: string[]): ParsedArgs {
  let parsed;
  try {
    parsed = parseArgs({ args: argv, options: OPTIONS, allowPositionals: true, strict: true });
  } catch (err) {
    // Node's messages name the option ("Unknown option '--foo'"); keep them, without the hint
    // about `--` that makes no sense here.
    const message = (err as Error).message.replace(/\. To specify a positional argument.*$/s, '');
    throw new UsageError(`${message}. See 'deckhand --help'.`);
  }
  const { values, positionals } = parsed;
  const [first, ...rest] = positionals;
  if (first === undefined) {
    if (values.version) return base('help', null, values);
    return { ...base('help', null, values), help: true };
  }
  if (!isCommand(first)) {
    throw new UsageError(
      `Unknown command '${first}'. Commands: ${COMMANDS.join(', ')}. See 'deckhand --help'.`,
    );
  }
  const command = first;
  const args = base(command, null, values);
  if (command === 'help') return { ...args, help: true, target: rest[0] ?? null };
  if (args.help) return args;

  const allowed = new Set([...GLOBAL, ...ALLOWED[command]]);
  for (const name of Object.keys(values) as OptionName[]) {
    if (!allowed.has(name)) {
      throw new UsageError(
        `'deckhand ${command}' does not take --${name}. See 'deckhand ${command} --help'.`,
      );
    }
  }
  const { count, name } = POSITIONALS[command];
  if (rest.length > count) {
    throw new UsageError(`Unexpected argument '${rest[count]}'. See 'deckhand ${command} --help'.`);
  }
  if (rest.length < count) {
    throw new UsageError(`'deckhand ${command}' needs ${name}. See 'deckhand ${command} --help'.`);
  }
  if (count === 1) {
    const id = rest[0]!;
    if (!isUuid(id))
      throw new UsageError(`Not a deployment id: '${id}' (a UUID, as 'deckhand deploy' prints it).`);
    args.target = id.toLowerCase();
  }

  if (command === 'deploy') {
    if (!args.project) throw new UsageError("'deckhand deploy' needs --project <name or id>.");
    if (args.commit !== null && !COMMIT.test(args.commit)) {
      throw new UsageError(`--commit must be a commit sha (7 to 64 hex digits), not '${args.commit}'.`);
    }
    if (args.branch !== null && args.branch.trim() === '')
      throw new UsageError('--branch must not be empty.');
    if (args.cancelOnInterrupt && !args.wait) {
      throw new UsageError('--cancel-on-interrupt only applies with --wait.');
    }
  }
  if (command === 'logs' && args.cancelOnInterrupt && !args.follow) {
    throw new UsageError('--cancel-on-interrupt only applies with --follow.');
  }
  return args;
}

function base(
  command: CommandName,
  target: string | null,
  values: { [K in OptionName]?: string | boolean },
): ParsedArgs {
  const str = (k: OptionName) => (typeof values[k] === 'string' ? (values[k] as string) : null);
  const bool = (k: OptionName) => values[k] === true;
  return {
    command,
    target,
    help: bool('help'),
    version: bool('version'),
    json: bool('json'),
    insecure: bool('insecure'),
    url: str('url'),
    token: str('token'),
    project: str('project'),
    commit: str('commit'),
    branch: str('branch'),
    wait: bool('wait'),
    follow: bool('follow'),
    cancelOnInterrupt: bool('cancel-on-interrupt'),
  };
}

export interface Connection {
  /** The coordinator's base URL, any path prefix kept, without a trailing slash. */
  baseUrl: string;
  token: string;
}

const LOOPBACK = /^(localhost|127(\.\d+){3}|\[::1\])$/;
export const API_TOKEN_PREFIX = 'dht_';
const AGENT_TOKEN_PREFIX = 'dha_';

/**
 * Where to connect and with which token: --url/--token, else DECKHAND_URL/DECKHAND_TOKEN. Refuses
 * to send the token unencrypted beyond loopback unless --insecure (or DECKHAND_INSECURE=true), as
 * the agent does. No message ever contains the token.
 */
export function resolveConnection(args: ParsedArgs, env: NodeJS.ProcessEnv): Connection {
  const rawUrl = args.url ?? env.DECKHAND_URL ?? '';
  const token = (args.token ?? env.DECKHAND_TOKEN ?? '').trim();
  if (rawUrl.trim() === '') {
    throw new UsageError(
      "No coordinator URL: pass --url <url> or set DECKHAND_URL (e.g. 'https://deploy.example.com').",
    );
  }
  let url: URL;
  try {
    url = new URL(rawUrl.trim());
  } catch {
    throw new UsageError('DECKHAND_URL / --url is not a URL (expected e.g. https://deploy.example.com).');
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw new UsageError(`The coordinator URL must be http:// or https://, not ${url.protocol}//.`);
  }
  if (url.username || url.password) {
    throw new UsageError('The coordinator URL must not carry a user name or password: use DECKHAND_TOKEN.');
  }
  const insecure = args.insecure || env.DECKHAND_INSECURE === 'true';
  if (url.protocol === 'http:' && !LOOPBACK.test(url.hostname) && !insecure) {
    throw new UsageError(
      `Refusing to send the API token unencrypted to ${url.host}: use https:// (or pass --insecure on a network you trust).`,
    );
  }
  if (token === '') {
    throw new UsageError(
      'No API token: set DECKHAND_TOKEN (or pass --token). Create one with POST /tokens {"name": "ci", "scope": "deploy"}.',
    );
  }
  if (token.startsWith(AGENT_TOKEN_PREFIX)) {
    throw new UsageError(
      'That is an agent token (dha_…); the CLI needs an API token (dht_…): create one with POST /tokens.',
    );
  }
  if (/\s/.test(token)) throw new UsageError('The API token contains white space: check DECKHAND_TOKEN.');
  url.search = '';
  url.hash = '';
  return { baseUrl: url.href.replace(/\/+$/, ''), token };
}

export const EXIT_CODES_HELP = `Exit codes:
  0   success (and: triggered without --wait; status of a queued or running deployment)
  1   the deployment failed
  2   the deployment was cancelled
  3   the deployment timed out
  64  usage or configuration error: bad arguments, no URL or token, the token refused
      (401/403), unknown project or deployment (404), a request the API rejected (400)
  69  the coordinator could not be reached or answered an error (5xx, 409, …), or the
      live event stream could not be resumed for a minute
  70  an internal error of the CLI (a bug: please report it)
  130 interrupted (Ctrl-C; 143 for SIGTERM); the deployment keeps running unless
      --cancel-on-interrupt`;

const CONNECTION_HELP = `Connection (every command):
  --url <url>        the coordinator's base URL        (or DECKHAND_URL)
  --token <token>    an API token (dht_…)               (or DECKHAND_TOKEN; prefer the
                     variable: arguments show in the process list)
  --insecure         allow plain http:// beyond loopback (or DECKHAND_INSECURE=true)
  --json             machine-readable output (see each command)
  -h, --help         this help;  -V, --version  the CLI's version

Colours and a progress line only on a terminal, without NO_COLOR and without CI=true.`;

export const HELP: Record<CommandName | 'main', string> = {
  main: `deckhand — trigger and follow Deckhand deployments

Usage:
  deckhand deploy --project <name or id> [--commit <sha>] [--branch <b>] [--wait]
  deckhand status <deployment id>
  deckhand logs <deployment id> [--follow]
  deckhand cancel <deployment id>
  deckhand projects
  deckhand agents install --host <host> --user <user> --name <name> [--labels a,b] (see 'deckhand agents --help')
  deckhand help [command]

${CONNECTION_HELP}

${EXIT_CODES_HELP}

An API token: POST /tokens {"name": "ci", "scope": "deploy"} (signed in), shown once.`,
  deploy: `deckhand deploy --project <name or id> [--commit <sha>] [--branch <b>] [--wait]

Triggers a deployment of the project and prints its id and URL.
  -p, --project <name or id>   the project (see 'deckhand projects')
  -c, --commit <sha>           deploy this commit (default: the branch head when it starts)
  -b, --branch <branch>        deploy this branch (default: the project's)
  -w, --wait                   stream the output live until the deployment ends; the exit
                               code says how it ended (0 success, 1 failed, 2 cancelled,
                               3 timed out). A dropped connection is resumed where it left off.
  --cancel-on-interrupt        with --wait: Ctrl-C (or SIGTERM) cancels the deployment, waits a
                               few seconds for the cancel to be confirmed, then exits 130.
                               Without it, Ctrl-C leaves the deployment running.
  --json                       without --wait: {"success", "deployId", "url", "project"};
                               with --wait, one JSON object a line: {"event": "triggered",
                               "data": …}, then each event ({"event", "id", "data"}: deployment,
                               entry, output, end), then {"success", "deployment", "url",
                               "exit_code"}

${CONNECTION_HELP}

${EXIT_CODES_HELP}`,
  status: `deckhand status <deployment id>

Prints the deployment's status, reason, commit, hosts, durations and each command's result.
Exit code: 0 while queued or running, else as the deployment ended (0, 1, 2, 3).
  --json   the API's answer (GET /deploy/<id>)

${CONNECTION_HELP}

${EXIT_CODES_HELP}`,
  logs: `deckhand logs <deployment id> [--follow]

Prints the stored output of each command, host by host.
  -f, --follow               stream until the deployment ends (as 'deploy --wait'); the exit
                             code then says how it ended
  --cancel-on-interrupt      with --follow: Ctrl-C cancels the deployment first
  --json                     the API's answer (GET /deploy/<id>); with --follow, one JSON
                             object per event, then the final deployment

${CONNECTION_HELP}

${EXIT_CODES_HELP}`,
  cancel: `deckhand cancel <deployment id>

Cancels a deployment: a queued one at once, a running one once its agents confirm (each
command's process group gets SIGTERM, then SIGKILL after the agent's grace).
  --json   the API's answer

${CONNECTION_HELP}

${EXIT_CODES_HELP}`,
  projects: `deckhand projects

Lists the projects: name, branch, id.
  --json   the API's answer (GET /projects)

${CONNECTION_HELP}

${EXIT_CODES_HELP}`,
  help: `deckhand help [command]

Prints the help of deckhand or of one command.`,
};

export function helpText(topic: string | null): string {
  if (topic === null) return HELP.main;
  if (!isCommand(topic))
    throw new UsageError(`Unknown command '${topic}'. Commands: ${COMMANDS.join(', ')}.`);
  return HELP[topic];
}
