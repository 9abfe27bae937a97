// ws-fan-in: many simulated agents streaming small output frames at once through the coordinator's
// real agent hub into PostgreSQL, against a bare `ws` server with the same framing.
//
// Simulated agents (lib/agent-swarm.ts, one process): BENCH_FANIN_AGENTS (200) bare ws clients,
// each with a real agent token, the agent's zero masking key and binary step.output frames.
// Product: each agent is the only target of a project of its own; a round deploys the lot, every
// agent answers its job.assign (accepted, step 0 started and finished, step 1 started), and once
// every step-1 entry exists in PostgreSQL, every agent sends BENCH_FANIN_FRAMES (500) frames of
// BENCH_FANIN_FRAME_BYTES (512) bytes, keeping at most BENCH_FANIN_WINDOW_KIB (64) KiB
// unacknowledged, as the agent's own bound does at a larger size. The figure: frames / (go → last
// byte acknowledged, i.e. stored). Afterwards every job finishes and the stored byte counts are
// checked. Baseline (lib/bare-agent-server.ts, in this process like the coordinator): the same
// swarm, the same frames, decoded by the same codec and acknowledged once per connection per
// event-loop turn, nothing stored. Rounds interleaved after warm-ups.
import { type Benchmark, type BenchOutcome, envInt, fmt, interleave, median, sleep } from './lib/harness.ts';
import { startBareAgentServer } from './lib/bare-agent-server.ts';
import { FINAL_STATUSES, startProduct } from './lib/product.ts';
import { startSwarm } from './lib/swarm.ts';

interface Done {
  ev: 'done';
  ms: number;
  frames: number;
  acks: number;
}

/** Runs `f` over `items`, `limit` at a time. */
async function pool<T, R>(items: T[], limit: number, f: (item: T) => Promise<R>): Promise<R[]> {
  const out: R[] = new Array(items.length);
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(limit, items.length) }, async () => {
      while (next < items.length) {
        const i = next++;
        out[i] = await f(items[i]!);
      }
    }),
  );
  return out;
}

export const wsFanIn: Benchmark = {
  name: 'ws-fan-in',
  description:
    'many simulated agents streaming output frames through the agent hub into PostgreSQL, vs a bare ws server with the same framing',
  async run({ cleanup, log }): Promise<BenchOutcome> {
    const n = envInt('BENCH_FANIN_AGENTS', 200);
    const frames = envInt('BENCH_FANIN_FRAMES', 500);
    const frameBytes = envInt('BENCH_FANIN_FRAME_BYTES', 512);
    const windowBytes = envInt('BENCH_FANIN_WINDOW_KIB', 64) * 1024;
    const warmups = envInt('BENCH_FANIN_WARMUPS', 1);
    const rounds = envInt('BENCH_FANIN_ROUNDS', 5);
    if (n < 1 || frames < 1 || frameBytes < 1) throw new Error('ws-fan-in needs agents, frames and bytes');

    log(`ws-fan-in: ${n} simulated agents; registering them and their projects`);
    const product = await startProduct(cleanup, 'fanin');
    const names = Array.from({ length: n }, (_, i) => `fan-in-${i + 1}`);
    const tokens = await pool(names, 8, async (name) => {
      const res = await product.admin.post('/agents', { name, labels: ['fan-in'] });
      if (res.status !== 201) throw new Error(`POST /agents: ${res.status} ${res.text}`);
      return res.json.token as string;
    });
    const projects = await pool(names, 8, (name) => product.createProject(name, ['stream'], name));

    const productSwarm = await startSwarm(cleanup, 'product');
    const wsUrl = `${product.coord.url.replace(/^http/, 'ws')}/agent/ws`;
    const connected = await productSwarm.command<{ ev: string; ms: number }>({
      cmd: 'connect',
      url: wsUrl,
      tokens,
    });
    log(`ws-fan-in: ${n} agents connected to the coordinator in ${fmt(connected.ms)} ms`);

    const bare = await startBareAgentServer();
    cleanup.defer('bare agent server', () => bare.close());
    const bareSwarm = await startSwarm(cleanup, 'baseline');
    await bareSwarm.command({ cmd: 'connect', url: bare.url, tokens: names.map(() => 'dha_bench') });

    const go = { cmd: 'go', frames, frameBytes, windowBytes };
    const total = n * frames;
    const acks = new Map<string, number[]>([
      ['product', []],
      ['baseline', []],
    ]);

    const productRound = async (): Promise<number> => {
      // Two at a time: POST /deploy holds a transaction's connection while it takes a second one
      // (DeploymentService.triggerIn → #waitingFor), so as many concurrent triggers as the pool
      // has connections wait for each other forever (reported; not the benchmark's to fix).
      const ids = await pool(projects, 2, (p) => product.deploy(p));
      await productSwarm.command({ cmd: 'prepare' });
      // step.started is handled in order before any output: wait until every entry exists.
      for (let deadline = Date.now() + 60_000; ;) {
        const { rows } = await product.pool.query<{ n: string }>(
          'select count(*) as n from log_entries where deployment_id = any($1::uuid[]) and seq = 1',
          [ids],
        );
        if (Number(rows[0]!.n) === n) break;
        if (Date.now() > deadline) throw new Error(`ws-fan-in: step 1 entries: ${rows[0]!.n} of ${n}`);
        await sleep(20);
      }
      const done = await productSwarm.command<Done>(go);
      await productSwarm.command({ cmd: 'finish' });
      for (let deadline = Date.now() + 60_000; ;) {
        const { rows } = await product.pool.query<{ status: string; bytes: string | null }>(
          `select d.status, e.output_bytes as bytes
             from deployments d left join log_entries e on e.deployment_id = d.id and e.seq = 1
            where d.id = any($1::uuid[])`,
          [ids],
        );
        if (rows.length === n && rows.every((r) => FINAL_STATUSES.has(r.status))) {
          const bad = rows.filter((r) => r.status !== 'success' || Number(r.bytes) !== frames * frameBytes);
          if (bad.length > 0)
            throw new Error(`ws-fan-in: ${bad.length} deployments ended wrong: ${JSON.stringify(bad[0])}`);
          break;
        }
        if (Date.now() > deadline) throw new Error('ws-fan-in: deployments did not end');
        await sleep(50);
      }
      acks.get('product')!.push(done.acks);
      return total / (done.ms / 1000);
    };

    const baselineRound = async (): Promise<number> => {
      const before = bare.outputFrames();
      bare.assignJobs();
      await bareSwarm.command({ cmd: 'prepare' });
      const done = await bareSwarm.command<Done>(go);
      await bareSwarm.command({ cmd: 'finish' });
      if (bare.outputFrames() - before !== total)
        throw new Error(
          `ws-fan-in: the bare server decoded ${bare.outputFrames() - before} of ${total} frames`,
        );
      acks.get('baseline')!.push(done.acks);
      return total / (done.ms / 1000);
    };

    const results = await interleave(
      [
        { name: 'product', round: productRound },
        { name: 'baseline', round: baselineRound },
      ],
      { warmups, rounds, log, label: 'ws-fan-in' },
    );
    const prod = median(results.get('product')!);
    const base = median(results.get('baseline')!);
    const acksPerRound = (name: string) => median(acks.get(name)!.slice(-rounds));
    return {
      rows: [
        {
          benchmark: 'ws-fan-in',
          figure: `median frames/s, ${n} agents × ${frames} × ${frameBytes} B`,
          product: prod,
          baseline: base,
          baselineName: 'bare ws server, same framing and codec, acks, no storage (aim ≥ 0.7)',
          ratio: prod / base,
          ratioIs: 'product/baseline',
        },
      ],
      notes: [
        `ws-fan-in: ${n} simulated agents (one process), ${frames} frames of ${frameBytes} bytes each per round, at most ${windowBytes / 1024} KiB unacknowledged per agent; ` +
          `${rounds} rounds after ${warmups} warm-up(s); frames/s per round: product ${results.get('product')!.map(fmt).join(' ')}; ` +
          `baseline ${results.get('baseline')!.map(fmt).join(' ')}.`,
        `ws-fan-in: output.ack frames per round (median): product ${fmt(acksPerRound('product'))}, baseline ${fmt(acksPerRound('baseline'))} ` +
          `for ${total} output frames (the product acknowledges once per stored batch).`,
      ],
    };
  },
};
