// GET /metrics: Prometheus' text format, behind METRICS_TOKEN (or loopback only without one), with
// figures that follow what happened: a deployment run by an agent over the real WebSocket moves
// the deployment counts, the duration histogram, the stored log bytes and the agent gauges.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startCoordinator, type TestCoordinator } from '../helpers/coordinator.ts';
import { Admin, RawAgent, sleep, waitFor } from '../helpers/faults-coordinator.ts';

const TOKEN = 'metrics-token-0123456789';
let coord: TestCoordinator;
let open: TestCoordinator;
let admin: Admin;
const raws: RawAgent[] = [];

beforeAll(async () => {
  coord = await startCoordinator({
    METRICS_TOKEN: TOKEN,
    AGENT_HEARTBEAT_MS: '300',
    SCHEDULER_INTERVAL_MS: '100',
  });
  open = await startCoordinator();
  admin = await Admin.signUp(coord.url);
});

afterAll(async () => {
  for (const raw of raws) raw.close();
  await sleep(300);
  await coord?.close();
  await open?.close();
});

async function scrape(c: TestCoordinator, headers: Record<string, string> = {}) {
  return fetch(`${c.url}/metrics`, { headers });
}

/** The value of one sample line, e.g. `deckhand_deployments{status="success"}`. */
function sample(text: string, name: string): number | undefined {
  const line = text.split('\n').find((l) => l.startsWith(`${name} `));
  return line === undefined ? undefined : Number(line.slice(name.length + 1));
}

describe('GET /metrics', () => {
  it('needs METRICS_TOKEN when one is set (a session is not enough)', async () => {
    const none = await scrape(coord);
    expect(none.status).toBe(401);
    expect(await none.json()).toEqual({ success: false, error: 'Metrics need the METRICS_TOKEN' });
    expect((await scrape(coord, { authorization: 'Bearer wrong-token-0123456789' })).status).toBe(401);
    expect((await scrape(coord, { cookie: admin.client.cookie! })).status).toBe(401);
    const ok = await scrape(coord, { authorization: `Bearer ${TOKEN}` });
    expect(ok.status).toBe(200);
    expect(ok.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
  });

  it('without a token, answers loopback clients (a forwarded address does not count)', async () => {
    const res = await scrape(open, { 'x-forwarded-for': '203.0.113.9' });
    expect(res.status).toBe(200);
    expect(await res.text()).toContain('deckhand_deployments{status="queued"} 0');
  });

  it('follows a deployment: counts by state, duration, stored bytes, agents', async () => {
    const { token } = await admin.registerAgent('m-agent', ['m']);
    const raw = await RawAgent.welcomed(coord.url, token);
    raws.push(raw);
    const projectId = await admin.createProject({
      name: 'metrics',
      forge_url: 'https://example.com/m.git',
      commands: ['print'],
      target: { agents: { names: ['m-agent'] } },
    });
    const res = await admin.client.post('/deploy', { projectId, commit: 'a'.repeat(40) });
    expect(res.status, res.text).toBe(200);
    const deployId = res.json.deployId as string;
    const assign = await raw.next('job.assign', (m) => m.deploymentId === deployId, 10_000);
    const jobId = assign.jobId;
    const text = 'x'.repeat(1000);
    raw.send({ type: 'job.accepted', jobId });
    raw.send({
      type: 'step.started',
      jobId,
      step: 0,
      cmd: `git checkout --force --detach ${'a'.repeat(40)}`,
    });
    raw.send({ type: 'step.finished', jobId, step: 0, exitCode: 0, signal: null, outputBytes: 0 });
    raw.send({ type: 'step.started', jobId, step: 1, cmd: 'print' });
    raw.send({ type: 'step.output', jobId, step: 1, seq: 0, offset: 0, data: Buffer.from(text) });
    await raw.next('output.ack', (m) => m.jobId === jobId && m.offset === 1000, 5_000);
    raw.send({ type: 'step.finished', jobId, step: 1, exitCode: 0, signal: null, outputBytes: 1000 });
    raw.send({ type: 'job.finished', jobId, status: 'success' });

    const body = await waitFor(
      async () => (await scrape(coord, { authorization: `Bearer ${TOKEN}` })).text(),
      (t) => sample(t, 'deckhand_deployments{status="success"}') === 1,
      5_000,
    );
    expect(sample(body, 'deckhand_deployments{status="running"}')).toBe(0);
    expect(sample(body, 'deckhand_log_bytes_ingested_total')).toBe(1000);
    expect(sample(body, 'deckhand_deployment_duration_seconds_count{status="success"}')).toBe(1);
    expect(sample(body, 'deckhand_agents_online')).toBe(1);
    expect(sample(body, 'deckhand_agent_connections')).toBe(1);
    expect(sample(body, 'deckhand_queue_oldest_wait_seconds')).toBe(0);
    expect(body).toContain('deckhand_nodejs_eventloop_lag_seconds');
    expect(body).toMatch(/deckhand_ingest_pool_connections\{state="total"\} \d/);
    // The main pool has answered this very scrape's queries: at least one connection.
    expect(sample(body, 'deckhand_database_pool_connections{state="total"}')).toBeGreaterThan(0);
    // The scrape's own gauges query at once, so some may be waiting for a connection.
    expect(sample(body, 'deckhand_database_pool_connections{state="waiting"}')).toBeGreaterThanOrEqual(0);
  });
});
