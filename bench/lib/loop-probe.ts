// Preloaded into a server process (`node --import ./bench/lib/loop-probe.ts …`) by agent-capacity,
// into the coordinator and into the bare baseline alike, so that both are measured the same way
// from inside. It answers IPC messages {type, id} with {id, …}:
//   reset   starts a new measuring window (event-loop delay histogram, utilisation, CPU)
//   stats   that window so far: event-loop delay p50/p99/max (ms), utilisation, CPU seconds
//   memory  after two full garbage collections: rss, heapUsed, heapTotal, external (bytes)
// Nothing happens without a parent on an IPC channel.
import { monitorEventLoopDelay, performance } from 'node:perf_hooks';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';

if (process.send) {
  setFlagsFromString('--expose-gc');
  const gc = runInNewContext('gc') as () => void;
  const delay = monitorEventLoopDelay({ resolution: 10 });
  delay.enable();
  let elu = performance.eventLoopUtilization();
  let cpu = process.cpuUsage();
  let since = performance.now();
  const ms = (ns: number) => ns / 1e6;
  process.on('message', (m: { type: string; id: number }) => {
    const reply = (body: object) => process.send?.({ id: m.id, ...body });
    switch (m.type) {
      case 'reset':
        delay.reset();
        elu = performance.eventLoopUtilization();
        cpu = process.cpuUsage();
        since = performance.now();
        return reply({});
      case 'stats': {
        const used = process.cpuUsage(cpu);
        return reply({
          p50: ms(delay.percentile(50)),
          p99: ms(delay.percentile(99)),
          max: ms(delay.max),
          utilization: performance.eventLoopUtilization(elu).utilization,
          cpuSeconds: (used.user + used.system) / 1e6,
          seconds: (performance.now() - since) / 1000,
        });
      }
      case 'memory': {
        gc();
        gc();
        const mu = process.memoryUsage();
        return reply({ rss: mu.rss, heapUsed: mu.heapUsed, heapTotal: mu.heapTotal, external: mu.external });
      }
    }
  });
  process.channel?.unref();
}
