// The transport baseline: a bare `ws` server in this process and the ws-peer.ts client in a
// child process, on loopback, exchanging the protocol's frames (JSON; output as the protocol's
// binary frames, with the agent's zero masking key) with no database, no schema validation and
// no bookkeeping. It is what the product's dispatch
// and output path would cost if the coordinator only relayed.
import { type ChildProcess, spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { performance } from 'node:perf_hooks';
import { type WebSocket, WebSocketServer } from 'ws';
import { decodeAgentFrame } from '../../protocol/src/index.ts';
import { type Cleanup, withTimeout } from './harness.ts';

interface PeerMessage {
  type: string;
  jobId?: string;
  offset?: number;
  data?: Buffer;
  outputBytes?: number;
}

export interface Relay {
  /** Sends `assign` for `echo go`-like `cmd`; ms from the send to the first output frame decoded. */
  latencyRound(cmd: string): Promise<number>;
  /**
   * Sends `run` for `cmd`; from step.started received to every byte received (decoded, each frame
   * acknowledged): the bytes and the ms.
   */
  throughputRound(cmd: string, frameBytes: number): Promise<{ bytes: number; ms: number }>;
}

const ROUND_TIMEOUT_MS = 60_000;

export async function startRelay(cleanup: Cleanup): Promise<Relay> {
  const server = new WebSocketServer({ host: '127.0.0.1', port: 0, maxPayload: 2 * 1024 * 1024 });
  cleanup.defer('ws relay server', () => {
    for (const client of server.clients) client.terminate();
    return new Promise<void>((resolve) => server.close(() => resolve()));
  });
  await new Promise<void>((resolve, reject) => {
    server.once('listening', resolve);
    server.once('error', reject);
  });
  const address = server.address();
  const port = typeof address === 'object' && address ? address.port : 0;

  const connected = new Promise<WebSocket>((resolve) => server.once('connection', resolve));
  const peerScript = fileURLToPath(new URL('./ws-peer.ts', import.meta.url));
  const peer: ChildProcess = spawn(process.execPath, [peerScript, `ws://127.0.0.1:${port}`], {
    stdio: ['pipe', 'inherit', 'inherit'],
  });
  cleanup.defer('ws relay peer process', async () => {
    if (peer.exitCode !== null || peer.signalCode !== null) return;
    const exited = new Promise((resolve) => peer.once('exit', resolve));
    peer.stdin?.end();
    const timer = setTimeout(() => peer.kill('SIGKILL'), 3_000);
    await exited;
    clearTimeout(timer);
  });
  const socket = await withTimeout(connected, 10_000, 'the ws relay peer to connect');

  // One round at a time: the current round's handler gets every message.
  let handler: ((m: PeerMessage, at: number) => void) | undefined;
  socket.on('message', (data: Buffer, isBinary: boolean) => {
    const at = performance.now();
    let m: PeerMessage;
    if (isBinary) {
      // Output: the header read by the protocol's codec, the bytes taken as they are.
      const decoded = decodeAgentFrame(data, true);
      if (!decoded.ok) throw new Error(`ws relay: ${decoded.error}`);
      m = decoded.message as PeerMessage;
    } else {
      m = JSON.parse(data.toString('utf8')) as PeerMessage;
    }
    handler?.(m, at);
  });

  const round = <T>(
    start: () => void,
    onMessage: (m: PeerMessage, at: number, done: (v: T) => void) => void,
  ) =>
    withTimeout(
      new Promise<T>((resolve, reject) => {
        handler = (m, at) => {
          try {
            onMessage(m, at, resolve);
          } catch (err) {
            reject(err as Error);
          }
        };
        start();
      }),
      ROUND_TIMEOUT_MS,
      'a ws relay round',
    ).finally(() => (handler = undefined));

  return {
    async latencyRound(cmd) {
      const jobId = randomUUID();
      let sentAt = 0;
      let firstAt: number | undefined;
      await round<void>(
        () => {
          sentAt = performance.now();
          socket.send(JSON.stringify({ type: 'assign', jobId, cmd }));
        },
        (m, _at, done) => {
          if (m.jobId !== jobId) return;
          if (m.type === 'step.output' && firstAt === undefined) firstAt = performance.now();
          // The round ends when the command has exited, so rounds never overlap.
          if (m.type === 'step.finished') done();
        },
      );
      if (firstAt === undefined) throw new Error('the ws relay peer sent no output');
      return firstAt - sentAt;
    },

    async throughputRound(cmd, frameBytes) {
      const jobId = randomUUID();
      let startedAt: number | undefined;
      let received = 0;
      return round<{ bytes: number; ms: number }>(
        () => socket.send(JSON.stringify({ type: 'run', jobId, cmd, frameBytes })),
        (m, at, done) => {
          if (m.jobId !== jobId) return;
          if (m.type === 'step.started') startedAt = at;
          else if (m.type === 'step.output') {
            const bytes = m.data ?? Buffer.alloc(0);
            if (m.offset !== received) throw new Error(`ws relay: offset ${m.offset}, expected ${received}`);
            received += bytes.length;
            socket.send(JSON.stringify({ type: 'output.ack', jobId, step: 1, offset: received }));
          } else if (m.type === 'step.finished') {
            if (m.outputBytes !== received || startedAt === undefined) {
              throw new Error(`ws relay: received ${received} bytes, the peer sent ${m.outputBytes}`);
            }
            done({ bytes: received, ms: performance.now() - startedAt });
          }
        },
      );
    },
  };
}
