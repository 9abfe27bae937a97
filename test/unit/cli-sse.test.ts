// Following a deployment's events: the event-stream parser (pieces split anywhere, CR/LF/CRLF,
// comments, ids), resuming with Last-Event-ID after a dropped or silent connection, giving up after
// a while, and what Ctrl-C does — against a small scripted HTTP server standing in for the
// coordinator's stream.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { afterEach, describe, expect, it } from 'vitest';
import { Api } from '../../cli/src/api.ts';
import { run } from '../../cli/src/cli.ts';
import { CliError } from '../../cli/src/exit-codes.ts';
import { followEvents, SseParser, type StreamEvent } from '../../cli/src/sse.ts';

describe('SseParser', () => {
  it('parses events split at any point, with CRLF, CR or LF line ends, comments and multi-line data', () => {
    const stream =
      'retry: 2000\r\n\r\n: keep-alive\n\nid: v1:0.0\nevent: deployment\ndata: {"a":1}\n\n' +
      'id: v1:1.-1\revent: output\rdata: line one\rdata: line two\r\r' +
      'event: end\r\ndata: {}\r\n\r\n';
    for (let cut = 0; cut <= stream.length; cut++) {
      const p = new SseParser();
      const events = [...p.push(stream.slice(0, cut)), ...p.push(stream.slice(cut))];
      expect(events, `cut at ${cut}`).toEqual([
        { event: 'deployment', id: 'v1:0.0', data: '{"a":1}' },
        { event: 'output', id: 'v1:1.-1', data: 'line one\nline two' },
        // The last id stays in force for events that carry none.
        { event: 'end', id: 'v1:1.-1', data: '{}' },
      ]);
      expect(p.retryMs).toBe(2000);
    }
  });

  it('dispatches nothing without data, defaults the event name, and ignores unknown fields', () => {
    const p = new SseParser();
    expect(p.push('event: x\n\nfoo: bar\ndata\n\n')).toEqual([{ event: 'message', id: null, data: '' }]);
  });
});

type Handler = (req: IncomingMessage, res: ServerResponse) => void;

let server: Server | null = null;
afterEach(async () => {
  server?.closeAllConnections();
  await new Promise((r) => server?.close(r) ?? r(null));
  server = null;
});

async function serve(handler: Handler): Promise<string> {
  server = createServer(handler);
  await new Promise<void>((r) => server!.listen(0, '127.0.0.1', r));
  const address = server.address();
  return `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`;
}

const ID = '3f2b8a9e-1c4d-4e5f-8a6b-7c8d9e0f1a2b';
const sse = (id: string, event: string, data: unknown) =>
  `id: ${id}\nevent: ${event}\ndata: ${JSON.stringify(data)}\n\n`;
const deployment = (status: string) => ({
  id: ID,
  status,
  reason: status === 'cancelled' ? 'Cancelled by ci' : null,
  commit: null,
  branch: 'main',
  hosts: ['h'],
  started_at: '2025-01-01T00:00:00.000Z',
  finished_at: status === 'running' ? null : '2025-01-01T00:00:01.000Z',
});

function startStream(res: ServerResponse) {
  res.writeHead(200, { 'content-type': 'text/event-stream' });
  res.write('retry: 2000\n\n');
}

describe('followEvents', () => {
  it('resumes with Last-Event-ID after a dropped connection and after a silent one', async () => {
    const seen: Array<string | undefined> = [];
    const url = await serve((req, res) => {
      seen.push(req.headers['last-event-id'] as string | undefined);
      startStream(res);
      if (seen.length === 1) {
        res.write(sse('c1', 'deployment', deployment('running')));
        // Dropped mid-stream, once what was written has left.
        res.write(sse('c2', 'output', { text: 'a' }), () => setTimeout(() => res.destroy(), 20));
      } else if (seen.length === 2) {
        res.write(sse('c3', 'output', { text: 'b' })); // then silence: the idle timer drops it
      } else {
        res.write(sse('c4', 'end', deployment('success')));
        res.end();
      }
    });
    const api = new Api({ baseUrl: url, token: 'dht_t' });
    const events: StreamEvent[] = [];
    const notices: string[] = [];
    const end = await followEvents({
      api,
      deployId: ID,
      onEvent: (e) => events.push(e),
      onNotice: (m) => notices.push(m),
      signal: new AbortController().signal,
      // Not shorter: a busy machine may take a few hundred ms for the first answer.
      idleMs: 1_500,
      backoffMs: { first: 10, max: 20 },
    });
    expect(seen).toEqual([undefined, 'c2', 'c3']);
    expect(events.map((e) => `${e.event}:${e.id}`)).toEqual([
      'deployment:c1',
      'output:c2',
      'output:c3',
      'end:c4',
    ]);
    expect(end).toMatchObject({ status: 'success' });
    expect(notices).toHaveLength(2);
    expect(notices[1]).toContain('no data for 2s');
  });

  it('sends the token as a Bearer credential and stops at once on 401/404', async () => {
    let auth: string | undefined;
    const url = await serve((req, res) => {
      auth = req.headers.authorization;
      res.writeHead(401, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ success: false, error: 'Invalid, expired or revoked API token' }));
    });
    const err = await followEvents({
      api: new Api({ baseUrl: url, token: 'dht_secret' }),
      deployId: ID,
      onEvent: () => {},
      onNotice: () => {},
      signal: new AbortController().signal,
    }).catch((e: unknown) => e);
    expect(auth).toBe('Bearer dht_secret');
    expect(err).toBeInstanceOf(CliError);
    expect((err as CliError).exitCode).toBe(64);
    expect((err as CliError).message).toBe(
      '401: Invalid, expired or revoked API token — create one with POST /tokens',
    );
  });

  it('gives up when nothing gets through for giveUpMs, saying the deployment is not affected (exit 69)', async () => {
    let calls = 0;
    const url = await serve((_req, res) => {
      calls++;
      res.writeHead(503, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ success: false, error: 'Database unavailable: try again shortly' }));
    });
    const started = Date.now();
    const err = (await followEvents({
      api: new Api({ baseUrl: url, token: 'dht_t' }),
      deployId: ID,
      onEvent: () => {},
      onNotice: () => {},
      signal: new AbortController().signal,
      giveUpMs: 400,
      backoffMs: { first: 20, max: 80 },
    }).catch((e: unknown) => e)) as CliError;
    expect(Date.now() - started).toBeLessThan(5_000);
    expect(calls).toBeGreaterThan(2);
    expect(err.exitCode).toBe(69);
    expect(err.message).toMatch(
      new RegExp(
        `^Lost the live events of deployment ${ID} for 0s \\(503: Database unavailable: try again shortly\\)\\. The deployment itself is not affected`,
      ),
    );
  });
});

describe('Ctrl-C while following (run)', () => {
  /** A coordinator whose stream shows a running deployment until it is cancelled (if `confirm`). */
  async function coordinator(confirm: boolean) {
    const state = { cancels: 0, streams: new Set<ServerResponse>() };
    const url = await serve((req, res) => {
      if (req.url === `/deploy/${ID}/events`) {
        startStream(res);
        res.write(sse('c1', 'deployment', deployment('running')));
        state.streams.add(res);
        return;
      }
      if (req.method === 'POST' && req.url === `/deploy/${ID}/cancel`) {
        state.cancels++;
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ success: true, deployId: ID, deployment: deployment('running') }));
        if (confirm) {
          for (const s of state.streams) {
            s.write(sse('c2', 'deployment', deployment('cancelled')));
            s.end(sse('c2', 'end', deployment('cancelled')));
          }
        }
        return;
      }
      res.writeHead(404, { 'content-type': 'application/json' }).end('{"success":false,"error":"Not found"}');
    });
    return { url, state };
  }

  function io(url: string) {
    let out = '';
    let err = '';
    let handler: ((s: NodeJS.Signals) => void) | null = null;
    return {
      io: {
        stdout: { write: (s: string) => (out += s) },
        stderr: { write: (s: string) => (err += s) },
        env: { DECKHAND_URL: url, DECKHAND_TOKEN: 'dht_t' },
        onInterrupt(h: (s: NodeJS.Signals) => void) {
          handler = h;
          return () => {
            if (handler === h) handler = null;
          };
        },
        cancelConfirmMs: 500,
      },
      out: () => out,
      err: () => err,
      interrupt: async (signal: NodeJS.Signals = 'SIGINT') => {
        while (!out.includes('running')) await new Promise((r) => setTimeout(r, 10));
        handler!(signal);
      },
    };
  }

  it('without --cancel-on-interrupt: nothing is cancelled, it says so, 130 (143 for SIGTERM)', async () => {
    const { url, state } = await coordinator(true);
    for (const [signal, code] of [
      ['SIGINT', 130],
      ['SIGTERM', 143],
    ] as const) {
      const t = io(url);
      const done = run(['logs', ID, '--follow'], t.io);
      await t.interrupt(signal);
      expect(await done).toBe(code);
      expect(t.err()).toContain(`Interrupted: deployment ${ID} was not cancelled, it is still running`);
    }
    expect(state.cancels).toBe(0);
  });

  it('with --cancel-on-interrupt: cancels, shows the confirmed end, 130', async () => {
    const { url, state } = await coordinator(true);
    const t = io(url);
    const done = run(['logs', ID, '--follow', '--cancel-on-interrupt'], t.io);
    await t.interrupt();
    expect(await done).toBe(130);
    expect(state.cancels).toBe(1);
    expect(t.out()).toContain('✖ Deployment cancelled in 1.0s: Cancelled by ci');
  });

  it('with --cancel-on-interrupt and no confirmation in time: says the cancel is pending, 130', async () => {
    const { url, state } = await coordinator(false);
    const t = io(url);
    const done = run(['logs', ID, '--follow', '--cancel-on-interrupt', '--json'], t.io);
    await t.interrupt();
    expect(await done).toBe(130);
    expect(state.cancels).toBe(1);
    expect(t.err()).toContain(`Cancel requested; deployment ${ID} has not confirmed it yet`);
    // --json: stdout stays NDJSON.
    for (const line of t.out().trimEnd().split('\n')) expect(() => JSON.parse(line)).not.toThrow();
  });
});
