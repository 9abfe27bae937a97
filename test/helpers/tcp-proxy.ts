// A TCP proxy the test controls, to cut the network between an agent and the coordinator:
// `cut()` destroys every connection through it and refuses new ones until `restore()`;
// `retarget(port)` sends new connections elsewhere, as a load balancer moving to another backend.
import { createServer, type Server, type Socket, connect } from 'node:net';

export interface TcpProxy {
  port: number;
  url: string;
  cut(): void;
  restore(): void;
  retarget(port: number): void;
  close(): Promise<void>;
}

export async function startTcpProxy(targetPort: number, targetHost = '127.0.0.1'): Promise<TcpProxy> {
  const sockets = new Set<Socket>();
  let open = true;
  let target = targetPort;
  const server: Server = createServer((client) => {
    if (!open) {
      client.destroy();
      return;
    }
    const upstream = connect(target, targetHost);
    sockets.add(client).add(upstream);
    const drop = () => {
      client.destroy();
      upstream.destroy();
      sockets.delete(client);
      sockets.delete(upstream);
    };
    client.on('error', drop).on('close', drop);
    upstream.on('error', drop).on('close', drop);
    client.pipe(upstream);
    upstream.pipe(client);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  const port = typeof address === 'object' && address ? address.port : 0;
  return {
    port,
    url: `http://127.0.0.1:${port}`,
    cut() {
      open = false;
      for (const s of sockets) s.destroy();
      sockets.clear();
    },
    restore() {
      open = true;
    },
    retarget(port: number) {
      target = port;
    },
    async close() {
      open = false;
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
