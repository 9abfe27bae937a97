// What `GET /metrics` reports, in Prometheus' text format (prom-client). Two kinds of figures:
// - the shared state, read from PostgreSQL at each scrape (deployments by state, queue depth and
//   the oldest wait, agents online): the same from every process;
// - this process's own counters (log bytes stored, deployments it finished and how long they took,
//   agent WebSocket connections it holds, its database pools, event-loop delay and the usual
//   Node.js figures): sum or compare them across processes in Prometheus.
import type { MikroORM } from '@mikro-orm/postgresql';
import type pg from 'pg';
import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from 'prom-client';

export interface MetricsSources {
  orm: MikroORM;
  /** The output-ingest pool. */
  pool: pg.Pool;
  /** Agent connections this process holds. */
  connections: () => number;
  /** How long an agent may be silent and still count as online. */
  onlineWindowMs: number;
}

const STATES = ['queued', 'running', 'success', 'failed', 'cancelled', 'timed_out'] as const;

export class Metrics {
  readonly registry = new Registry();
  readonly logBytes: Counter;
  readonly deploymentDuration: Histogram<'status'>;

  constructor(sources: MetricsSources) {
    const r = this.registry;
    collectDefaultMetrics({ register: r, prefix: 'deckhand_' });
    this.logBytes = new Counter({
      name: 'deckhand_log_bytes_ingested_total',
      help: 'Bytes of command output stored by this process',
      registers: [r],
    });
    this.deploymentDuration = new Histogram({
      name: 'deckhand_deployment_duration_seconds',
      help: 'From trigger to end (queue wait included), for deployments this process finished',
      labelNames: ['status'],
      buckets: [1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600],
      registers: [r],
    });
    new Gauge({
      name: 'deckhand_deployments',
      help: 'Deployments by state (all processes: read from the database)',
      labelNames: ['status'],
      registers: [r],
      async collect() {
        const rows = await sources.orm.em
          .fork()
          .execute<Array<{ status: string; n: string | number }>>(
            'select status, count(*) as n from deployments group by status',
          );
        const counts = new Map(rows.map((row) => [row.status, Number(row.n)]));
        for (const state of STATES) this.set({ status: state }, counts.get(state) ?? 0);
      },
    });
    new Gauge({
      name: 'deckhand_queue_oldest_wait_seconds',
      help: 'How long the oldest queued deployment has waited (0 when none waits)',
      registers: [r],
      async collect() {
        const [row] = await sources.orm.em
          .fork()
          .execute<Array<{ s: string | number | null }>>(
            `select extract(epoch from now() - min(started_at)) as s from deployments where status = 'queued'`,
          );
        this.set(Number(row?.s ?? 0));
      },
    });
    new Gauge({
      name: 'deckhand_agents_online',
      help: 'Agents connected to some coordinator process and heard from recently',
      registers: [r],
      async collect() {
        const [row] = await sources.orm.em.fork().execute<Array<{ n: string | number }>>(
          `select count(*) as n from agents
              where connected_to is not null and last_seen_at > now() - ? * interval '1 millisecond'`,
          [sources.onlineWindowMs],
        );
        this.set(Number(row?.n ?? 0));
      },
    });
    new Gauge({
      name: 'deckhand_agent_connections',
      help: 'Agent WebSocket connections this process holds',
      registers: [r],
      collect() {
        this.set(sources.connections());
      },
    });
    new Gauge({
      name: 'deckhand_database_pool_connections',
      help: "Connections of this process's main database pool (everything but output ingest), by state; waiting: requests queued for one",
      labelNames: ['state'],
      registers: [r],
      async collect() {
        const pool = (await sources.orm.em.getConnection().getNativeClient()) as pg.Pool;
        this.set({ state: 'total' }, pool.totalCount);
        this.set({ state: 'idle' }, pool.idleCount);
        this.set({ state: 'waiting' }, pool.waitingCount);
      },
    });
    new Gauge({
      name: 'deckhand_ingest_pool_connections',
      help: 'Connections of the output-ingest pool, by state',
      labelNames: ['state'],
      registers: [r],
      collect() {
        this.set({ state: 'total' }, sources.pool.totalCount);
        this.set({ state: 'idle' }, sources.pool.idleCount);
        this.set({ state: 'waiting' }, sources.pool.waitingCount);
      },
    });
  }

  /** A finished deployment's duration, from the database (best effort: metrics never fail work). */
  async deploymentFinished(orm: MikroORM, deploymentId: string): Promise<void> {
    const [row] = await orm.em.fork().execute<Array<{ status: string; s: string | number | null }>>(
      `select status, extract(epoch from finished_at - started_at) as s
           from deployments where id = ?`,
      [deploymentId],
    );
    if (row && row.s !== null) this.deploymentDuration.observe({ status: row.status }, Number(row.s));
  }
}
