// The browser baseline: a raw relay with no database. An HTTP server in this process serves a
// minimal page (a <pre> and an EventSource that appends each event's text as it comes) and
// GET /events (server-sent events); the ws-peer.ts client, in a process of its own as the agent
// is, runs the command and sends each read of its output at once as a binary step.output frame
// (the protocol's framing) over a WebSocket on the same server; the relay decodes each frame and
// writes its text to every open event stream. Nothing is stored, batched or rendered.
import { type ChildProcess, spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { createServer, type ServerResponse } from 'node:http';
import { fileURLToPath } from 'node:url';
import { type WebSocket, WebSocketServer } from 'ws';
import { decodeAgentFrame } from '../../protocol/src/index.ts';
import { type Cleanup, withTimeout } from './harness.ts';

const PAGE = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>raw relay</title></head>
<body><pre id="log"></pre>
<script>
const log = document.getElementById('log');
const source = new EventSource('/events');
source.addEventListener('output', (e) => log.insertAdjacentText('beforeend', JSON.parse(e.data)));
</script></body></html>`;

export interface SseRelay {
  /** The minimal page. */
  url: string;
  /** Runs `cmd` through the peer; resolves once its step.finished has been relayed. */
  run(cmd: string, timeoutMs: number): Promise<void>;
}

export async function startSseRelay(cleanup: Cleanup): Promise<SseRelay> {
  const streams = new Set<ServerResponse>();
  const server = createServer((req, res) => {
    if (req.url === '/events') {
      res.writeHead(200, {
        'content-type': 'text/event-stream',
        'cache-control': 'no-store',
        connection: 'keep-alive',
      });
      res.write(': open\n\n');
      streams.add(res);
      res.on('close', () => streams.delete(res));
    } else if (req.url === '/') {
      res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' }).end(PAGE);
    } else {
      res.writeHead(204).end(); // favicon.ico and the like
    }
  });
  const wss = new WebSocketServer({ server, path: '/agent', maxPayload: 2 * 1024 * 1024 });
  cleanup.defer('sse relay server', () => {
    for (const res of streams) res.destroy();
    for (const client of wss.clients) client.terminate();
    wss.close();
    server.closeAllConnections();
    return new Promise<void>((resolve) => server.close(() => resolve()));
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', resolve);
  });
  const address = server.address();
  const port = typeof address === 'object' && address ? address.port : 0;

  const connected = new Promise<WebSocket>((resolve) => wss.once('connection', resolve));
  const peerScript = fileURLToPath(new URL('./ws-peer.ts', import.meta.url));
  const peer: ChildProcess = spawn(process.execPath, [peerScript, `ws://127.0.0.1:${port}/agent`], {
    stdio: ['pipe', 'inherit', 'inherit'],
  });
  cleanup.defer('sse relay peer process', async () => {
    if (peer.exitCode !== null || peer.signalCode !== null) return;
    const exited = new Promise((resolve) => peer.once('exit', resolve));
    peer.stdin?.end();
    const timer = setTimeout(() => peer.kill('SIGKILL'), 3_000);
    await exited;
    clearTimeout(timer);
  });
  const socket = await withTimeout(connected, 10_000, 'the sse relay peer to connect');

  let finished: ((jobId: string) => void) | undefined;
  const decoder = new TextDecoder();
  socket.on('message', (data: Buffer, isBinary: boolean) => {
    if (isBinary) {
      const decoded = decodeAgentFrame(data, true);
      if (!decoded.ok || decoded.message.type !== 'step.output') return;
      const text = decoder.decode(decoded.message.data, { stream: true });
      const event = `event: output\ndata: ${JSON.stringify(text)}\n\n`;
      for (const res of streams) res.write(event);
      return;
    }
    const m = JSON.parse(data.toString('utf8')) as { type: string; jobId?: string };
    if (m.type === 'step.finished' && m.jobId) finished?.(m.jobId);
  });

  return {
    url: `http://127.0.0.1:${port}/`,
    async run(cmd, timeoutMs) {
      const jobId = randomUUID();
      try {
        await withTimeout(
          new Promise<void>((resolve) => {
            finished = (id) => {
              if (id === jobId) resolve();
            };
            socket.send(JSON.stringify({ type: 'stream', jobId, cmd }));
          }),
          timeoutMs,
          'a relay round',
        );
      } finally {
        finished = undefined;
      }
    },
  };
}
