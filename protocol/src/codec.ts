// Frames are JSON text `{type, ...}`. Decoding validates the frame against its message's schema
// and returns a result instead of throwing, so a bad frame from the other side can never crash a
// handler: the caller answers it (close with BAD_FRAME or TOO_LARGE) and carries on.
import type { TSchema } from 'typebox';
import { Compile, type Validator } from 'typebox/compile';
import { CloseCode, MAX_FRAME_BYTES } from './close-codes.ts';
import { AGENT_MESSAGES, type AgentMessage } from './messages/agent.ts';
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

/** For the coordinator: a frame received from an agent. */
export function decodeAgentFrame(raw: unknown): Decoded<AgentMessage> {
  return decode<AgentMessage>(agentValidators, raw);
}

/** For the agent: a frame received from the coordinator. */
export function decodeCoordinatorFrame(raw: unknown): Decoded<CoordinatorMessage> {
  return decode<CoordinatorMessage>(coordinatorValidators, raw);
}

export function encodeFrame(message: AgentMessage | CoordinatorMessage): string {
  return JSON.stringify(message);
}
