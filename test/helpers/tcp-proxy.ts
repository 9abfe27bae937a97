// A TCP proxy the test controls, to break the network between two ends in the ways a real one
// breaks: `cut()` destroys every connection through it and refuses new ones until `restore()`
// (both ends see the connection close); `freeze()` is the silent drop — nothing is forwarded any
// more, in either direction, yet nothing closes: an end that gives up and closes its side is not
// told to the other (a lost FIN), and new connections are accepted and then never answered (a
// host that takes TCP but never speaks). `retarget(port)` sends new connections elsewhere, as a
// load balancer moving to another backend.
import { createServer, type Server, type Socket, connect } from 'node:net';

export interface TcpProxy {
  port: number;
  url: string;
  cut(): void;
  freeze(): void;
  /** Ends a cut or a freeze: frozen connections whose two ends are still open forward again. */
  restore(): void;
  retarget(port: number): void;
  close(): Promise<void>;
}

interface Pair {
  client: Socket;
  upstream: Socket | null;
}

export async function startTcpProxy(targetPort: number, targetHost = '127.0.0.1'): Promise<TcpProxy> {
  const pairs = new Set<Pair>();
  let mode: 'open' | 'cut' | 'frozen' = 'open';
  let target = targetPort;

  const destroy = (pair: Pair) => {
    pair.client.destroy();
    pair.upstream?.destroy();
    pairs.delete(pair);
  };
  const forward = (pair: Pair) => {
    const { client, upstream } = pair;
    if (!upstream) return;
    client.pipe(upstream);
    upstream.pipe(client);
    client.resume();
    upstream.resume();
  };
  const halt = (pair: Pair) => {
    pair.client.unpipe();
    pair.upstream?.unpipe();
    // Paused, the kernel buffers fill and the sender's writes stall, as behind a dead link.
    pair.client.pause();
    pair.upstream?.pause();
  };

  const server: Server = createServer((client) => {
    if (mode === 'cut') {
      client.destroy();
      return;
    }
    const pair: Pair = { client, upstream: null };
    pairs.add(pair);
    // While frozen, one end closing is never seen by the other: only that end is let go.
    const onEnd = (socket: Socket) => () => {
      if (mode === 'frozen') socket.destroy();
      else destroy(pair);
    };
    client.on('error', onEnd(client)).on('close', onEnd(client));
    if (mode === 'frozen') {
      client.pause();
      return;
    }
    const upstream = connect(target, targetHost);
    pair.upstream = upstream;
    upstream.on('error', onEnd(upstream)).on('close', onEnd(upstream));
    forward(pair);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  const port = typeof address === 'object' && address ? address.port : 0;
  return {
    port,
    url: `http://127.0.0.1:${port}`,
    cut() {
      mode = 'cut';
      for (const pair of pairs) destroy(pair);
    },
    freeze() {
      mode = 'frozen';
      for (const pair of pairs) halt(pair);
    },
    restore() {
      const wasFrozen = mode === 'frozen';
      mode = 'open';
      if (!wasFrozen) return;
      for (const pair of pairs) {
        if (!pair.upstream || pair.client.destroyed || pair.upstream.destroyed) destroy(pair);
        else forward(pair);
      }
    },
    retarget(port: number) {
      target = port;
    },
    async close() {
      mode = 'cut';
      for (const pair of pairs) destroy(pair);
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
