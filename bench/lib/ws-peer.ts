// The baselines' "agent": a bare `ws` client in a process of its own (as the real agent is) that
// does the agent's transport work and nothing else. Run by ws-relay.ts as
// `node bench/lib/ws-peer.ts <ws url>`; it exits when the socket closes or its stdin ends.
//
//   assign {jobId, cmd}        → spawns `bash -c cmd`, sends its first output at once as one
//                                step.output frame (binary, as the agent's), then step.finished after exit.
//   run {jobId, cmd, frameBytes} → step.started, spawns `bash -c cmd`, sends its output in frames of
//                                frameBytes raw bytes (binary frames), the rest at exit, then
//                                step.finished {outputBytes}. Acks (output.ack) are parsed, not waited for.
//   stream {jobId, cmd}        → like run, but every read of the command's output is sent at once as
//                                its own frame (no batching: the lowest latency a relay can have).
import { spawn } from 'node:child_process';
import WebSocket from 'ws';
import { encodeOutputFrame } from '../../protocol/src/index.ts';

interface Assign {
  type: 'assign';
  jobId: string;
  cmd: string;
}
interface Run {
  type: 'run';
  jobId: string;
  cmd: string;
  frameBytes: number;
}
interface Stream {
  type: 'stream';
  jobId: string;
  cmd: string;
}
type Incoming = Assign | Run | Stream | { type: 'output.ack'; jobId: string; offset: number };

const url = process.argv[2];
if (!url) {
  console.error('usage: ws-peer.ts <ws url>');
  process.exit(2);
}
// The agent's transport settings: a zero masking key, so ws XORs nothing.
const ws = new WebSocket(url, { maxPayload: 2 * 1024 * 1024, generateMask: (mask) => mask.fill(0) });
let acked = 0;

function send(message: object | Buffer): void {
  ws.send(Buffer.isBuffer(message) ? message : JSON.stringify(message));
}

function frame(jobId: string, seq: number, offset: number, bytes: Buffer): Buffer {
  return encodeOutputFrame({ type: 'step.output', jobId, step: 1, seq, offset, data: bytes });
}

function bash(cmd: string) {
  // Like the agent: its own process group, stdout and stderr both read.
  return spawn('bash', ['-c', cmd], { detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
}

function assign(m: Assign): void {
  const child = bash(m.cmd);
  let sent = false;
  let bytes = 0;
  const onData = (b: Buffer) => {
    bytes += b.length;
    if (sent) return;
    sent = true;
    send(frame(m.jobId, 0, 0, b));
  };
  child.stdout.on('data', onData);
  child.stderr.on('data', onData);
  child.on('close', (exitCode, signal) =>
    send({ type: 'step.finished', jobId: m.jobId, step: 1, exitCode, signal, outputBytes: bytes }),
  );
}

function run(m: Run): void {
  send({ type: 'step.started', jobId: m.jobId, step: 1, cmd: m.cmd });
  const child = bash(m.cmd);
  let pending: Buffer[] = [];
  let pendingBytes = 0;
  let offset = 0;
  let seq = 0;
  const flush = (all: boolean) => {
    if (pendingBytes === 0) return;
    const buf = Buffer.concat(pending, pendingBytes);
    let at = 0;
    while (buf.length - at >= m.frameBytes || (all && at < buf.length)) {
      const piece = buf.subarray(at, at + m.frameBytes);
      send(frame(m.jobId, seq++, offset, piece));
      offset += piece.length;
      at += piece.length;
    }
    const rest = buf.subarray(at);
    pending = rest.length ? [rest] : [];
    pendingBytes = rest.length;
  };
  const onData = (b: Buffer) => {
    pending.push(b);
    pendingBytes += b.length;
    if (pendingBytes >= m.frameBytes) flush(false);
  };
  child.stdout.on('data', onData);
  child.stderr.on('data', onData);
  child.on('close', (exitCode, signal) => {
    flush(true);
    send({ type: 'step.finished', jobId: m.jobId, step: 1, exitCode, signal, outputBytes: offset });
  });
}

function stream(m: Stream): void {
  send({ type: 'step.started', jobId: m.jobId, step: 1, cmd: m.cmd });
  const child = bash(m.cmd);
  let offset = 0;
  let seq = 0;
  const onData = (b: Buffer) => {
    send(frame(m.jobId, seq++, offset, b));
    offset += b.length;
  };
  child.stdout.on('data', onData);
  child.stderr.on('data', onData);
  child.on('close', (exitCode, signal) =>
    send({ type: 'step.finished', jobId: m.jobId, step: 1, exitCode, signal, outputBytes: offset }),
  );
}

ws.on('message', (data: Buffer) => {
  const m = JSON.parse(data.toString('utf8')) as Incoming;
  if (m.type === 'assign') assign(m);
  else if (m.type === 'run') run(m);
  else if (m.type === 'stream') stream(m);
  else if (m.type === 'output.ack') acked = Math.max(acked, m.offset);
});
ws.on('open', () => send({ type: 'hello' }));
ws.on('close', () => process.exit(0));
ws.on('error', (err) => {
  console.error(`ws-peer: ${err.message}`);
  process.exit(1);
});
process.stdin.on('end', () => process.exit(0));
process.stdin.resume();
