// Properties of the protocol codec (protocol/src/codec.ts), checked with fast-check:
//   - any valid message of either direction encodes and decodes to itself (as text, and as the
//     Buffer a WebSocket delivers);
//   - any input at all — strings, bytes, JSON of any shape, valid messages with a field broken —
//     never throws: it either decodes to a known message that passes its schema, or gives
//     `{ok: false, code, error}` with a documented close code (BAD_FRAME, or TOO_LARGE past
//     MAX_FRAME_BYTES), and TOO_LARGE exactly when the frame is larger than that.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  AGENT_MESSAGES,
  type AgentMessage,
  CloseCode,
  COORDINATOR_MESSAGES,
  type CoordinatorMessage,
  decodeAgentFrame,
  decodeCoordinatorFrame,
  encodeFrame,
  JOB_RESULTS,
  MAX_CHUNK_BYTES,
  MAX_FRAME_BYTES,
  PROTOCOL_VERSION,
} from '../../protocol/src/index.ts';

const RUNS = { numRuns: 300 };

// --- valid messages -----------------------------------------------------------------------------

/** Any text: full Unicode (lone surrogates included), at most `max` UTF-16 code units. */
const text = (max: number, min = 0) =>
  fc
    .oneof(
      fc.string({ unit: 'binary', minLength: min, maxLength: Math.floor(max / 2) }),
      fc.string({ unit: 'grapheme-ascii', minLength: min, maxLength: max }),
      fc.string({
        unit: fc.constantFrom('\u0000', '\ud800', '\udfff', '"', '\\', '\n', 'é', '😀'),
        minLength: min,
        maxLength: Math.floor(max / 2),
      }),
    )
    .filter((s) => s.length >= min && s.length <= max);
const id = fc.uuid();
const stepIndex = fc.integer({ min: 0, max: 10_000 });
const offset = fc.oneof(fc.nat(), fc.constant(Number.MAX_SAFE_INTEGER), fc.nat({ max: 1 << 20 }));
const bytes = fc.uint8Array({ maxLength: 4096 }).map((b) => Buffer.from(b));
const optional = <T>(arb: fc.Arbitrary<T>) => fc.option(arb, { nil: undefined });
/** Drops keys whose value is undefined (optional fields absent, as JSON has them). */
const defined = <T extends object>(o: T): T =>
  Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as T;

const hello = fc.record({
  type: fc.constant('hello' as const),
  protocolVersion: fc.oneof(fc.constant(PROTOCOL_VERSION), fc.nat()),
  agentVersion: text(64),
  hostname: text(255),
  labels: fc.array(text(63), { maxLength: 50 }),
  runningJobs: fc.array(fc.record({ jobId: id, step: stepIndex, offset }), { maxLength: 100 }),
});

const agentMessage: fc.Arbitrary<AgentMessage> = fc.oneof(
  hello,
  fc.record({ type: fc.constant('job.accepted' as const), jobId: id }),
  fc.record({ type: fc.constant('step.started' as const), jobId: id, step: stepIndex, cmd: text(20_000) }),
  fc.record({
    type: fc.constant('step.output' as const),
    jobId: id,
    step: stepIndex,
    seq: fc.nat({ max: 2 ** 32 - 1 }),
    offset,
    data: bytes,
  }),
  fc
    .record({
      type: fc.constant('step.finished' as const),
      jobId: id,
      step: stepIndex,
      exitCode: fc.option(fc.integer()),
      signal: fc.option(text(16)),
      outputBytes: offset,
      error: optional(text(2000)),
    })
    .map(defined),
  fc
    .record({
      type: fc.constant('job.finished' as const),
      jobId: id,
      status: fc.constantFrom(...JOB_RESULTS),
      reason: optional(text(2000)),
    })
    .map(defined),
);

const hex = (min: number, max: number) =>
  fc.string({ unit: fc.constantFrom(...'0123456789abcdef'), minLength: min, maxLength: max });

const coordinatorMessage: fc.Arbitrary<CoordinatorMessage> = fc.oneof(
  fc.record({
    type: fc.constant('welcome' as const),
    agentId: id,
    agentName: text(100),
    protocolVersion: fc.integer(),
    heartbeatMs: fc.integer({ min: 100 }),
    leaseMs: fc.integer({ min: 100 }),
    abandonAfterMs: fc.integer({ min: 100 }),
  }),
  fc.record({ type: fc.constant('reject' as const), reason: text(500) }),
  fc.record({
    type: fc.constant('job.assign' as const),
    jobId: id,
    deploymentId: id,
    project: fc.record({
      id,
      name: fc.stringMatching(/^[A-Za-z0-9][A-Za-z0-9._-]{0,98}$/),
    }),
    repository: fc.record({
      url: text(300),
      branch: text(100),
      commit: hex(40, 64),
      sshKey: fc.option(text(3000)),
      knownHosts: fc.option(text(3000)),
    }),
    commands: fc.array(text(500)),
    env: fc.dictionary(text(40), text(200), { maxKeys: 20 }),
    kind: fc.constantFrom('deploy' as const, 'rollback' as const),
    rollbackTo: fc.option(id),
    releases: fc.option(
      fc.record({ keep: fc.integer({ min: 1, max: 100 }), healthCheck: fc.option(text(200, 1)) }),
    ),
    commandTimeoutMs: fc.option(fc.integer({ min: 1 })),
    masks: fc.array(text(100, 1), { maxLength: 20 }),
  }),
  fc.record({ type: fc.constant('output.ack' as const), jobId: id, step: stepIndex, offset }),
  fc.record({
    type: fc.constant('job.cancel' as const),
    jobId: id,
    reason: text(500),
    as: fc.constantFrom('cancelled' as const, 'timed_out' as const),
  }),
  fc.record({ type: fc.constant('job.ack' as const), jobId: id }),
);

describe('any valid message encodes and decodes to itself', () => {
  it('from an agent (text and Buffer frames; step.output binary)', () => {
    fc.assert(
      fc.property(agentMessage, (message) => {
        const frame = encodeFrame(message);
        if (typeof frame === 'string') {
          expect(decodeAgentFrame(frame)).toEqual({ ok: true, message });
          expect(decodeAgentFrame(Buffer.from(frame))).toEqual({ ok: true, message });
        } else {
          expect(message.type).toBe('step.output');
          expect(decodeAgentFrame(frame, true)).toEqual({ ok: true, message });
          // Output is never accepted as text.
          expect(decodeAgentFrame(frame, false).ok).toBe(false);
        }
      }),
      RUNS,
    );
  });

  it('from the coordinator (text and Buffer frames)', () => {
    fc.assert(
      fc.property(coordinatorMessage, (message) => {
        const frame = encodeFrame(message);
        expect(decodeCoordinatorFrame(frame)).toEqual({ ok: true, message });
        expect(decodeCoordinatorFrame(Buffer.from(frame))).toEqual({ ok: true, message });
      }),
      RUNS,
    );
  });

  it('a full-size output chunk fits in a frame', () => {
    const message: AgentMessage = {
      type: 'step.output',
      jobId: '0b7c6a8e-2f4d-4a7e-9c1b-5d3e2f1a0b9c',
      step: 10_000,
      seq: 2 ** 32 - 1,
      offset: Number.MAX_SAFE_INTEGER,
      data: Buffer.alloc(MAX_CHUNK_BYTES, 0xff),
    };
    expect(Buffer.byteLength(encodeFrame(message))).toBeLessThanOrEqual(MAX_FRAME_BYTES);
    expect(decodeAgentFrame(encodeFrame(message), true)).toEqual({ ok: true, message });
  });
});

// --- anything at all ----------------------------------------------------------------------------

const decoders = [
  { name: 'agent', decode: decodeAgentFrame, types: Object.keys(AGENT_MESSAGES) },
  { name: 'coordinator', decode: decodeCoordinatorFrame, types: Object.keys(COORDINATOR_MESSAGES) },
] as const;

/** What a frame's size is judged by: its UTF-8 text. */
function frameBytes(raw: unknown): number | null {
  if (typeof raw === 'string') return Buffer.byteLength(raw);
  if (Buffer.isBuffer(raw)) return Buffer.byteLength(raw.toString('utf8'));
  return null;
}

/** Never throws; either a known, schema-valid message or a documented refusal. */
function expectTotal(decode: (raw: unknown) => unknown, types: readonly string[], raw: unknown): void {
  // A throw here fails the property with the input that caused it.
  const result = decode(raw) as ReturnType<typeof decodeAgentFrame>;
  expect(typeof result).toBe('object');
  const bytes = frameBytes(raw);
  if (result.ok) {
    expect(types).toContain(result.message.type);
    expect(bytes).not.toBeNull();
    expect(bytes!).toBeLessThanOrEqual(MAX_FRAME_BYTES);
    // What it decoded to is what the frame said.
    const textOf = typeof raw === 'string' ? raw : (raw as Buffer).toString('utf8');
    expect(result.message).toEqual(JSON.parse(textOf));
  } else {
    expect(Object.keys(result).sort()).toEqual(['code', 'error', 'ok']);
    expect([CloseCode.BAD_FRAME, CloseCode.TOO_LARGE]).toContain(result.code);
    expect(result.code === CloseCode.TOO_LARGE).toBe(bytes !== null && bytes > MAX_FRAME_BYTES);
    const error: unknown = result.error;
    expect(typeof error).toBe('string');
    expect((error as string).length).toBeGreaterThan(0);
  }
}

/** A valid message with one field replaced by anything, removed, or added. */
const brokenMessage = fc
  .tuple(fc.oneof(agentMessage, coordinatorMessage), fc.anything(), fc.nat(), fc.nat(3))
  .map(([message, value, pick, how]) => {
    const copy: Record<string, unknown> = { ...message };
    const keys = Object.keys(copy);
    const key = keys[pick % keys.length]!;
    if (how === 0) delete copy[key];
    else if (how === 1) copy[key] = value;
    else if (how === 2) copy[`extra${pick}`] = value;
    else copy.type = typeof value === 'string' ? value : JSON.stringify(value);
    return copy;
  });

const anyFrame = fc.oneof(
  fc.string({ unit: 'binary', maxLength: 400 }),
  fc.string({ unit: 'grapheme', maxLength: 200 }),
  fc.uint8Array({ maxLength: 400 }).map((b) => Buffer.from(b)),
  fc.json().map((j) => j),
  fc.json().map((j) => Buffer.from(j)),
  fc.jsonValue().map((v) => JSON.stringify(v)),
  fc
    .tuple(fc.constantFrom(...Object.keys(AGENT_MESSAGES), ...Object.keys(COORDINATOR_MESSAGES)), fc.object())
    .map(([type, rest]) => JSON.stringify({ ...rest, type })),
  brokenMessage.map((m) => {
    try {
      return JSON.stringify(m) ?? 'undefined';
    } catch {
      return 'unserialisable';
    }
  }),
  // Valid frames cut short or with bytes flipped.
  fc
    .tuple(fc.oneof(agentMessage, coordinatorMessage), fc.nat(), fc.integer({ min: 0, max: 255 }))
    .map(([m, at, byte]) => {
      const buf = Buffer.from(encodeFrame(m));
      const copy = Buffer.from(buf);
      if (copy.length > 0) copy[at % copy.length] = byte;
      return at % 2 === 0 ? copy : buf.subarray(0, at % (buf.length + 1));
    }),
  // Not text at all.
  fc.anything(),
);

describe('any input never throws, and either decodes or gives {ok: false, code}', () => {
  for (const { name, decode, types } of decoders) {
    it(`for the ${name}'s decoder`, () => {
      fc.assert(
        fc.property(anyFrame, (raw) => expectTotal(decode, types, raw)),
        { numRuns: 1_000 },
      );
    });
  }

  it('judges size by the UTF-8 bytes, with TOO_LARGE exactly past MAX_FRAME_BYTES', () => {
    const base = JSON.stringify({ type: 'job.ack', jobId: '0b7c6a8e-2f4d-4a7e-9c1b-5d3e2f1a0b9c', pad: '' });
    const padTo = (bytes: number, unit: string) => {
      const room = bytes - Buffer.byteLength(base);
      const unitBytes = Buffer.byteLength(unit);
      const pad = unit.repeat(Math.floor(room / unitBytes)) + 'x'.repeat(room % unitBytes);
      return JSON.stringify({ type: 'job.ack', jobId: '0b7c6a8e-2f4d-4a7e-9c1b-5d3e2f1a0b9c', pad });
    };
    for (const unit of ['x', 'é', '😀']) {
      const exact = padTo(MAX_FRAME_BYTES, unit);
      expect(Buffer.byteLength(exact)).toBe(MAX_FRAME_BYTES);
      expect(decodeCoordinatorFrame(exact)).toMatchObject({ ok: true });
      expect(decodeCoordinatorFrame(Buffer.from(exact))).toMatchObject({ ok: true });
      const over = padTo(MAX_FRAME_BYTES + 1, unit);
      expect(decodeCoordinatorFrame(over)).toMatchObject({ ok: false, code: CloseCode.TOO_LARGE });
      expect(decodeCoordinatorFrame(Buffer.from(over))).toMatchObject({
        ok: false,
        code: CloseCode.TOO_LARGE,
      });
    }
  });

  it('survives pathological JSON within the size limit (deep nesting, huge arrays)', () => {
    const depth = 200_000;
    const frames = [
      `{"type":"hello","x":${'['.repeat(depth)}${']'.repeat(depth)}}`,
      `${'['.repeat(depth)}${']'.repeat(depth)}`,
      `{"type":"hello","labels":[${Array.from({ length: 200_000 }, () => '0').join(',')}]}`,
      `{"type":"hello","runningJobs":[${Array.from({ length: 100_000 }, () => '{}').join(',')}]}`,
      `{"type":"step.output","jobId":"x","data":"${'A'.repeat(MAX_FRAME_BYTES - 100)}"}`,
    ];
    for (const frame of frames) {
      expect(Buffer.byteLength(frame)).toBeLessThanOrEqual(MAX_FRAME_BYTES);
      for (const { decode, types } of decoders) expectTotal(decode, types, frame);
    }
  });

  it('refuses a 1 MiB frame whose array breaks its schema within 500 ms (no stall of the event loop)', () => {
    // Every other field right, but far too many labels or running jobs: the schema check itself
    // fails fast, and describing the failure must not walk every element at length — one frame
    // from one agent would otherwise stall the event loop that serves every agent and request.
    const fill = (head: string, item: string) => {
      const count = Math.floor((MAX_FRAME_BYTES - head.length - 2) / (item.length + 1));
      return `${head}${Array.from({ length: count }, () => item).join(',')}]}`;
    };
    const base = `{"type":"hello","protocolVersion":${PROTOCOL_VERSION},"agentVersion":"x","hostname":"h"`;
    const frames = [
      fill(`${base},"runningJobs":[],"labels":[`, '"a"'),
      fill(`${base},"labels":[],"runningJobs":[`, '{}'),
    ];
    const slow: string[] = [];
    for (const frame of frames) {
      expect(Buffer.byteLength(frame)).toBeLessThanOrEqual(MAX_FRAME_BYTES);
      const started = performance.now();
      expectTotal(decodeAgentFrame, decoders[0].types, frame);
      const ms = performance.now() - started;
      if (ms >= 500) slow.push(`${frame.slice(base.length, base.length + 30)}…: ${Math.round(ms)} ms`);
    }
    expect(slow).toEqual([]);
  });
});
