// The one publisher of deployment changes. Whatever changes a deployment (state, a log entry, new
// output) calls `changed(id)`; viewers (server-sent event streams, the CLI) subscribe and re-read
// what is new from PostgreSQL. Carrying ids rather than data keeps one truth (the database) and
// lets several coordinator processes relay the same signal over LISTEN/NOTIFY
// (SignalledDeploymentEvents): a viewer on one process sees output an agent sends to another.
import { EventEmitter } from 'node:events';
import type { ClusterSignals } from '../cluster/cluster-signals.ts';

export interface DeploymentEvents {
  changed(deploymentId: string): void;
  subscribe(deploymentId: string, listener: () => void): () => void;
}

export class InProcessDeploymentEvents implements DeploymentEvents {
  readonly #emitter = new EventEmitter();

  constructor() {
    // Each viewer of a deployment is one listener; many viewers are expected.
    this.#emitter.setMaxListeners(0);
  }

  changed(deploymentId: string): void {
    this.#emitter.emit(deploymentId);
  }

  subscribe(deploymentId: string, listener: () => void): () => void {
    this.#emitter.on(deploymentId, listener);
    return () => this.#emitter.off(deploymentId, listener);
  }

  /** The deployments someone here is watching. */
  watched(): string[] {
    return this.#emitter.eventNames().filter((n): n is string => typeof n === 'string');
  }
}

/** Changes made here wake viewers here at once and, through a signal, viewers on every other process. */
export class SignalledDeploymentEvents implements DeploymentEvents {
  readonly #local = new InProcessDeploymentEvents();
  readonly #signals: ClusterSignals;

  constructor(signals: ClusterSignals) {
    this.#signals = signals;
    signals.on('deployment', (ids) => {
      for (const id of ids) this.#local.changed(id);
    });
    // Signals missed while the listening connection was down: every viewer re-reads.
    signals.onResync(() => {
      for (const id of this.#local.watched()) this.#local.changed(id);
    });
  }

  changed(deploymentId: string): void {
    this.#local.changed(deploymentId);
    this.#signals.publish('deployment', deploymentId);
  }

  subscribe(deploymentId: string, listener: () => void): () => void {
    return this.#local.subscribe(deploymentId, listener);
  }
}
