// The baseline of ws-fan-in and agent-capacity: a bare `ws` server speaking the agents' side of
// the protocol with the same framing and heartbeat as the coordinator, and nothing else — no
// token check against a database, no presence rows, no storage. Every frame goes through the
// protocol's own decodeAgentFrame (JSON text frames checked against their schema; binary
// step.output frames read from their header); hello → welcome; job.finished → job.ack; output is
// acknowledged once per connection per turn of the event loop, as soon as it is decoded. The
// server pings every heartbeatMs and drops a connection that did not answer the previous ping.
//
// In-process: startBareAgentServer(). As a process of its own (agent-capacity):
// `node bench/lib/bare-agent-server.ts <port> <heartbeat ms>` prints `listening <port>` and
// stops on SIGTERM, closing every connection with GOING_AWAY like the coordinator.
import { randomUUID } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import { type WebSocket, WebSocketServer } from 'ws';
import { CloseCode, decodeAgentFrame, encodeFrame, PROTOCOL_VERSION } from '../../protocol/src/index.ts';

export interface BareAgentServer {
  url: string;
  port: number;
  /** Welcomed connections now. */
  connections(): number;
  /** Sends every welcomed connection a job.assign (only its jobId matters to the swarm). */
  assignJobs(): void;
  /** Output frames decoded so far. */
  outputFrames(): number;
  close(): Promise<void>;
}

interface Conn {
  socket: WebSocket;
  welcomed: boolean;
  alive: boolean;
  /** Highest end offset received per `${jobId}:${step}`, waiting to be acknowledged. */
  pending: Map<string, { jobId: string; step: number; offset: number }>;
  ackScheduled: boolean;
}

export async function startBareAgentServer(port = 0, heartbeatMs = 10_000): Promise<BareAgentServer> {
  const wss = new WebSocketServer({ host: '127.0.0.1', port, maxPayload: 2 * 1024 * 1024 });
  await new Promise<void>((resolve) => wss.once('listening', resolve));
  const conns = new Set<Conn>();
  let frames = 0;

  wss.on('connection', (socket) => {
    const conn: Conn = { socket, welcomed: false, alive: true, pending: new Map(), ackScheduled: false };
    conns.add(conn);
    socket.on('pong', () => (conn.alive = true));
    socket.on('close', () => conns.delete(conn));
    socket.on('error', () => undefined);
    socket.on('message', (data, isBinary) => {
      conn.alive = true;
      const decoded = decodeAgentFrame(data, isBinary);
      if (!decoded.ok) {
        socket.close(decoded.code, decoded.error);
        return;
      }
      const m = decoded.message;
      switch (m.type) {
        case 'hello':
          conn.welcomed = true;
          socket.send(
            encodeFrame({
              type: 'welcome',
              agentId: randomUUID(),
              agentName: m.hostname,
              protocolVersion: PROTOCOL_VERSION,
              heartbeatMs,
              leaseMs: 6 * heartbeatMs,
              abandonAfterMs: 12 * heartbeatMs,
            }),
          );
          return;
        case 'step.output': {
          frames++;
          const key = `${m.jobId}:${m.step}`;
          const end = m.offset + m.data.length;
          const prev = conn.pending.get(key);
          if (!prev || prev.offset < end)
            conn.pending.set(key, { jobId: m.jobId, step: m.step, offset: end });
          if (!conn.ackScheduled) {
            conn.ackScheduled = true;
            setImmediate(() => {
              conn.ackScheduled = false;
              for (const ack of conn.pending.values())
                socket.send(encodeFrame({ type: 'output.ack', ...ack }));
              conn.pending.clear();
            });
          }
          return;
        }
        case 'job.finished':
          socket.send(encodeFrame({ type: 'job.ack', jobId: m.jobId }));
          return;
        default:
          return;
      }
    });
  });

  const beat = setInterval(() => {
    for (const conn of conns) {
      if (!conn.alive) {
        conn.socket.terminate();
        continue;
      }
      conn.alive = false;
      conn.socket.ping();
    }
  }, heartbeatMs);
  beat.unref();

  const actualPort = (wss.address() as AddressInfo).port;
  return {
    url: `ws://127.0.0.1:${actualPort}/agent/ws`,
    port: actualPort,
    connections: () => [...conns].filter((c) => c.welcomed).length,
    assignJobs() {
      for (const c of conns) {
        if (!c.welcomed) continue;
        // Only jobId is read by the swarm; the rest of a real job.assign is not needed here.
        c.socket.send(JSON.stringify({ type: 'job.assign', jobId: randomUUID() }));
      }
    },
    outputFrames: () => frames,
    async close() {
      clearInterval(beat);
      const closed = [...conns].map(
        (c) =>
          new Promise<void>((resolve) =>
            c.socket.readyState === c.socket.CLOSED ? resolve() : c.socket.once('close', () => resolve()),
          ),
      );
      for (const c of conns) c.socket.close(CloseCode.GOING_AWAY, 'server shutting down');
      const slow = setTimeout(() => {
        for (const c of conns) c.socket.terminate();
      }, 1_000);
      await Promise.all(closed);
      clearTimeout(slow);
      await new Promise<void>((resolve) => wss.close(() => resolve()));
    },
  };
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const server = await startBareAgentServer(Number(process.argv[2] ?? 0), Number(process.argv[3] ?? 10_000));
  process.on('SIGTERM', () => void server.close().then(() => process.exit(0)));
  console.log(`listening ${server.port}`);
}
