// Backpressure with real processes: a command prints ~40 MB as fast as it can while the network
// between agent and coordinator is cut for 2 s in the middle of the transfer. The agent's memory
// stays bounded (unacknowledged output goes to spool files), the deployment succeeds, and what
// is stored is exactly what was printed (length and SHA-256, computed in PostgreSQL).
import { createHash } from 'node:crypto';
import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { faultHarness, sleep, waitFor } from '../helpers/fault-harness.ts';
import { sampleRss } from '../helpers/fault-processes.ts';
import { ENTRY_OUTPUT, sql } from '../helpers/sql.ts';

const N = 5_000_000; // `seq 1 5000000`: 38,888,896 bytes

/** Length and SHA-256 of `seq 1 n` as printed, computed here in pieces. */
function seqDigest(n: number): { length: number; sha256: string } {
  const hash = createHash('sha256');
  let length = 0;
  const step = 100_000;
  for (let from = 1; from <= n; from += step) {
    const parts: string[] = [];
    for (let i = from; i < Math.min(n + 1, from + step); i++) parts.push(`${i}\n`);
    const piece = Buffer.from(parts.join(''));
    length += piece.length;
    hash.update(piece);
  }
  return { length, sha256: hash.digest('hex') };
}

/** Bytes in the agent's spool files right now. */
function spoolBytes(workDir: string): number {
  const dir = join(workDir, '.deckhand', 'spool');
  let total = 0;
  try {
    for (const f of readdirSync(dir)) {
      try {
        total += statSync(join(dir, f)).size;
      } catch {
        // deleted meanwhile (acknowledged)
      }
    }
  } catch {
    // no folder yet
  }
  return total;
}

describe('backpressure', () => {
  // A lease well beyond the cut and the reconnect backoff that follows it: the job must survive.
  // Heartbeat 1 s: with 300 ms, a 600 ms stall of either busy process (2 cores shared by the
  // coordinator, PostgreSQL, the agent and `seq`) already reads as a dead connection.
  const h = faultHarness({
    AGENT_HEARTBEAT_MS: '1000',
    AGENT_LEASE_MS: '15000',
    OUTPUT_LIMIT_BYTES: String(64 * 1024 * 1024),
  });

  it('~40 MB printed flat out through a 2 s network cut: agent RSS bounded, success, stored length and SHA-256 exact', async () => {
    const expected = seqDigest(N);
    expect(expected.length).toBe(38_888_896);
    const a = await h.launchAgent({ viaProxy: true });
    const cmd = `seq 1 ${N}`;
    const { id: projectId } = await h.createProject(a, { commands: [cmd, 'echo after'] });
    const rss = sampleRss(a.pid, 100);
    let maxSpool = 0;
    const spoolTimer = setInterval(() => (maxSpool = Math.max(maxSpool, spoolBytes(a.agent.workDir))), 100);
    const startedAt = Date.now();
    try {
      const id = await h.deploy(projectId);
      const status = async (): Promise<string> =>
        (await sql(h.coord, 'select status from deployments where id = ?', [id]))[0].status;

      // The middle of the transfer: about a third of the output stored.
      const storedSoFar = async () => {
        const [row = { n: 0 }] = await sql(
          h.coord,
          `select coalesce((select max(c."offset" + length(c.data)) from log_chunks c where c.log_entry_id = e.id),
                           e.output_bytes) as n
             from log_entries e where e.deployment_id = ? and e.cmd = ?`,
          [id, cmd],
        );
        return Number(row.n);
      };
      const before = await waitFor(
        'a third of the output stored',
        async () => {
          const n = await storedSoFar();
          return n >= expected.length / 3 ? n : undefined;
        },
        { timeoutMs: 60_000, everyMs: 50, explain: () => h.agentOutput().slice(-4000) },
      );
      expect(before).toBeLessThan(expected.length);
      a.proxy!.cut();
      await sleep(2_000);
      const during = await storedSoFar();
      expect(await status()).toBe('running');
      a.proxy!.restore();

      // Watched through SQL: GET /deploy/:id would ship the whole log (tens of MB) on every poll.
      await waitFor('the deployment to end', async () => !['queued', 'running'].includes(await status()), {
        timeoutMs: 80_000,
        everyMs: 200,
        explain: () => h.agentOutput().slice(-4000),
      });
      const elapsed = Date.now() - startedAt;
      // Counted before anything else reads the big entry: at least the reconnect after the cut.
      const connects = (a.agent.output().match(/"msg":"connected"/g) ?? []).length;
      const { maxBytes, samples } = rss.stop();
      clearInterval(spoolTimer);
      console.log(
        `backpressure: ${elapsed} ms, agent max RSS ${(maxBytes / 2 ** 20).toFixed(1)} MiB over ${samples} samples, ` +
          `max spool ${(maxSpool / 2 ** 20).toFixed(1)} MiB, stored before/after the cut ${before}/${during}, ` +
          `${connects} connections`,
      );
      expect(await status()).toBe('success');
      expect(maxBytes).toBeLessThan(300 * 1024 * 1024);
      expect(samples).toBeGreaterThan(10);
      // The cut came while output was unacknowledged: past the memory bound it went to disk.
      expect(maxSpool).toBeGreaterThan(0);
      expect(connects).toBeGreaterThanOrEqual(2);

      // Read in PostgreSQL: length and digest of the stored bytes, not tens of MB over HTTP.
      const entries = await sql(
        h.coord,
        `select cmd, status, exit_code, length(${ENTRY_OUTPUT}) as length, output_bytes,
                encode(sha256(${ENTRY_OUTPUT}), 'hex') as sha256
           from log_entries e where deployment_id = ? order by seq`,
        [id],
      );
      const entry = entries.find((e) => e.cmd === cmd);
      expect(entry).toMatchObject({ status: 'success', exit_code: 0 });
      expect({ length: Number(entry.length), sha256: entry.sha256 }).toEqual(expected);
      expect(Number(entry.output_bytes)).toBe(expected.length);
      expect(entries.find((e) => e.cmd === 'echo after')).toMatchObject({ status: 'success', length: 6 });
      expect(h.strays()).toEqual([]);
    } finally {
      rss.stop();
      clearInterval(spoolTimer);
    }
  }, 90_000);
});
