// The deployment page's log, built from the same events the live stream sends
// (modules/deployment/event-stream.ts): per host, one section per command with its output already
// rendered from ANSI to escaped HTML. The page's script continues from `cursor` with the live
// stream, so what is on the page and what arrives later neither overlap nor leave a gap.
import type { StreamEvent } from '../modules/deployment/event-stream.ts';
import { AnsiRenderer, type AnsiState } from '../public/ansi.js';

export interface LogStep {
  id: string;
  host: string;
  seq: number;
  cmd: string;
  status: string;
  exit_code: number | null;
  started_at: string;
  finished_at: string | null;
  /** Rendered output (escaped HTML). */
  html: string;
  /** Where the ANSI renderer stopped (colours, a cut escape sequence), for the live script. */
  ansi: AnsiState;
}

export interface LogView {
  hosts: Array<{ host: string; steps: LogStep[] }>;
  /** The live stream's resume cursor after everything here. */
  cursor: string;
  /** Whether the stream had ended: nothing more will come. */
  ended: boolean;
}

interface EntryData {
  id: string;
  host: string;
  seq: number;
  cmd: string;
  status: string;
  exit_code: number | null;
  started_at: string;
  finished_at: string | null;
}

export function buildLogView(hostOrder: string[], events: StreamEvent[], ended: boolean): LogView {
  const steps = new Map<
    string,
    { step: Omit<LogStep, 'html' | 'ansi'>; parts: string[]; ansi: AnsiRenderer }
  >();
  let cursor = 'v1:';
  for (const e of events) {
    cursor = e.id;
    if (e.event === 'entry') {
      const d = e.data as EntryData;
      const known = steps.get(d.id);
      const step = {
        id: d.id,
        host: d.host,
        seq: d.seq,
        cmd: d.cmd,
        status: d.status,
        exit_code: d.exit_code,
        started_at: d.started_at,
        finished_at: d.finished_at,
      };
      if (known) known.step = step;
      else steps.set(d.id, { step, parts: [], ansi: new AnsiRenderer() });
    } else if (e.event === 'output') {
      const d = e.data as { entry_id: string; text: string };
      const s = steps.get(d.entry_id);
      if (s) s.parts.push(s.ansi.push(d.text));
    }
  }
  const byHost = new Map<string, LogStep[]>(hostOrder.map((h) => [h, []]));
  for (const { step, parts, ansi } of steps.values()) {
    const list = byHost.get(step.host) ?? [];
    list.push({ ...step, html: parts.join(''), ansi: ansi.state() });
    byHost.set(step.host, list);
  }
  return {
    hosts: [...byHost].map(([host, list]) => ({ host, steps: list.sort((a, b) => a.seq - b.seq) })),
    cursor,
    ended,
  };
}
