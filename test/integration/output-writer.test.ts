// OutputWriter (coordinator/src/modules/deployment/output-writer.ts): output batches from many
// connections go into PostgreSQL together, a statement per free pool connection, and a batch
// PostgreSQL refuses fails alone.
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { OutputWriter } from '../../coordinator/src/modules/deployment/output-writer.ts';
import { coordinatorWithAdmin } from '../helpers/coordinator.ts';
import { deploymentTools } from '../helpers/deployments.ts';
import { ENTRY_OUTPUT, sql } from '../helpers/sql.ts';

const api = coordinatorWithAdmin();
const { createProject, deploy } = deploymentTools(api);

let pool: pg.Pool;
let statements = 0;

beforeAll(async () => {
  pool = new pg.Pool({ connectionString: api.coord.orm.config.get('clientUrl') as string, max: 1 });
  // The test database is dropped (with force) when the file ends, maybe under a closing client.
  pool.on('error', () => undefined);
  // Counts the statements the writer sends (the real pool still runs them).
  const query = pool.query.bind(pool) as (...args: unknown[]) => Promise<unknown>;
  (pool as unknown as { query: (...args: unknown[]) => Promise<unknown> }).query = (...args) => {
    statements++;
    return query(...args);
  };
});

afterAll(async () => {
  await pool?.end();
});

async function entries(n: number): Promise<string[]> {
  const deployId = await deploy((await createProject()).id);
  const ids = Array.from({ length: n }, () => randomUUID());
  for (const [seq, id] of ids.entries()) {
    await sql(
      api.coord,
      `insert into log_entries (id, created_at, deployment_id, seq, host, cmd, status, success, started_at)
       values (?, now(), ?, ?, 'web-1', 'make', 'running', false, now())`,
      [id, deployId, seq],
    );
  }
  return ids;
}

const outputOf = async (id: string) =>
  (
    (await sql(api.coord, `select ${ENTRY_OUTPUT} as output from log_entries e where e.id = ?`, [id]))[0]
      .output as Buffer
  ).toString();

describe('OutputWriter', () => {
  it('stores batches written at once in fewer statements than batches, every byte in place', async () => {
    const ids = await entries(40);
    const writer = new OutputWriter(pool, 1);
    statements = 0;
    await Promise.all(
      ids.flatMap((id) => [
        writer.write([{ entryId: id, offset: 0, data: Buffer.from(`first ${id}\n`) }]),
        writer.write([{ entryId: id, offset: 100, data: Buffer.from('second\n') }]),
      ]),
    );
    // One slot: the first batch alone, then everything that waited meanwhile.
    expect(statements).toBeLessThan(10);
    for (const id of ids) {
      const rows = await sql(api.coord, 'select "offset" from log_chunks where log_entry_id = ? order by 1', [
        id,
      ]);
      expect(rows.map((r) => Number(r.offset))).toEqual([0, 100]);
      expect(await outputOf(id)).toBe(`first ${id}\nsecond\n`);
    }
  });

  it('fails only the batch PostgreSQL refuses; the others in its statement are stored', async () => {
    const [a, b] = await entries(2);
    const writer = new OutputWriter(pool, 1);
    const blocker = writer.write([{ entryId: a!, offset: 0, data: Buffer.from('x') }]);
    const results = await Promise.allSettled([
      writer.write([{ entryId: a!, offset: 1, data: Buffer.from('a\n') }]),
      writer.write([{ entryId: randomUUID(), offset: 0, data: Buffer.from('no such entry') }]),
      writer.write([{ entryId: b!, offset: 0, data: Buffer.from('b\n') }]),
    ]);
    await blocker;
    expect(results.map((r) => r.status)).toEqual(['fulfilled', 'rejected', 'fulfilled']);
    expect(String((results[1] as PromiseRejectedResult).reason)).toMatch(/foreign key/);
    expect(await outputOf(a!)).toBe('xa\n');
    expect(await outputOf(b!)).toBe('b\n');
  });

  it('skips offsets already stored (a re-sent batch), keeping the first bytes', async () => {
    const [a] = await entries(1);
    const writer = new OutputWriter(pool, 1);
    await writer.write([{ entryId: a!, offset: 0, data: Buffer.from('kept\n') }]);
    await writer.write([{ entryId: a!, offset: 0, data: Buffer.from('lost\n') }]);
    expect(await outputOf(a!)).toBe('kept\n');
  });

  it('writes a batch of more rows than one statement may hold, in order', async () => {
    const [a] = await entries(1);
    const writer = new OutputWriter(pool, 1);
    const rows = Array.from({ length: 5000 }, (_, i) => ({
      entryId: a!,
      offset: i,
      data: Buffer.from([97 + (i % 26)]),
    }));
    await writer.write(rows);
    const expected = rows.map((r) => String.fromCharCode(r.data[0]!)).join('');
    expect(await outputOf(a!)).toBe(expected);
  });
});
