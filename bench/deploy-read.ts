// deploy-read: `GET /deploy/:id` of a deployment with 200 log entries, under load (autocannon, in a
// process of its own), against the same JSON served by a bare Fastify route from memory and by a
// bare `node:http` server doing the same queries with raw `pg` and `JSON.stringify`.
//
// The deployment is real: two real agents, a project of 99 commands each printing
// BENCH_READ_LINES (5) lines, deployed on both, so 2 × (checkout + 99) = 200 entries whose output
// lives in log_chunks as the product stores it. Every server's answer is checked to be the same
// JSON as the product's before the rounds.
//
// Two phases, each with a warm-up and then rounds of the three servers interleaved in rotating
// order: (1) as fast as BENCH_READ_CONNECTIONS (10) keep-alive connections go, for
// BENCH_READ_SECONDS (5): requests/s; (2) at a fixed rate for the same time: p99 latency. The rate
// is BENCH_READ_RATE, or by default half of the product's median requests/s from phase 1, so the
// product is loaded but not saturated. Every request must answer 2xx.
import { spawn } from 'node:child_process';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import { isDeepStrictEqual } from 'node:util';
import Fastify from 'fastify';
import pg from 'pg';
import {
  type Benchmark,
  type BenchOutcome,
  type Cleanup,
  envInt,
  fmt,
  interleave,
  median,
  sleep,
} from './lib/harness.ts';
import type { LoadOptions, LoadResult } from './lib/http-load.ts';
import { FINAL_STATUSES, startProduct } from './lib/product.ts';

const COMMANDS = 99;

/** One autocannon run in a child process. */
async function load(opts: LoadOptions): Promise<LoadResult> {
  const script = fileURLToPath(new URL('./lib/http-load.ts', import.meta.url));
  const child = spawn(process.execPath, [script, JSON.stringify(opts)], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let out = '';
  child.stdout.setEncoding('utf8').on('data', (d: string) => (out += d));
  const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
  if (code !== 0) throw new Error(`http-load exited ${code}: ${out}`);
  const result = JSON.parse(out.trim().split('\n').pop()!) as LoadResult;
  if (result.non2xx > 0 || result.errors > 0) {
    throw new Error(`${opts.url}: ${result.non2xx} non-2xx answers, ${result.errors} errors`);
  }
  return result;
}

async function listen(server: http.Server): Promise<string> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

interface EntryRow {
  id: string;
  host: string;
  cmd: string;
  status: string;
  success: boolean;
  exit_code: number | null;
  started_at: Date;
  finished_at: Date | null;
  output: Buffer | null;
}

/**
 * The raw baseline: node:http, one pg pool the size of the coordinator's, and per request the
 * queries the product makes — the session (by its stored hash: this server does not decrypt the
 * cookie), the deployment with its project, its entries with their output — then JSON.stringify.
 */
async function startRawServer(cleanup: Cleanup, dbUrl: string, sessionHash: string): Promise<string> {
  const pool = new pg.Pool({ connectionString: dbUrl, max: 5 });
  pool.on('error', () => undefined);
  cleanup.defer('raw pg server pool', () => pool.end());
  const iso = (d: Date | null) => (d ? d.toISOString() : null);
  const answer = async (id: string) => {
    const session = await pool.query({
      name: 'session',
      text: `select u.id, u.role from sessions s join users u on u.id = s.user_id
              where s.id = $1 and s.revoked_at is null and s.expires_at > now()`,
      values: [sessionHash],
    });
    if (session.rows.length === 0) return null;
    const d = await pool.query({
      name: 'deployment',
      text: `select d.id, d.project_id, d.started_at, d.finished_at, d.status, d.commit, d.branch, d.trigger,
                    d.triggered_by, d.reason, d.hosts, p.name, p.forge_url, p.branch_name
               from deployments d join projects p on p.id = d.project_id where d.id = $1`,
      values: [id],
    });
    const row = d.rows[0];
    if (!row) return null;
    const entries = await pool.query<EntryRow>({
      name: 'entries',
      text: `select e.id, e.host, e.cmd, e.status, e.success, e.exit_code, e.started_at, e.finished_at,
                    coalesce(e.output, (select string_agg(c.data, ''::bytea order by c."offset")
                                          from log_chunks c where c.log_entry_id = e.id)) as output
               from log_entries e where e.deployment_id = $1 order by e.started_at, e.seq, e.host`,
      values: [id],
    });
    return {
      success: true,
      deployment: {
        id: row.id,
        proj_id: row.project_id,
        started_at: iso(row.started_at),
        finished_at: iso(row.finished_at),
        status: row.status,
        commit: row.commit,
        branch: row.branch,
        trigger: row.trigger,
        triggered_by: row.triggered_by,
        reason: row.reason,
        hosts: row.hosts,
      },
      logs: entries.rows.map((e) => ({
        id: e.id,
        deploy_id: row.id,
        host: e.host,
        cmd: e.cmd,
        log: e.output ? e.output.toString('utf8') : '',
        success: e.success,
        status: e.status,
        exit_code: e.exit_code,
        started_at: iso(e.started_at),
        finished_at: iso(e.finished_at),
      })),
      project: { id: row.project_id, name: row.name, forge_url: row.forge_url, branch_name: row.branch_name },
    };
  };
  const server = http.createServer((req, res) => {
    const m = /^\/deploy\/([0-9a-f-]{36})$/.exec(req.url ?? '');
    if (req.method !== 'GET' || !m) {
      res.writeHead(404).end();
      return;
    }
    answer(m[1]!).then(
      (body) => {
        if (!body) {
          res.writeHead(404).end();
          return;
        }
        res.writeHead(200, { 'content-type': 'application/json; charset=utf-8' });
        res.end(JSON.stringify(body));
      },
      (err: Error) => res.writeHead(500).end(err.message),
    );
  });
  cleanup.defer('raw pg server', () => new Promise((resolve) => server.close(resolve)));
  return listen(server);
}

/** The ceiling: a bare Fastify app whose route answers the product's JSON, held in memory. */
async function startMemoryServer(cleanup: Cleanup, body: unknown): Promise<string> {
  const app = Fastify();
  app.get('/deploy/:id', async () => body);
  cleanup.defer('in-memory Fastify', () => app.close());
  await app.listen({ host: '127.0.0.1', port: 0 });
  return `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
}

export const deployRead: Benchmark = {
  name: 'deploy-read',
  description:
    'GET /deploy/:id (200 log entries) under load, vs a bare Fastify route from memory and raw pg + JSON.stringify',
  async run({ cleanup, log }): Promise<BenchOutcome> {
    const lines = envInt('BENCH_READ_LINES', 5);
    const seconds = envInt('BENCH_READ_SECONDS', 5);
    const connections = envInt('BENCH_READ_CONNECTIONS', 10);
    const warmups = envInt('BENCH_READ_WARMUPS', 1);
    const rounds = envInt('BENCH_READ_ROUNDS', 3);
    const fixedRate = envInt('BENCH_READ_RATE', 0);

    log('deploy-read: starting the coordinator and two agents; deploying 2 × 100 entries');
    const product = await startProduct(cleanup, 'read', {}, { agents: 2 });
    const commands = Array.from(
      { length: COMMANDS },
      (_, i) =>
        `for n in $(seq 1 ${lines}); do echo "step ${i + 1}: line $n of the build output, about sixty bytes long"; done`,
    );
    const created = await product.admin.post('/projects', {
      name: 'read',
      forge_url: product.forgeUrl,
      branch_name: 'main',
      commands,
      target: { agents: { names: product.agents.map((a) => a.name) } },
    });
    if (created.status !== 201) throw new Error(`POST /projects: ${created.status} ${created.text}`);
    const id = await product.deploy(created.json.project.id as string);
    const deadline = Date.now() + 180_000;
    let detail = await product.admin.get(`/deploy/${id}`);
    while (!FINAL_STATUSES.has(detail.json?.deployment?.status)) {
      if (Date.now() > deadline)
        throw new Error(`deployment ${id} did not end\n${await product.diagnostics()}`);
      await sleep(200);
      detail = await product.admin.get(`/deploy/${id}`);
    }
    const logs = detail.json.logs as Array<{ log: string }>;
    if (detail.json.deployment.status !== 'success' || logs.length !== 2 * (COMMANDS + 1)) {
      throw new Error(
        `deployment ${id}: ${detail.json.deployment.status} with ${logs.length} entries, expected success with ${2 * (COMMANDS + 1)}`,
      );
    }
    const body = detail.json as unknown;
    const bodyBytes = Buffer.byteLength(detail.text);

    const { rows: sessions } = await product.pool.query<{ id: string }>(
      'select id from sessions where revoked_at is null order by created_at desc limit 1',
    );
    const dbUrl = String(product.coord.orm.config.get('clientUrl'));
    const servers = {
      product: `${product.coord.url}/deploy/${id}`,
      memory: `${await startMemoryServer(cleanup, body)}/deploy/${id}`,
      raw: `${await startRawServer(cleanup, dbUrl, sessions[0]!.id)}/deploy/${id}`,
    };
    const headers = { cookie: product.admin.cookie ?? '', accept: 'application/json' };
    for (const [name, url] of Object.entries(servers)) {
      const res = await fetch(url, { headers });
      const json = (await res.json()) as unknown;
      if (res.status !== 200 || !isDeepStrictEqual(json, body)) {
        throw new Error(`deploy-read: the ${name} server's answer differs from the product's`);
      }
    }

    const contestants = (rate: number | undefined) =>
      (Object.keys(servers) as Array<keyof typeof servers>).map((name) => ({
        name,
        round: () => load({ url: servers[name], connections, seconds, rate, headers }),
      }));
    const max = await interleave(contestants(undefined), { warmups, rounds, log, label: 'deploy-read max' });
    const rps = (name: string) => median(max.get(name)!.map((r) => r.rps));
    const rate = fixedRate || Math.max(1, Math.round(rps('product') / 2));
    log(`deploy-read: fixed rate ${rate} requests/s`);
    const fixed = await interleave(contestants(rate), { warmups, rounds, log, label: 'deploy-read rate' });
    const p99 = (name: string) => median(fixed.get(name)!.map((r) => r.p99));
    const p50 = (name: string) => median(fixed.get(name)!.map((r) => r.p50));

    const figure = `median requests/s, ${connections} connections`;
    const latencyFigure = `p99 ms at ${rate} requests/s`;
    const perRound = (m: Map<string, LoadResult[]>, f: (r: LoadResult) => number) =>
      ['product', 'memory', 'raw'].map((n) => `${n} ${m.get(n)!.map(f).map(fmt).join(' ')}`).join('; ');
    return {
      rows: [
        {
          benchmark: 'deploy-read',
          figure,
          product: rps('product'),
          baseline: rps('memory'),
          baselineName: 'bare Fastify route, the same JSON from memory (aim ≥ 0.5)',
          ratio: rps('product') / rps('memory'),
          ratioIs: 'product/baseline',
        },
        {
          benchmark: 'deploy-read',
          figure,
          product: rps('product'),
          baseline: rps('raw'),
          baselineName: 'node:http + raw pg (same queries) + JSON.stringify (aim ≥ 0.8)',
          ratio: rps('product') / rps('raw'),
          ratioIs: 'product/baseline',
        },
        {
          benchmark: 'deploy-read',
          figure: latencyFigure,
          product: p99('product'),
          baseline: p99('memory'),
          baselineName: 'bare Fastify route from memory (aim ≥ 0.5: p99 ≤ 2× its)',
          ratio: p99('memory') / p99('product'),
          ratioIs: 'baseline/product',
        },
        {
          benchmark: 'deploy-read',
          figure: latencyFigure,
          product: p99('product'),
          baseline: p99('raw'),
          baselineName: 'node:http + raw pg + JSON.stringify',
          ratio: p99('raw') / p99('product'),
          ratioIs: 'baseline/product',
        },
      ],
      notes: [
        `deploy-read: a deployment of ${logs.length} entries (2 hosts × (checkout + ${COMMANDS} commands of ${lines} lines)), ` +
          `${fmt(bodyBytes / 1024)} KiB of JSON; autocannon in a child process, ${seconds} s per run, ${rounds} rounds after ${warmups} warm-up(s) per phase.`,
        `deploy-read: requests/s per round: ${perRound(max, (r) => r.rps)}.`,
        `deploy-read: at ${rate} requests/s, p50 ms: product ${fmt(p50('product'))}, memory ${fmt(p50('memory'))}, raw ${fmt(p50('raw'))}; ` +
          `p99 per round: ${perRound(fixed, (r) => r.p99)}.`,
      ],
    };
  },
};
