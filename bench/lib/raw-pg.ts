// The database baselines of log-ingest: N clients (one `pg` connection each, as N agents are N
// streams) write the same bytes as the product, in the same 256 KiB chunks, into a table shaped
// like log_chunks, all at once. Two ways: multi-row INSERTs with bound parameters (`batch` rows per
// autocommit statement, the product's way at its best), and one binary COPY per client (the ceiling:
// the fastest way PostgreSQL takes rows). No schema validation, no bookkeeping.
import { randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import pg from 'pg';
import { from as copyFrom } from 'pg-copy-streams';
import { createTestDatabase } from '../../test/helpers/database.ts';
import type { Cleanup } from './harness.ts';

export interface RawPgIngest {
  /** The server processes serving the clients (pg_backend_pid), for their CPU time. */
  readonly backendPids: number[];
  /** Every client INSERTs its bytes, `batch` chunks per statement, concurrently: ms until the last is done. */
  insertRound(batch: number): Promise<number>;
  /** Every client COPYs its bytes (binary format, one COPY each), concurrently: ms until the last is done. */
  copyRound(): Promise<number>;
}

interface Chunk {
  offset: number;
  data: Buffer;
}

// PostgreSQL's binary COPY: a signature, flags and a header extension length, then tuples (a field
// count, then each field's length and bytes, big-endian), then -1.
const COPY_SIGNATURE = Buffer.from('PGCOPY\n\xff\r\n\0', 'latin1');
const POSTGRES_EPOCH_MS = Date.UTC(2000, 0, 1);

function copyHeader(): Buffer {
  const b = Buffer.alloc(COPY_SIGNATURE.length + 8);
  COPY_SIGNATURE.copy(b, 0);
  return b; // flags 0, header extension length 0
}

/** The fields before `data`: field count, log_entry_id (uuid), offset (int8), data's length. */
function tupleHead(entry: Buffer, offset: number, dataLength: number): Buffer {
  const b = Buffer.alloc(2 + 4 + 16 + 4 + 8 + 4);
  let at = b.writeInt16BE(4, 0);
  at = b.writeInt32BE(16, at);
  at += entry.copy(b, at);
  at = b.writeInt32BE(8, at);
  at = b.writeBigInt64BE(BigInt(offset), at);
  b.writeInt32BE(dataLength, at);
  return b;
}

/** created_at (timestamptz: microseconds since 2000-01-01 UTC). */
function timestampField(ms: number): Buffer {
  const b = Buffer.alloc(4 + 8);
  b.writeInt32BE(8, 0);
  b.writeBigInt64BE(BigInt(Math.round(ms - POSTGRES_EPOCH_MS)) * 1000n, 4);
  return b;
}

function* copyTuples(entryId: string, chunks: Chunk[]): Generator<Buffer> {
  const entry = Buffer.from(entryId.replaceAll('-', ''), 'hex');
  yield copyHeader();
  for (const c of chunks) {
    yield tupleHead(entry, c.offset, c.data.length);
    yield c.data;
    yield timestampField(Date.now());
  }
  const trailer = Buffer.alloc(2);
  trailer.writeInt16BE(-1, 0);
  yield trailer;
}

export async function startRawPgIngest(
  cleanup: Cleanup,
  data: Buffer[],
  chunkBytes: number,
): Promise<RawPgIngest> {
  const db = await createTestDatabase();
  cleanup.defer('raw pg database', () => db.drop());
  const clients: pg.Client[] = [];
  for (let i = 0; i < data.length; i++) {
    const client = new pg.Client({ connectionString: db.url });
    client.on('error', () => undefined);
    await client.connect();
    cleanup.defer(`raw pg connection ${i + 1}`, () => client.end());
    clients.push(client);
  }
  const admin = clients[0]!;
  await admin.query(`create table bench_log_entries (id uuid primary key)`);
  await admin.query(
    `create table bench_log_chunks (
       id bigserial primary key,
       log_entry_id uuid not null references bench_log_entries (id) on delete cascade,
       "offset" bigint not null,
       data bytea not null,
       created_at timestamptz(3) not null,
       unique (log_entry_id, "offset"))`,
  );
  const backendPids: number[] = [];
  for (const c of clients) {
    const { rows } = await c.query<{ pid: number }>('select pg_backend_pid() as pid');
    backendPids.push(rows[0]!.pid);
  }
  const perClient: Chunk[][] = data.map((bytes) => {
    const chunks: Chunk[] = [];
    for (let at = 0; at < bytes.length; at += chunkBytes) {
      chunks.push({ offset: at, data: bytes.subarray(at, at + chunkBytes) });
    }
    return chunks;
  });
  const total = data.reduce((n, b) => n + b.length, 0);

  /** A fresh entry per client, then `write` for all clients at once; checks every byte landed. */
  const round = async (write: (client: pg.Client, entryId: string, chunks: Chunk[]) => Promise<void>) => {
    await admin.query('truncate bench_log_chunks, bench_log_entries');
    const entryIds = clients.map(() => randomUUID());
    await admin.query('insert into bench_log_entries (id) select unnest($1::uuid[])', [entryIds]);
    const start = performance.now();
    await Promise.all(clients.map((c, i) => write(c, entryIds[i]!, perClient[i]!)));
    const ms = performance.now() - start;
    const { rows } = await admin.query<{ n: string; bytes: string }>(
      'select count(*) as n, coalesce(sum(length(data)), 0) as bytes from bench_log_chunks',
    );
    const chunks = perClient.reduce((n, c) => n + c.length, 0);
    if (Number(rows[0]!.n) !== chunks || Number(rows[0]!.bytes) !== total) {
      throw new Error(
        `raw pg: stored ${rows[0]!.n} rows, ${rows[0]!.bytes} bytes; expected ${chunks}, ${total}`,
      );
    }
    return ms;
  };

  return {
    backendPids,
    insertRound(batch) {
      return round(async (client, entryId, chunks) => {
        for (let i = 0; i < chunks.length; i += batch) {
          const rows = chunks.slice(i, i + batch);
          const values = rows.map((_, j) => `($1, $${2 * j + 2}, $${2 * j + 3}, now())`).join(', ');
          await client.query(
            `insert into bench_log_chunks (log_entry_id, "offset", data, created_at) values ${values}
             on conflict (log_entry_id, "offset") do nothing`,
            [entryId, ...rows.flatMap((c) => [c.offset, c.data])],
          );
        }
      });
    },
    copyRound() {
      return round(async (client, entryId, chunks) => {
        const stream = client.query(
          copyFrom(
            `copy bench_log_chunks (log_entry_id, "offset", data, created_at) from stdin with (format binary)`,
          ),
        );
        await pipeline(Readable.from(copyTuples(entryId, chunks)), stream);
      });
    },
  };
}
