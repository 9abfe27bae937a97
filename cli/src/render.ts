// What a person (or a CI log) sees: a deployment's events as lines — a header when a command
// starts (`▶ [host] cmd`), its output, a result line when it ends — and its final state. Colours
// and a spinner line only on a terminal without NO_COLOR or CI=true; plain lines otherwise.
import type { Deployment, DeploymentDetail, LogEntry } from './api.ts';
import { isFinal } from './exit-codes.ts';
import type { StreamEvent } from './sse.ts';

export interface Out {
  write(s: string): unknown;
  isTTY?: boolean;
  columns?: number;
}

/** Colours and a progress line: only on a terminal, without NO_COLOR and not in CI. */
export function fancyOutput(stream: Out, env: NodeJS.ProcessEnv): boolean {
  if (!stream.isTTY) return false;
  if (env.NO_COLOR !== undefined && env.NO_COLOR !== '') return false;
  if (env.CI === 'true' || env.CI === '1') return false;
  if (env.TERM === 'dumb') return false;
  return true;
}

export class Style {
  readonly on: boolean;

  constructor(on: boolean) {
    this.on = on;
  }

  #sgr(open: number, close: number, s: string): string {
    return this.on ? `\u001b[${open}m${s}\u001b[${close}m` : s;
  }
  bold = (s: string) => this.#sgr(1, 22, s);
  dim = (s: string) => this.#sgr(2, 22, s);
  red = (s: string) => this.#sgr(31, 39, s);
  green = (s: string) => this.#sgr(32, 39, s);
  yellow = (s: string) => this.#sgr(33, 39, s);
  cyan = (s: string) => this.#sgr(36, 39, s);
}

/** 0.4s, 12s, 3m 05s, 1h 02m. */
export function formatDuration(ms: number): string {
  if (!Number.isFinite(ms) || ms < 0) return '?';
  if (ms < 10_000) return `${(ms / 1000).toFixed(1)}s`;
  const s = Math.round(ms / 1000);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${String(s % 60).padStart(2, '0')}s`;
  return `${Math.floor(s / 3600)}h ${String(Math.floor((s % 3600) / 60)).padStart(2, '0')}m`;
}

/** From `from` to `to` (now when null), for ISO timestamps; null when unknown. */
export function durationBetween(
  from: string | null | undefined,
  to: string | null | undefined,
): number | null {
  if (!from) return null;
  const a = Date.parse(from);
  const b = to ? Date.parse(to) : Date.now();
  return Number.isFinite(a) && Number.isFinite(b) ? Math.max(0, b - a) : null;
}

export function shortSha(commit: string | null): string {
  return commit ? commit.slice(0, 12) : '(branch head)';
}

const SYMBOL: Record<string, string> = {
  success: '✔',
  failed: '✖',
  timed_out: '✖',
  cancelled: '✖',
  abandoned: '✖',
  skipped: '○',
};

export function paintStatus(style: Style, status: string, text = status): string {
  if (status === 'success') return style.green(text);
  if (status === 'failed' || status === 'abandoned') return style.red(text);
  if (status === 'cancelled' || status === 'timed_out') return style.yellow(text);
  if (status === 'skipped') return style.dim(text);
  return style.cyan(text);
}

const SPINNER = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];

/**
 * Writes to a stream keeping track of whether the cursor is at the start of a line, with (on a
 * terminal) a spinner status line below the output, cleared before each write and redrawn after.
 */
export class Screen {
  readonly #out: Out;
  readonly #progress: boolean;
  #atLineStart = true;
  #status: (() => string | null) | null = null;
  #drawn = false;
  #frame = 0;
  #timer: NodeJS.Timeout | null = null;

  constructor(out: Out, opts: { progress: boolean }) {
    this.#out = out;
    this.#progress = opts.progress;
  }

  write(text: string): void {
    if (text === '') return;
    this.#clear();
    this.#out.write(text);
    this.#atLineStart = text.endsWith('\n');
    this.#draw();
  }

  /** A whole line, on a line of its own. */
  line(text: string): void {
    this.write(`${this.#atLineStart ? '' : '\n'}${text}\n`);
  }

  /** Ends a partial line, if any. */
  endLine(): void {
    if (!this.#atLineStart) this.write('\n');
  }

  /** The status line's text (called at each redraw); null hides it. No-op off a terminal. */
  setStatus(status: (() => string | null) | null): void {
    if (!this.#progress) return;
    this.#status = status;
    if (status && !this.#timer) {
      this.#timer = setInterval(() => {
        this.#frame = (this.#frame + 1) % SPINNER.length;
        this.#clear();
        this.#draw();
      }, 100);
      this.#timer.unref();
    }
    this.#clear();
    this.#draw();
  }

  close(): void {
    if (this.#timer) clearInterval(this.#timer);
    this.#timer = null;
    this.#status = null;
    this.#clear();
  }

  #clear(): void {
    if (this.#drawn) this.#out.write('\r\u001b[2K');
    this.#drawn = false;
  }

  #draw(): void {
    // Never over a partial output line: it would be erased at the next clear.
    if (!this.#progress || !this.#status || !this.#atLineStart) return;
    const text = this.#status();
    if (!text) return;
    const width = Math.max(20, (this.#out.columns ?? 80) - 1);
    const line = `${SPINNER[this.#frame]} ${text.replace(/\s+/g, ' ')}`;
    this.#out.write(line.length > width ? `${line.slice(0, width - 1)}…` : line);
    this.#drawn = true;
  }
}

interface EntryState {
  host: string;
  cmd: string;
  started: boolean;
  ended: boolean;
  partial: string;
}

const MAX_PARTIAL = 8192;

/**
 * Turns a deployment's events (or its stored logs) into lines. With several hosts, output lines
 * are prefixed with `[host]` (and held until complete, so hosts' lines do not mix); with one host
 * output passes through as it arrives.
 */
export class DeploymentRenderer {
  readonly #screen: Screen;
  readonly #style: Style;
  #deployment: Deployment | null = null;
  #lastState = '';
  readonly #entries = new Map<string, EntryState>();

  constructor(screen: Screen, style: Style) {
    this.#screen = screen;
    this.#style = style;
  }

  /** Shows the spinner line (on a terminal) while following a deployment. */
  showProgress(): void {
    this.#screen.setStatus(() => this.#statusLine());
  }

  get deployment(): Deployment | null {
    return this.#deployment;
  }

  get #multiHost(): boolean {
    return (this.#deployment?.hosts.length ?? 0) > 1;
  }

  handle(e: StreamEvent): void {
    switch (e.event) {
      case 'deployment':
        return this.#onDeployment(e.data as Deployment);
      case 'entry':
        return this.#onEntry(e.data as LogEntry);
      case 'output': {
        const o = e.data as { entry_id: string; host: string; text: string };
        return this.#onOutput(o.entry_id, o.host, o.text);
      }
      case 'end':
        this.#deployment = e.data as Deployment;
        return;
    }
  }

  /** The stored logs of a deployment, entry by entry (as if streamed). */
  renderStored(detail: DeploymentDetail): void {
    this.#deployment = detail.deployment;
    for (const entry of detail.logs) {
      this.#onEntry(entry);
      if (entry.log) this.#onOutput(entry.id, entry.host, entry.log);
      if (entry.finished_at !== null && entry.status !== 'skipped') this.#onEntry(entry);
    }
  }

  /** The closing line: how the deployment ended, in how long, and why. */
  final(d: Deployment): void {
    this.#deployment = d;
    this.#flushAll();
    const s = this.#style;
    const took = durationBetween(d.started_at, d.finished_at);
    const symbol = SYMBOL[d.status] ?? '•';
    const head = paintStatus(s, d.status, `${symbol} Deployment ${d.status}`);
    const reason = d.reason ? `: ${d.reason}` : '';
    this.#screen.line(`${head}${took === null ? '' : ` in ${formatDuration(took)}`}${reason}`);
  }

  #onDeployment(d: Deployment): void {
    this.#deployment = d;
    const state = `${d.status}\u0000${d.reason ?? ''}\u0000${d.commit ?? ''}\u0000${d.hosts.join(',')}`;
    if (state === this.#lastState) return;
    this.#lastState = state;
    // The end is told by final(), once every output line is out.
    if (isFinal(d.status)) return;
    const s = this.#style;
    if (d.status === 'queued') {
      this.#screen.line(`${s.dim('•')} queued${d.reason ? `: ${d.reason}` : ''}`);
    } else if (d.status === 'running') {
      const hosts = d.hosts.length ? ` on ${d.hosts.join(', ')}` : '';
      const commit = d.commit ? ` · commit ${shortSha(d.commit)}` : '';
      this.#screen.line(`${s.dim('•')} running${hosts}${commit} (${d.branch})`);
    } else {
      this.#screen.line(`${s.dim('•')} ${d.status}${d.reason ? `: ${d.reason}` : ''}`);
    }
  }

  #onEntry(e: LogEntry): void {
    const s = this.#style;
    let st = this.#entries.get(e.id);
    if (!st) {
      st = { host: e.host, cmd: e.cmd, started: false, ended: false, partial: '' };
      this.#entries.set(e.id, st);
    }
    if (st.ended) return;
    // The stream tells each entry twice: when it starts and when it ended (both as it is now).
    if (!st.started) {
      st.started = true;
      if (e.status === 'skipped') {
        st.ended = true;
        this.#screen.line(s.dim(`○ [${e.host}] skipped: ${e.cmd}`));
        return;
      }
      this.#screen.line(`${s.cyan('▶')} ${s.bold(`[${e.host}]`)} ${s.bold(e.cmd)}`);
      return;
    }
    st.ended = true;
    this.#flush(st);
    const took = durationBetween(e.started_at, e.finished_at);
    const details = [
      e.exit_code === null ? null : `exit ${e.exit_code}`,
      took === null ? null : formatDuration(took),
    ]
      .filter((x) => x !== null)
      .join(', ');
    const symbol = SYMBOL[e.status] ?? '•';
    this.#screen.line(
      `${paintStatus(s, e.status, symbol)} [${e.host}] ${paintStatus(s, e.status, e.status)}${details ? ` (${details})` : ''}`,
    );
  }

  #onOutput(entryId: string, host: string, text: string): void {
    if (!this.#multiHost) {
      this.#screen.write(text);
      return;
    }
    let st = this.#entries.get(entryId);
    if (!st) {
      st = { host, cmd: '', started: true, ended: false, partial: '' };
      this.#entries.set(entryId, st);
    }
    const all = st.partial + text;
    const cut = all.lastIndexOf('\n');
    if (cut === -1) {
      st.partial = all;
      if (st.partial.length > MAX_PARTIAL) this.#flush(st);
      return;
    }
    st.partial = all.slice(cut + 1);
    this.#writeLines(st.host, all.slice(0, cut));
  }

  #writeLines(host: string, text: string): void {
    const prefix = this.#style.dim(`[${host}]`);
    this.#screen.line(
      text
        .split('\n')
        .map((l) => `${prefix} ${l}`)
        .join('\n'),
    );
  }

  #flush(st: EntryState): void {
    if (st.partial === '') return;
    const rest = st.partial;
    st.partial = '';
    this.#writeLines(st.host, rest);
  }

  #flushAll(): void {
    for (const st of this.#entries.values()) this.#flush(st);
  }

  #statusLine(): string | null {
    const d = this.#deployment;
    if (!d || isFinal(d.status)) return null;
    const took = durationBetween(d.started_at, null);
    const elapsed = took === null ? '' : ` · ${formatDuration(took)}`;
    if (d.status === 'queued') return `queued${elapsed}${d.reason ? ` · ${d.reason}` : ''}`;
    const running = [...this.#entries.values()]
      .filter((e) => e.started && !e.ended)
      .map((e) => `[${e.host}] ${e.cmd}`);
    return `${d.status}${elapsed}${running.length ? ` · ${running.join(' · ')}` : ''}`;
  }
}
