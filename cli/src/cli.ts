// The commands. `run` takes the arguments and its surroundings (streams, environment, signals) and
// returns the exit code, so tests can drive it; main.ts wires it to the process.
import { readFileSync } from 'node:fs';
import { agentsCommand } from './agents-install.ts';
import { Api, type Deployment, type DeploymentDetail, networkMessage, type Project, sleep } from './api.ts';
import { helpText, isUuid, type ParsedArgs, parseCommandLine, resolveConnection } from './args.ts';
import { CliError, EXIT, exitCodeForStatus, isFinal, UsageError } from './exit-codes.ts';
import {
  DeploymentRenderer,
  durationBetween,
  fancyOutput,
  formatDuration,
  type Out,
  paintStatus,
  Screen,
  Style,
} from './render.ts';
import { followEvents, type StreamEvent } from './sse.ts';

export const VERSION = (
  JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string }
).version;

/**
 * How long --cancel-on-interrupt waits for the cancel to be requested and confirmed, all told:
 * GitHub Actions sends SIGTERM 7.5 s after SIGINT when a run is cancelled.
 */
export const CANCEL_CONFIRM_MS = 7_000;
const EXIT_INTERNAL = 70;

export interface Io {
  stdout: Out;
  stderr: Out;
  env: NodeJS.ProcessEnv;
  /** Calls `handler` on each SIGINT/SIGTERM until the returned function is called. */
  onInterrupt(handler: (signal: NodeJS.Signals) => void): () => void;
  fetch?: typeof fetch;
  /** Overrides CANCEL_CONFIRM_MS (tests). */
  cancelConfirmMs?: number;
}

export async function run(argv: string[], io: Io): Promise<number> {
  try {
    // `agents install` has options of its own (agents-install.ts).
    if (argv[0] === 'agents') return await agentsCommand(argv.slice(1), { ...io, stdin: process.stdin });
    const args = parseCommandLine(argv);
    if (args.version) {
      io.stdout.write(`deckhand ${VERSION}\n`);
      return EXIT.success;
    }
    if (args.help) {
      io.stdout.write(`${helpText(args.command === 'help' ? args.target : args.command)}\n`);
      return EXIT.success;
    }
    const api = new Api(resolveConnection(args, io.env), io.fetch);
    switch (args.command) {
      case 'deploy':
        return await deploy(api, args, io);
      case 'status':
        return await status(api, args.target!, args, io);
      case 'logs':
        return await logs(api, args.target!, args, io);
      case 'cancel':
        return await cancel(api, args.target!, args, io);
      case 'projects':
        return await projects(api, args, io);
      case 'help':
        return EXIT.success;
    }
  } catch (err) {
    if (err instanceof CliError) {
      io.stderr.write(`deckhand: ${err.message}\n`);
      return err.exitCode;
    }
    io.stderr.write(`deckhand: internal error (a bug; please report it): ${(err as Error)?.stack ?? err}\n`);
    return EXIT_INTERNAL;
  }
}

function printJson(io: Io, value: unknown): void {
  io.stdout.write(`${JSON.stringify(value)}\n`);
}

/** The project named or identified by `ref` (exact name, or id). */
export function findProject(list: Project[], ref: string): Project | null {
  const id = isUuid(ref) ? ref.toLowerCase() : null;
  return list.find((p) => p.id === id) ?? list.find((p) => p.name === ref) ?? null;
}

async function resolveProject(api: Api, ref: string): Promise<Project> {
  const { projects: list } = await api.projects();
  const found = findProject(list, ref);
  if (found) return found;
  const names = list.map((p) => p.name);
  const known = names.length
    ? ` Projects: ${names.slice(0, 20).join(', ')}${names.length > 20 ? ', …' : ''}.`
    : ' There are no projects yet.';
  throw new UsageError(`Unknown project '${ref}'.${known}`);
}

async function deploy(api: Api, args: ParsedArgs, io: Io): Promise<number> {
  const project = await resolveProject(api, args.project!);
  const body: { projectId: string; commit?: string; branch?: string } = { projectId: project.id };
  if (args.commit) body.commit = args.commit;
  if (args.branch) body.branch = args.branch;
  const { deployId } = await api.trigger(body);
  const url = api.deploymentUrl(deployId);
  if (args.json) {
    const triggered = { success: true, deployId, url, project: { id: project.id, name: project.name } };
    if (args.wait) printJson(io, { event: 'triggered', id: null, data: triggered });
    else printJson(io, triggered);
  } else {
    io.stdout.write(`Deployment ${deployId} of ${project.name} triggered\n${url}\n`);
  }
  if (!args.wait) return EXIT.success;
  return follow(api, deployId, args, io);
}

/**
 * Streams a deployment until it ends: rendered lines (or NDJSON with --json), then the final
 * state; the exit code says how it ended. SIGINT/SIGTERM leave it running, or with
 * --cancel-on-interrupt cancel it and wait a few seconds for the confirmation; then 128 + signal.
 */
async function follow(api: Api, deployId: string, args: ParsedArgs, io: Io): Promise<number> {
  const url = api.deploymentUrl(deployId);
  const fancy = !args.json && fancyOutput(io.stdout, io.env);
  const style = new Style(fancy);
  const screen = new Screen(io.stdout, { progress: fancy });
  const renderer = args.json ? null : new DeploymentRenderer(screen, style);
  renderer?.showProgress();
  let last: Deployment | null = null;
  const notify = (message: string) => {
    if (fancy) screen.line(style.yellow(message));
    else io.stderr.write(`${message}\n`);
  };
  const onEvent = (e: StreamEvent) => {
    if (e.event === 'deployment' || e.event === 'end') last = e.data as Deployment;
    if (args.json) printJson(io, e);
    else renderer!.handle(e);
  };
  const finish = (d: Deployment) => {
    const code = exitCodeForStatus(d.status);
    if (args.json) printJson(io, { success: true, deployment: d, url, exit_code: code });
    else renderer!.final(d);
    return code;
  };

  const stop = new AbortController();
  type Outcome =
    | { kind: 'end'; deployment: Deployment }
    | { kind: 'error'; error: unknown }
    | { kind: 'signal'; signal: NodeJS.Signals }
    | { kind: 'timeout' };
  const ended: Promise<Outcome> = followEvents({
    api,
    deployId,
    signal: stop.signal,
    onEvent,
    onNotice: notify,
  }).then(
    (d) => ({ kind: 'end', deployment: d as Deployment }),
    (error: unknown) => ({ kind: 'error', error }),
  );
  const unsubscribes: Array<() => void> = [];
  const nextSignal = () =>
    new Promise<Outcome>((resolve) => {
      unsubscribes.push(io.onInterrupt((signal) => resolve({ kind: 'signal', signal })));
    });

  try {
    const first = await Promise.race([ended, nextSignal()]);
    if (first.kind === 'end') return finish(first.deployment);
    if (first.kind === 'error') throw first.error;
    if (first.kind !== 'signal') throw new Error('unreachable');
    const code = first.signal === 'SIGTERM' ? 143 : EXIT.interrupted;
    const state = (last as Deployment | null)?.status ?? 'running';

    if (!args.cancelOnInterrupt) {
      stop.abort(new Error('interrupted'));
      screen.close();
      notify(
        `Interrupted: deployment ${deployId} was not cancelled, it is still ${state} on the coordinator. ` +
          `Follow it with 'deckhand logs ${deployId} --follow', cancel it with 'deckhand cancel ${deployId}'.`,
      );
      return code;
    }

    const confirmMs = io.cancelConfirmMs ?? CANCEL_CONFIRM_MS;
    notify(`Interrupted: cancelling deployment ${deployId}… (interrupt again to stop waiting)`);
    const again = nextSignal();
    // One budget for asking and for the confirmation: CI runners kill a few seconds after SIGINT.
    const deadline = Date.now() + confirmMs;
    const gaveUp = new AbortController();
    void again.then(() => gaveUp.abort(new Error('interrupted again')));
    try {
      await api.cancel(deployId, AbortSignal.any([AbortSignal.timeout(confirmMs), gaveUp.signal]));
    } catch (err) {
      // 409: it ended meanwhile; the stream tells how. Anything else: say so and leave.
      if (!(err instanceof CliError && err.message.startsWith('409:'))) {
        stop.abort(new Error('interrupted'));
        const why = gaveUp.signal.aborted
          ? 'interrupted again'
          : err instanceof CliError
            ? err.message
            : networkMessage(err);
        notify(`Could not cancel deployment ${deployId} (${why}); it may still be running.`);
        return code;
      }
    }
    const timeout = sleep(Math.max(0, deadline - Date.now())).then((): Outcome => ({ kind: 'timeout' }));
    const outcome = await Promise.race([ended, again, timeout]);
    if (outcome.kind === 'end') {
      finish(outcome.deployment);
      if (outcome.deployment.status !== 'cancelled') {
        notify(`Deployment ${deployId} ended ${outcome.deployment.status} before the cancel took effect.`);
      }
      return code;
    }
    stop.abort(new Error('interrupted'));
    notify(
      `Cancel requested; deployment ${deployId} has not confirmed it yet — the coordinator completes it ` +
        `('deckhand status ${deployId}' shows when).`,
    );
    return code;
  } finally {
    for (const u of unsubscribes) u();
    stop.abort(new Error('done'));
    screen.close();
  }
}

async function status(api: Api, id: string, args: ParsedArgs, io: Io): Promise<number> {
  const detail = await api.deployment(id);
  if (args.json) printJson(io, detail);
  else
    io.stdout.write(formatStatus(detail, api.deploymentUrl(id), new Style(fancyOutput(io.stdout, io.env))));
  return exitCodeForStatus(detail.deployment.status);
}

/** `deckhand status` as text: the deployment's fields, then one line per command. */
export function formatStatus(detail: DeploymentDetail, url: string, style: Style): string {
  const d = detail.deployment;
  const took = durationBetween(d.started_at, d.finished_at);
  const rows: Array<[string, string]> = [
    ['Deployment', d.id],
    ['URL', url],
    ['Project', `${detail.project.name} (${detail.project.id})`],
    ['Status', paintStatus(style, d.status)],
  ];
  if (d.reason) rows.push(['Reason', d.reason]);
  rows.push(['Commit', `${d.commit ?? '(not resolved yet)'} (branch ${d.branch})`]);
  if (d.trigger) rows.push(['Trigger', `${d.trigger}${d.triggered_by ? ` by ${d.triggered_by}` : ''}`]);
  rows.push(['Hosts', d.hosts.length ? d.hosts.join(', ') : '(none yet)']);
  rows.push(['Started', d.started_at]);
  rows.push(
    isFinal(d.status)
      ? ['Finished', `${d.finished_at ?? '?'}${took === null ? '' : ` (took ${formatDuration(took)})`}`]
      : ['Elapsed', took === null ? '?' : formatDuration(took)],
  );
  const width = Math.max(...rows.map(([k]) => k.length));
  let out = rows.map(([k, v]) => `${k.padEnd(width)}  ${v}`).join('\n') + '\n';
  if (detail.logs.length) {
    const steps = detail.logs.map((e) => {
      const t = durationBetween(e.started_at, e.finished_at);
      return [
        `[${e.host}]`,
        e.status,
        e.exit_code === null ? '' : `exit ${e.exit_code}`,
        e.status === 'skipped' || t === null ? '' : formatDuration(t),
        e.cmd,
      ];
    });
    const w = [0, 1, 2, 3].map((i) => Math.max(...steps.map((s) => s[i]!.length)));
    out += '\nCommands\n';
    for (const s of steps) {
      const [host, st, exit, time, cmd] = s as [string, string, string, string, string];
      out += `  ${host.padEnd(w[0]!)}  ${paintStatus(style, st, st.padEnd(w[1]!))}  ${exit.padEnd(w[2]!)}  ${time.padStart(w[3]!)}  ${cmd}\n`;
    }
  }
  return out.replace(/ +\n/g, '\n');
}

async function logs(api: Api, id: string, args: ParsedArgs, io: Io): Promise<number> {
  if (args.follow) return follow(api, id, args, io);
  const detail = await api.deployment(id);
  if (args.json) {
    printJson(io, detail);
    return EXIT.success;
  }
  const style = new Style(fancyOutput(io.stdout, io.env));
  const screen = new Screen(io.stdout, { progress: false });
  const renderer = new DeploymentRenderer(screen, style);
  renderer.renderStored(detail);
  if (isFinal(detail.deployment.status)) renderer.final(detail.deployment);
  else {
    screen.endLine();
    io.stderr.write(
      `Deployment ${id} is ${detail.deployment.status}: 'deckhand logs ${id} --follow' streams the rest.\n`,
    );
  }
  return EXIT.success;
}

async function cancel(api: Api, id: string, args: ParsedArgs, io: Io): Promise<number> {
  const res = await api.cancel(id);
  if (args.json) printJson(io, res);
  else if (res.deployment.status === 'cancelled') io.stdout.write(`Deployment ${id} cancelled.\n`);
  else {
    io.stdout.write(
      `Cancel requested: deployment ${id} is ${res.deployment.status}; it ends cancelled once its agents confirm.\n`,
    );
  }
  return EXIT.success;
}

/** `deckhand projects` as a table: name, branch, id. */
export function formatProjects(list: Project[], style: Style): string {
  if (list.length === 0) return 'No projects yet.\n';
  const rows = [['NAME', 'BRANCH', 'ID'], ...list.map((p) => [p.name, p.branch_name, p.id])];
  const w = [0, 1].map((i) => Math.max(...rows.map((r) => r[i]!.length)));
  return rows
    .map((r, i) => {
      const line = `${r[0]!.padEnd(w[0]!)}  ${r[1]!.padEnd(w[1]!)}  ${r[2]}`;
      return i === 0 ? style.bold(line) : line;
    })
    .join('\n')
    .concat('\n');
}

async function projects(api: Api, args: ParsedArgs, io: Io): Promise<number> {
  const res = await api.projects();
  if (args.json) printJson(io, res);
  else io.stdout.write(formatProjects(res.projects, new Style(fancyOutput(io.stdout, io.env))));
  return EXIT.success;
}
