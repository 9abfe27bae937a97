// Frames are JSON text `{type, ...}`, except an agent's output: `step.output` is a binary frame,
//   byte 0       frame kind (1 = step.output)
//   bytes 1-16   jobId, the UUID's 16 bytes
//   bytes 17-20  step, unsigned 32-bit big-endian
//   bytes 21-24  seq, unsigned 32-bit big-endian
//   bytes 25-32  offset, unsigned 64-bit big-endian (at most 2^53 - 1)
//   bytes 33-    the output's raw bytes (at most MAX_CHUNK_BYTES)
// so the bytes cross as they are: no base64, no JSON to build or parse. Decoding validates the
// frame (against its message's schema, or the layout above) and returns a result instead of
// throwing, so a bad frame from the other side can never crash a handler: the caller answers it
// (close with BAD_FRAME or TOO_LARGE) and carries on.
import type { TSchema } from 'typebox';
import { Compile, type Validator } from 'typebox/compile';
import { CloseCode, MAX_FRAME_BYTES } from './close-codes.ts';
import { AGENT_MESSAGES, type AgentMessage, MAX_CHUNK_BYTES, type StepOutput } from './messages/agent.ts';
import { COORDINATOR_MESSAGES, type CoordinatorMessage } from './messages/coordinator.ts';

export type Decoded<T> = { ok: true; message: T } | { ok: false; code: CloseCode; error: string };

type Catalog = Record<string, TSchema>;

/** Frames up to this size (characters) that break their schema get an exact error message. */
const EXPLAIN_ERRORS_BELOW = 64 * 1024;

function compileCatalog(catalog: Catalog): Map<string, Validator> {
  return new Map(Object.entries(catalog).map(([type, schema]) => [type, Compile(schema)]));
}

const agentValidators = compileCatalog(AGENT_MESSAGES);
const coordinatorValidators = compileCatalog(COORDINATOR_MESSAGES);

const OUTPUT_FRAME = 1;
const OUTPUT_HEADER_BYTES = 33;
const STEP_MAX = 10_000;

/** A step.output frame: header and bytes in one buffer (one copy of the bytes). */
export function encodeOutputFrame(m: StepOutput): Buffer {
  const frame = Buffer.allocUnsafe(OUTPUT_HEADER_BYTES + m.data.length);
  frame[0] = OUTPUT_FRAME;
  const id = Buffer.from(m.jobId.replaceAll('-', ''), 'hex');
  if (id.length !== 16) throw new Error(`step.output: jobId ${m.jobId} is not a UUID`);
  id.copy(frame, 1);
  frame.writeUInt32BE(m.step, 17);
  frame.writeUInt32BE(m.seq, 21);
  frame.writeBigUInt64BE(BigInt(m.offset), 25);
  frame.set(m.data, OUTPUT_HEADER_BYTES);
  return frame;
}

function uuidOf(bytes: Buffer): string {
  const hex = bytes.toString('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

function decodeOutputFrame(frame: Buffer): Decoded<StepOutput> {
  if (frame.length > OUTPUT_HEADER_BYTES + MAX_CHUNK_BYTES) {
    return {
      ok: false,
      code: CloseCode.TOO_LARGE,
      error: `output frame larger than ${MAX_CHUNK_BYTES} bytes of output`,
    };
  }
  if (frame.length < OUTPUT_HEADER_BYTES || frame[0] !== OUTPUT_FRAME) {
    return { ok: false, code: CloseCode.BAD_FRAME, error: 'binary frame is not a step.output frame' };
  }
  const step = frame.readUInt32BE(17);
  if (step > STEP_MAX)
    return { ok: false, code: CloseCode.BAD_FRAME, error: 'step.output: step is out of range' };
  const offset = frame.readBigUInt64BE(25);
  if (offset > BigInt(Number.MAX_SAFE_INTEGER)) {
    return { ok: false, code: CloseCode.BAD_FRAME, error: 'step.output: offset is out of range' };
  }
  return {
    ok: true,
    message: {
      type: 'step.output',
      jobId: uuidOf(frame.subarray(1, 17)),
      step,
      seq: frame.readUInt32BE(21),
      offset: Number(offset),
      data: frame.subarray(OUTPUT_HEADER_BYTES),
    },
  };
}

function decode<T>(validators: Map<string, Validator>, raw: unknown): Decoded<T> {
  const text = typeof raw === 'string' ? raw : Buffer.isBuffer(raw) ? raw.toString('utf8') : null;
  if (text === null) return { ok: false, code: CloseCode.BAD_FRAME, error: 'frames must be JSON text' };
  if (Buffer.byteLength(text) > MAX_FRAME_BYTES) {
    return { ok: false, code: CloseCode.TOO_LARGE, error: `frame larger than ${MAX_FRAME_BYTES} bytes` };
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return { ok: false, code: CloseCode.BAD_FRAME, error: 'frame is not valid JSON' };
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    return { ok: false, code: CloseCode.BAD_FRAME, error: 'frame is not a JSON object' };
  }
  const type = (value as { type?: unknown }).type;
  const validator = typeof type === 'string' ? validators.get(type) : undefined;
  if (!validator)
    return { ok: false, code: CloseCode.BAD_FRAME, error: `unknown message type ${JSON.stringify(type)}` };
  if (!validator.Check(value)) {
    // Explaining where a large value breaks its schema can take seconds (the error walk is far
    // slower than the check): a large bad frame gets a fixed message, and the loop stays free.
    if (text.length > EXPLAIN_ERRORS_BELOW) {
      return { ok: false, code: CloseCode.BAD_FRAME, error: `${type}: frame does not match its schema` };
    }
    const first = validator.Errors(value)[0];
    const where = first?.instancePath ? first.instancePath.slice(1).replaceAll('/', '.') : 'frame';
    return {
      ok: false,
      code: CloseCode.BAD_FRAME,
      error: `${type}: ${where} ${first?.message ?? 'is invalid'}`,
    };
  }
  return { ok: true, message: value as T };
}

/** For the coordinator: a frame received from an agent (`isBinary` as the WebSocket says). */
export function decodeAgentFrame(raw: unknown, isBinary = false): Decoded<AgentMessage> {
  if (isBinary) {
    if (!Buffer.isBuffer(raw))
      return { ok: false, code: CloseCode.BAD_FRAME, error: 'unreadable binary frame' };
    return decodeOutputFrame(raw);
  }
  return decode<AgentMessage>(agentValidators, raw);
}

/** For the agent: a frame received from the coordinator. */
export function decodeCoordinatorFrame(raw: unknown): Decoded<CoordinatorMessage> {
  return decode<CoordinatorMessage>(coordinatorValidators, raw);
}

/** What to send for a message: JSON text, or a binary frame for step.output. */
export function encodeFrame(message: AgentMessage | CoordinatorMessage): string | Buffer {
  return message.type === 'step.output' ? encodeOutputFrame(message) : JSON.stringify(message);
}
