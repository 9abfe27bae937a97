// A real SMTP server for tests (smtp-server on 127.0.0.1, a free port, no TLS) that keeps what it
// receives. It can require credentials (535 on bad ones) and refuse recipients (550).

import { type AddressInfo, createServer } from 'node:net';
import { SMTPServer } from 'smtp-server';

export interface ReceivedMessage {
  from: string;
  to: string[];
  raw: string;
  subject: string;
}

export interface TestSmtpServer {
  port: number;
  /** `smtp://127.0.0.1:<port>`, with the credentials when the server requires them. */
  url: string;
  /** Every message received so far, in order. */
  messages: ReceivedMessage[];
  /** The next message not yet returned by an earlier call, waiting for it when needed. */
  waitForMessage(timeoutMs?: number): Promise<ReceivedMessage>;
  close(): Promise<void>;
}

export interface TestSmtpServerOptions {
  /** Require AUTH with these credentials (PLAIN or LOGIN, allowed without TLS). */
  auth?: { user: string; password: string };
  /** Refuse recipients whose address matches with `550 5.1.1 Mailbox unavailable`. */
  rejectRecipients?: RegExp;
}

function smtpError(responseCode: number, message: string): Error {
  return Object.assign(new Error(message), { responseCode });
}

export async function startTestSmtpServer(opts: TestSmtpServerOptions = {}): Promise<TestSmtpServer> {
  const messages: ReceivedMessage[] = [];
  let consumed = 0;
  const waiters = new Set<() => void>();

  const server = new SMTPServer({
    secure: false,
    logger: false,
    disabledCommands: opts.auth ? ['STARTTLS'] : ['STARTTLS', 'AUTH'],
    authOptional: !opts.auth,
    allowInsecureAuth: true,
    onAuth(auth, _session, callback) {
      if (opts.auth && auth.username === opts.auth.user && auth.password === opts.auth.password) {
        callback(null, { user: auth.username });
      } else {
        callback(smtpError(535, '5.7.8 Authentication credentials invalid'));
      }
    },
    onRcptTo(address, _session, callback) {
      const rejected = opts.rejectRecipients;
      if (rejected) rejected.lastIndex = 0; // a /g or /y pattern keeps state between test() calls
      if (rejected?.test(address.address)) {
        callback(smtpError(550, '5.1.1 Mailbox unavailable'));
      } else {
        callback();
      }
    },
    onData(stream, session, callback) {
      const chunks: Buffer[] = [];
      stream.on('data', (chunk: Buffer) => chunks.push(chunk));
      stream.on('error', callback);
      stream.on('end', () => {
        const raw = Buffer.concat(chunks).toString('utf8');
        const mailFrom = session.envelope.mailFrom;
        messages.push({
          from: mailFrom ? mailFrom.address : '',
          to: session.envelope.rcptTo.map((rcpt) => rcpt.address),
          raw,
          subject: parseSubject(raw),
        });
        for (const wake of [...waiters]) wake();
        callback();
      });
    },
  });

  await new Promise<void>((resolve, reject) => {
    server.server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      server.server.off('error', reject);
      resolve();
    });
  });
  const { port } = server.server.address() as AddressInfo;
  const credentials = opts.auth
    ? `${encodeURIComponent(opts.auth.user)}:${encodeURIComponent(opts.auth.password)}@`
    : '';

  return {
    port,
    url: `smtp://${credentials}127.0.0.1:${port}`,
    messages,
    waitForMessage(timeoutMs = 5_000) {
      return new Promise<ReceivedMessage>((resolve, reject) => {
        const take = (): boolean => {
          const message = messages[consumed];
          if (!message) return false;
          consumed += 1;
          resolve(message);
          return true;
        };
        if (take()) return;
        const wake = () => {
          if (take()) finish();
        };
        const timer = setTimeout(() => {
          finish();
          reject(new Error(`No message arrived within ${timeoutMs} ms`));
        }, timeoutMs);
        const finish = () => {
          clearTimeout(timer);
          waiters.delete(wake);
        };
        waiters.add(wake);
      });
    },
    close() {
      return new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** The Subject header, unfolded, with RFC 2047 encoded words decoded. */
function parseSubject(raw: string): string {
  const headerEnd = raw.search(/\r?\n\r?\n/);
  const headers = (headerEnd === -1 ? raw : raw.slice(0, headerEnd)).replace(/\r?\n[ \t]+/g, ' ');
  const match = /^subject:[ \t]*(.*)$/im.exec(headers);
  if (!match?.[1]) return '';
  return match[1]
    .replace(/\?=\s+=\?/g, '?==?') // whitespace between encoded words is not part of the text
    .replace(/=\?([^?]+)\?([bq])\?([^?]*)\?=/gi, (_all, _charset: string, encoding: string, text: string) =>
      encoding.toLowerCase() === 'b'
        ? Buffer.from(text, 'base64').toString('utf8')
        : Buffer.from(
            text
              .replace(/_/g, ' ')
              .replace(/=([0-9a-f]{2})/gi, (_m, hex: string) =>
                String.fromCharCode(Number.parseInt(hex, 16)),
              ),
            'latin1',
          ).toString('utf8'),
    )
    .trim();
}

/** A port on 127.0.0.1 nothing listens on. */
export async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  await new Promise<void>((resolve) => server.close(() => resolve()));
  if (!address || typeof address === 'string') throw new Error('no port');
  return address.port;
}
