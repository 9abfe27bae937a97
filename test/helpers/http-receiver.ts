// A real HTTP server standing in for whatever the coordinator calls out to (a webhook receiver,
// a forge's API): it records every request and answers as the test says, by default 200.
import { createServer, type IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface ReceivedRequest {
  method: string;
  /** Path and query, as sent. */
  url: string;
  headers: IncomingHttpHeaders;
  body: string;
  /** Date.now() when it arrived. */
  at: number;
}

export type Responder = (request: ReceivedRequest, index: number) => { status: number; body?: string };

export interface HttpReceiver {
  /** `http://127.0.0.1:<port>` */
  url: string;
  requests: ReceivedRequest[];
  respond: Responder;
  /** Waits until at least `count` requests arrived; all of them. */
  waitForRequests(count: number, timeoutMs?: number): Promise<ReceivedRequest[]>;
  close(): Promise<void>;
}

export async function startHttpReceiver(respond: Responder = () => ({ status: 200 })): Promise<HttpReceiver> {
  const requests: ReceivedRequest[] = [];
  const waiters = new Set<() => void>();
  const receiver = { respond } as { respond: Responder };
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const request: ReceivedRequest = {
        method: req.method ?? '',
        url: req.url ?? '',
        headers: req.headers,
        body: Buffer.concat(chunks).toString('utf8'),
        at: Date.now(),
      };
      requests.push(request);
      const answer = receiver.respond(request, requests.length - 1);
      res.writeHead(answer.status, { 'content-type': 'application/json' });
      res.end(answer.body ?? '{}');
      for (const wake of [...waiters]) wake();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    get respond() {
      return receiver.respond;
    },
    set respond(fn: Responder) {
      receiver.respond = fn;
    },
    waitForRequests(count, timeoutMs = 10_000) {
      return new Promise((resolve, reject) => {
        const check = () => {
          if (requests.length < count) return false;
          clearTimeout(timer);
          waiters.delete(wake);
          resolve([...requests]);
          return true;
        };
        const wake = () => void check();
        const timer = setTimeout(() => {
          waiters.delete(wake);
          reject(new Error(`only ${requests.length} of ${count} requests arrived within ${timeoutMs} ms`));
        }, timeoutMs);
        waiters.add(wake);
        check();
      });
    },
    close() {
      server.closeAllConnections();
      return new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
