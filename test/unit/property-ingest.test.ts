// Properties of output reassembly through the real ingest (JobService.outputs and the agent hub
// in front of it, on a started coordinator and real PostgreSQL), checked with fast-check:
// any byte string, split into random chunks and delivered with random duplicates, overlapping
// re-sends from an earlier offset and swaps of adjacent frames, in random batches — then re-sent
// from the acknowledged offset, as an agent does — is stored exactly: every byte once, the
// completed entry equal to the original bytes, and no acknowledgement ever beyond what is
// stored contiguously from offset 0. Runs are bounded (a few dozen cases each).
import fc from 'fast-check';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { coordinatorWithAdmin, sampleProject } from '../helpers/coordinator.ts';
import { RawAgent } from '../helpers/faults-coordinator.ts';
import { sql } from '../helpers/sql.ts';

const api = coordinatorWithAdmin({ SCHEDULER_INTERVAL_MS: '100', AGENT_HEARTBEAT_MS: '300' });

let db: pg.Pool;

beforeAll(async () => {
  db = new pg.Pool({ connectionString: api.coord.orm.config.get('clientUrl') as string, max: 2 });
  // The test database is dropped (with force) when the file ends, maybe under a closing client.
  db.on('error', () => undefined);
});

afterAll(async () => {
  await db?.end();
});

// --- the delivery model ----------------------------------------------------------------------

interface Frame {
  offset: number;
  data: Buffer;
}

/** What the network and an agent's outbox may do to the frames of one step. */
type Op =
  | { kind: 'duplicate'; which: number; at: number }
  | { kind: 'resend'; from: number; length: number; at: number }
  | { kind: 'swap'; at: number };

const op: fc.Arbitrary<Op> = fc.oneof(
  fc.record({ kind: fc.constant('duplicate' as const), which: fc.nat(), at: fc.nat() }),
  fc.record({ kind: fc.constant('resend' as const), from: fc.nat(), length: fc.nat(), at: fc.nat() }),
  fc.record({ kind: fc.constant('swap' as const), at: fc.nat() }),
);

const delivery = fc.record({
  bytes: fc.oneof(
    fc.uint8Array({ maxLength: 3000 }),
    fc.string({ unit: 'grapheme', maxLength: 600 }).map((s) => new TextEncoder().encode(s)),
  ),
  cuts: fc.array(fc.nat(), { maxLength: 24 }),
  ops: fc.array(op, { maxLength: 16 }),
  batches: fc.array(fc.integer({ min: 1, max: 6 }), { minLength: 1, maxLength: 8 }),
});

/** The frames an agent sends for `bytes`, in order, then disturbed by `ops`. */
function framesFor(bytes: Buffer, cuts: number[], ops: Op[]): Frame[] {
  const points = [...new Set(cuts.map((c) => (bytes.length > 1 ? 1 + (c % (bytes.length - 1)) : 0)))]
    .filter((p) => p > 0 && p < bytes.length)
    .sort((a, b) => a - b);
  const bounds = bytes.length === 0 ? [] : [0, ...points, bytes.length];
  const frames: Frame[] = [];
  for (let i = 0; i + 1 < bounds.length; i++) {
    frames.push({ offset: bounds[i]!, data: bytes.subarray(bounds[i]!, bounds[i + 1]!) });
  }
  for (const o of ops) {
    if (frames.length === 0) break;
    if (o.kind === 'duplicate') {
      frames.splice(o.at % (frames.length + 1), 0, frames[o.which % frames.length]!);
    } else if (o.kind === 'resend') {
      // A re-send from an earlier offset, overlapping what was sent before.
      const from = o.from % bytes.length;
      const end = from + 1 + (o.length % (bytes.length - from));
      frames.splice(o.at % (frames.length + 1), 0, { offset: from, data: bytes.subarray(from, end) });
    } else if (frames.length > 1) {
      const k = o.at % (frames.length - 1);
      [frames[k], frames[k + 1]] = [frames[k + 1]!, frames[k]!];
    }
  }
  return frames;
}

/** Cuts `frames` into consecutive batches of the given sizes (cycled). */
function batched<T>(frames: T[], sizes: number[]): T[][] {
  const out: T[][] = [];
  for (let i = 0, b = 0; i < frames.length; b++) {
    const size = sizes[b % sizes.length]!;
    out.push(frames.slice(i, i + size));
    i += size;
  }
  return out;
}

// --- what is stored --------------------------------------------------------------------------

interface Stored {
  entryId: string;
  /** Bytes stored contiguously from offset 0. */
  contiguous: Buffer;
  /** Chunks that overlap or leave a gap (each byte must be stored once, in order). */
  irregular: string[];
  output: Buffer | null;
  status: string;
  chunks: number;
}

async function stored(deploymentId: string, host: string, seq: number): Promise<Stored> {
  const { rows: entries } = await db.query(
    'select id, output, status from log_entries where deployment_id = $1 and host = $2 and seq = $3',
    [deploymentId, host, seq],
  );
  expect(entries).toHaveLength(1);
  const entry = entries[0] as { id: string; output: Buffer | null; status: string };
  const { rows } = await db.query(
    'select "offset"::int as "offset", data from log_chunks where log_entry_id = $1 order by "offset"',
    [entry.id],
  );
  const parts: Buffer[] = [];
  const irregular: string[] = [];
  let at = 0;
  for (const row of rows as Array<{ offset: number; data: Buffer }>) {
    if (row.offset !== at) irregular.push(`chunk at ${row.offset} where ${at} was expected`);
    if (row.offset <= at && row.offset + row.data.length > at) {
      parts.push(row.data.subarray(at - row.offset));
      at = row.offset + row.data.length;
    }
  }
  return {
    entryId: entry.id,
    contiguous: Buffer.concat(parts),
    irregular,
    // Chunks are the output (skipped entries hold an empty value instead).
    output: entry.output ?? Buffer.concat(parts),
    status: entry.status,
    chunks: rows.length,
  };
}

// --- a running job of an offline agent, set up through the API and SQL ----------------------

async function runningJob(name: string): Promise<{ agentId: string; jobId: string; deploymentId: string }> {
  const agent = await api.admin.post('/agents', { name, labels: [name] });
  expect(agent.status).toBe(201);
  const project = await api.admin.post('/projects', sampleProject({ target: { agents: { names: [name] } } }));
  expect(project.status).toBe(201);
  const deploy = await api.admin.post('/deploy', { projectId: project.json.project.id });
  expect(deploy.status).toBe(200);
  const deploymentId = deploy.json.deployId as string;
  // The agent never connects: the scheduler leaves it queued; start it by hand, as the scheduler would.
  await sql(
    api.coord,
    `update deployments set status = 'running', commit = ?, hosts = ?, reason = 'Running' where id = ?`,
    ['c'.repeat(40), JSON.stringify([name]), deploymentId],
  );
  const [job] = await sql(
    api.coord,
    `insert into deployment_jobs (id, created_at, deployment_id, agent_id, host, status, sent_at, started_at, lease_expires_at)
     values (gen_random_uuid(), now(), ?, ?, ?, 'running', now(), now(), now() + interval '1 hour') returning id`,
    [deploymentId, agent.json.agent.id, name],
  );
  return { agentId: agent.json.agent.id as string, jobId: job.id as string, deploymentId };
}

describe('output reassembly through JobService.outputs', () => {
  it('stores any byte string exactly, whatever the chunking, duplicates, overlaps and reordering; acks never run ahead', async () => {
    const jobs = api.coord.app.services.jobs;
    const { agentId, jobId, deploymentId } = await runningJob('ingest-direct');
    let step = 0;
    await fc.assert(
      fc.asyncProperty(delivery, async ({ bytes: raw, cuts, ops, batches }) => {
        const bytes = Buffer.from(raw);
        step += 1;
        await jobs.stepStarted(agentId, jobId, step, `case ${step}`);
        let acked = 0;
        const deliver = async (batch: Frame[]) => {
          const acks = await jobs.outputs(
            agentId,
            batch.map((f) => ({ jobId, step, offset: f.offset, data: f.data })),
          );
          expect(acks).toEqual([{ jobId, step, offset: expect.any(Number) }]);
          const ack = acks[0]!.offset;
          const now = await stored(deploymentId, 'ingest-direct', step);
          // Never ahead of what is stored contiguously, never backwards, never past the end.
          expect(ack).toBeLessThanOrEqual(now.contiguous.length);
          expect(ack).toBeGreaterThanOrEqual(acked);
          expect(ack).toBeLessThanOrEqual(bytes.length);
          expect(now.irregular).toEqual([]);
          expect(now.contiguous.equals(bytes.subarray(0, now.contiguous.length))).toBe(true);
          acked = ack;
        };
        for (const batch of batched(framesFor(bytes, cuts, ops), batches)) await deliver(batch);
        // The agent re-sends from the acknowledged offset until everything is acknowledged.
        for (let round = 0; acked < bytes.length; round++) {
          expect(round, 'a re-send from the acknowledged offset was not taken').toBeLessThan(2);
          await deliver([{ offset: acked, data: bytes.subarray(acked) }]);
        }
        const before = await stored(deploymentId, 'ingest-direct', step);
        expect(before.contiguous.equals(bytes)).toBe(true);
        await jobs.stepFinished(agentId, jobId, step, {
          exitCode: 0,
          signal: null,
          outputBytes: bytes.length,
        });
        const done = await stored(deploymentId, 'ingest-direct', step);
        expect(done.status).toBe('success');
        expect(done.irregular).toEqual([]);
        expect((done.output ?? Buffer.alloc(0)).equals(bytes)).toBe(true);
        // A late re-send of the finished step is acknowledged and dropped.
        if (bytes.length > 0) {
          const late = await jobs.outputs(agentId, [{ jobId, step, offset: 0, data: bytes }]);
          expect(late[0]!.offset).toBeGreaterThanOrEqual(bytes.length);
          const after = await stored(deploymentId, 'ingest-direct', step);
          expect((after.output ?? Buffer.alloc(0)).equals(bytes)).toBe(true);
          expect(after.chunks).toBe(done.chunks);
        }
      }),
      { numRuns: 50 },
    );
  }, 120_000);
});

describe('output reassembly through the agent socket (hub batching, binary frames, acks)', () => {
  it('stores any byte string exactly from a raw agent connection; acks never run ahead of what is stored', async () => {
    const name = 'ingest-ws';
    const created = await api.admin.post('/agents', { name, labels: [name] });
    expect(created.status).toBe(201);
    const raw = await RawAgent.welcomed(api.coord.url, created.json.token);
    const project = await api.admin.post(
      '/projects',
      sampleProject({ target: { agents: { names: [name] } }, commands: ['true'] }),
    );
    const deploy = await api.admin.post('/deploy', {
      projectId: project.json.project.id,
      commit: 'd'.repeat(40),
    });
    expect(deploy.status, deploy.text).toBe(200);
    const deploymentId = deploy.json.deployId as string;
    try {
      const assign = await raw.next('job.assign', (m) => m.deploymentId === deploymentId, 15_000);
      const jobId = assign.jobId;
      raw.send({ type: 'job.accepted', jobId });
      // A sentinel step whose acks mark "everything sent before has been handled".
      const SENTINEL = 10_000;
      raw.send({ type: 'step.started', jobId, step: SENTINEL, cmd: 'sentinel' });
      let sentinelBytes = 0;
      const settle = async () => {
        const from = raw.received.length;
        raw.send({
          type: 'step.output',
          jobId,
          step: SENTINEL,
          seq: sentinelBytes,
          offset: sentinelBytes,
          data: Buffer.from('.'),
        });
        sentinelBytes += 1;
        const target = sentinelBytes;
        await raw.next('output.ack', (a) => a.step === SENTINEL && a.offset === target, 10_000, from);
      };
      let step = 0;
      await fc.assert(
        fc.asyncProperty(delivery, async ({ bytes: rawBytes, cuts, ops }) => {
          const bytes = Buffer.from(rawBytes);
          step += 1;
          raw.send({ type: 'step.started', jobId, step, cmd: `case ${step}` });
          const from = raw.received.length;
          // All frames at once, no waiting: the hub batches what arrives while it works.
          framesFor(bytes, cuts, ops).forEach((f, seq) =>
            raw.send({
              type: 'step.output',
              jobId,
              step,
              seq,
              offset: f.offset,
              data: f.data,
            }),
          );
          await settle();
          const ackOffsets = () =>
            raw.received
              .slice(from)
              .filter((m) => m.type === 'output.ack' && m.step === step)
              .map((m) => (m as { offset: number }).offset);
          const now = await stored(deploymentId, name, step);
          const acks = ackOffsets();
          expect(now.irregular).toEqual([]);
          expect(now.contiguous.equals(bytes.subarray(0, now.contiguous.length))).toBe(true);
          // In order, never backwards, never beyond what is stored (stored bytes only grow).
          expect([...acks].sort((a, b) => a - b)).toEqual(acks);
          for (const a of acks) expect(a).toBeLessThanOrEqual(now.contiguous.length);
          // Then the agent re-sends from the last acknowledged offset.
          const acked = acks.at(-1) ?? 0;
          if (acked < bytes.length) {
            raw.send({
              type: 'step.output',
              jobId,
              step,
              seq: 1_000_000,
              offset: acked,
              data: bytes.subarray(acked),
            });
            await settle();
            expect(ackOffsets().at(-1)).toBe(bytes.length);
          }
          raw.send({
            type: 'step.finished',
            jobId,
            step,
            exitCode: 0,
            signal: null,
            outputBytes: bytes.length,
          });
          await settle();
          const done = await stored(deploymentId, name, step);
          expect(done.status).toBe('success');
          expect(done.irregular).toEqual([]);
          expect((done.output ?? Buffer.alloc(0)).equals(bytes)).toBe(true);
          expect(raw.isOpen).toBe(true);
        }),
        { numRuns: 25 },
      );
      raw.send({
        type: 'step.finished',
        jobId,
        step: SENTINEL,
        exitCode: 0,
        signal: null,
        outputBytes: sentinelBytes,
      });
      raw.send({ type: 'job.finished', jobId, status: 'success' });
      await raw.next('job.ack', (m) => m.jobId === jobId, 10_000);
      const detail = await api.admin.get(`/deploy/${deploymentId}`);
      expect(detail.json.deployment.status).toBe('success');
      expect(raw.undecodable).toEqual([]);
    } finally {
      raw.close();
      // Let the coordinator record the disconnect before it stops (see coordinator-shutdown.test.ts).
      await new Promise((resolve) => setTimeout(resolve, 500));
    }
  }, 120_000);
});
