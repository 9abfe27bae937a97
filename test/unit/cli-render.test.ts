// What the CLI prints: a deployment's events as lines (one host: output as is; several: each line
// prefixed and kept whole), the final line, `status` and `projects`, durations, and when colours
// and the spinner line are used.
import { describe, expect, it } from 'vitest';
import type { Deployment, DeploymentDetail, LogEntry } from '../../cli/src/api.ts';
import { formatProjects, formatStatus } from '../../cli/src/cli.ts';
import {
  DeploymentRenderer,
  fancyOutput,
  formatDuration,
  type Out,
  Screen,
  Style,
} from '../../cli/src/render.ts';

class Sink implements Out {
  text = '';
  isTTY?: boolean;
  columns?: number;
  write(s: string) {
    this.text += s;
    return true;
  }
}

const T0 = '2025-01-01T10:00:00.000Z';
const at = (ms: number) => new Date(Date.parse(T0) + ms).toISOString();

function deployment(over: Partial<Deployment> = {}): Deployment {
  return {
    id: 'd1',
    status: 'running',
    reason: null,
    commit: '0123456789abcdef0123456789abcdef01234567',
    branch: 'main',
    hosts: ['web-1'],
    started_at: T0,
    finished_at: null,
    ...over,
  };
}

function entry(over: Partial<LogEntry> = {}): LogEntry {
  return {
    id: 'e1',
    host: 'web-1',
    cmd: 'npm ci',
    status: 'running',
    exit_code: null,
    started_at: at(0),
    finished_at: null,
    ...over,
  };
}

function plain() {
  const sink = new Sink();
  const renderer = new DeploymentRenderer(new Screen(sink, { progress: false }), new Style(false));
  return { sink, renderer };
}

describe('DeploymentRenderer', () => {
  it('one host: a header, the output as it arrives, a result line; the final state with reason', () => {
    const { sink, renderer } = plain();
    renderer.handle({
      event: 'deployment',
      id: 'v1:',
      data: deployment({ status: 'queued', hosts: [], reason: 'Waiting for web-1' }),
    });
    renderer.handle({ event: 'deployment', id: 'v1:', data: deployment() });
    renderer.handle({ event: 'deployment', id: 'v1:', data: deployment() }); // unchanged: not repeated
    renderer.handle({ event: 'entry', id: 'a', data: entry() });
    renderer.handle({ event: 'output', id: 'b', data: { entry_id: 'e1', host: 'web-1', text: 'added 3 ' } });
    renderer.handle({
      event: 'output',
      id: 'c',
      data: { entry_id: 'e1', host: 'web-1', text: 'packages\nno newline' },
    });
    renderer.handle({
      event: 'entry',
      id: 'd',
      data: entry({ status: 'failed', exit_code: 1, finished_at: at(1_250) }),
    });
    renderer.handle({
      event: 'entry',
      id: 'e',
      data: entry({ id: 'e2', cmd: 'npm test', status: 'skipped', finished_at: at(1_250) }),
    });
    renderer.handle({
      event: 'entry',
      id: 'f',
      data: entry({ id: 'e2', cmd: 'npm test', status: 'skipped', finished_at: at(1_250) }),
    });
    const final = deployment({
      status: 'failed',
      reason: 'web-1: npm ci exited with 1',
      finished_at: at(75_000),
    });
    renderer.handle({ event: 'deployment', id: 'g', data: final }); // told by final()
    renderer.final(final);
    expect(sink.text).toBe(
      [
        '• queued: Waiting for web-1',
        '• running on web-1 · commit 0123456789ab (main)',
        '▶ [web-1] npm ci',
        'added 3 packages',
        'no newline',
        '✖ [web-1] failed (exit 1, 1.3s)',
        '○ [web-1] skipped: npm test',
        '✖ Deployment failed in 1m 15s: web-1: npm ci exited with 1',
        '',
      ].join('\n'),
    );
  });

  it('several hosts: output lines prefixed with the host, partial lines held until complete', () => {
    const { sink, renderer } = plain();
    renderer.handle({ event: 'deployment', id: 'x', data: deployment({ hosts: ['a', 'b'] }) });
    renderer.handle({ event: 'entry', id: 'x', data: entry({ id: 'ea', host: 'a', cmd: 'build' }) });
    renderer.handle({ event: 'entry', id: 'x', data: entry({ id: 'eb', host: 'b', cmd: 'build' }) });
    renderer.handle({ event: 'output', id: 'x', data: { entry_id: 'ea', host: 'a', text: 'one\ntw' } });
    renderer.handle({ event: 'output', id: 'x', data: { entry_id: 'eb', host: 'b', text: 'uno\n' } });
    renderer.handle({ event: 'output', id: 'x', data: { entry_id: 'ea', host: 'a', text: 'o\nthr' } });
    renderer.handle({
      event: 'entry',
      id: 'x',
      data: entry({
        id: 'ea',
        host: 'a',
        cmd: 'build',
        status: 'success',
        exit_code: 0,
        finished_at: at(20),
      }),
    });
    renderer.handle({
      event: 'entry',
      id: 'x',
      data: entry({
        id: 'eb',
        host: 'b',
        cmd: 'build',
        status: 'cancelled',
        exit_code: null,
        finished_at: at(20_500),
      }),
    });
    renderer.final(
      deployment({
        hosts: ['a', 'b'],
        status: 'cancelled',
        reason: 'Cancelled by me',
        finished_at: at(21_000),
      }),
    );
    expect(sink.text).toBe(
      [
        '• running on a, b · commit 0123456789ab (main)',
        '▶ [a] build',
        '▶ [b] build',
        '[a] one',
        '[b] uno',
        '[a] two',
        '[a] thr',
        '✔ [a] success (exit 0, 0.0s)',
        '✖ [b] cancelled (21s)',
        '✖ Deployment cancelled in 21s: Cancelled by me',
        '',
      ].join('\n'),
    );
  });

  it('renders stored logs as if streamed (a running entry: header and output so far)', () => {
    const { sink, renderer } = plain();
    const detail: DeploymentDetail = {
      success: true,
      deployment: deployment(),
      project: { id: 'p', name: 'web', branch_name: 'main' },
      logs: [
        { ...entry({ status: 'success', exit_code: 0, finished_at: at(100) }), log: 'ok\n' },
        { ...entry({ id: 'e2', cmd: 'npm run build', started_at: at(100) }), log: 'building' },
      ],
    };
    renderer.renderStored(detail);
    expect(sink.text).toBe(
      '▶ [web-1] npm ci\nok\n✔ [web-1] success (exit 0, 0.1s)\n▶ [web-1] npm run build\nbuilding',
    );
  });

  it('in colour on a terminal; the spinner line is cleared before output and not drawn over a partial line', () => {
    const sink = new Sink();
    sink.isTTY = true;
    sink.columns = 40;
    const screen = new Screen(sink, { progress: true });
    const renderer = new DeploymentRenderer(screen, new Style(true));
    renderer.handle({ event: 'deployment', id: 'x', data: deployment() });
    renderer.showProgress();
    expect(sink.text).toMatch(/\n⠋ running · .*$/);
    renderer.handle({ event: 'entry', id: 'x', data: entry() });
    // Cleared (CR + erase line), the header in colour, the spinner again with the running command.
    expect(sink.text).toContain('\r\u001b[2K\u001b[36m▶\u001b[39m \u001b[1m[web-1]\u001b[22m');
    expect(sink.text).toMatch(/\[web-1\] npm ci$/);
    sink.text = '';
    renderer.handle({ event: 'output', id: 'x', data: { entry_id: 'e1', host: 'web-1', text: 'partial' } });
    expect(sink.text).toBe('\r\u001b[2Kpartial');
    screen.close();
    expect(sink.text).toBe('\r\u001b[2Kpartial');
    // Status lines fit the terminal.
    const lines = new Sink();
    lines.isTTY = true;
    lines.columns = 30;
    const s2 = new Screen(lines, { progress: true });
    s2.setStatus(() => 'x'.repeat(100));
    s2.close();
    expect(lines.text.split('\r\u001b[2K')[0]!.length).toBeLessThanOrEqual(29);
  });
});

describe('fancyOutput', () => {
  const tty = { write: () => true, isTTY: true };
  it('only on a terminal, without NO_COLOR (non-empty), CI=true or TERM=dumb', () => {
    expect(fancyOutput(tty, {})).toBe(true);
    expect(fancyOutput({ write: () => true }, {})).toBe(false);
    expect(fancyOutput(tty, { NO_COLOR: '1' })).toBe(false);
    expect(fancyOutput(tty, { NO_COLOR: '' })).toBe(true);
    expect(fancyOutput(tty, { CI: 'true' })).toBe(false);
    expect(fancyOutput(tty, { TERM: 'dumb' })).toBe(false);
  });
});

describe('formatting', () => {
  it('durations', () => {
    expect([0, 420, 9_949, 12_400, 59_600, 185_000, 3_725_000].map(formatDuration)).toEqual([
      '0.0s',
      '0.4s',
      '9.9s',
      '12s',
      '1m 00s',
      '3m 05s',
      '1h 02m',
    ]);
    expect(formatDuration(-1)).toBe('?');
  });

  it('status: the fields, then one line per command', () => {
    const text = formatStatus(
      {
        success: true,
        deployment: deployment({
          status: 'failed',
          reason: 'web-1: exit 2',
          finished_at: at(3_000),
          trigger: 'api',
          triggered_by: 'me@example.com (token ci)',
        }),
        project: { id: 'p1', name: 'web', branch_name: 'main' },
        logs: [
          { ...entry({ status: 'failed', exit_code: 2, finished_at: at(1_500) }), log: '' },
          { ...entry({ id: 'e2', cmd: 'npm test', status: 'skipped', finished_at: at(1_500) }), log: '' },
        ],
      },
      'https://d.example/deploy/d1',
      new Style(false),
    );
    expect(text).toBe(
      [
        'Deployment  d1',
        'URL         https://d.example/deploy/d1',
        'Project     web (p1)',
        'Status      failed',
        'Reason      web-1: exit 2',
        'Commit      0123456789abcdef0123456789abcdef01234567 (branch main)',
        'Trigger     api by me@example.com (token ci)',
        'Hosts       web-1',
        `Started     ${T0}`,
        `Finished    ${at(3_000)} (took 3.0s)`,
        '',
        'Commands',
        '  [web-1]  failed   exit 2  1.5s  npm ci',
        '  [web-1]  skipped                npm test',
        '',
      ].join('\n'),
    );
  });

  it('projects: a table of name, branch, id', () => {
    expect(
      formatProjects(
        [
          { id: 'id-1', name: 'web', branch_name: 'main' },
          { id: 'id-2', name: 'api-server', branch_name: 'production' },
        ],
        new Style(false),
      ),
    ).toBe('NAME        BRANCH      ID\nweb         main        id-1\napi-server  production  id-2\n');
    expect(formatProjects([], new Style(false))).toBe('No projects yet.\n');
  });
});
