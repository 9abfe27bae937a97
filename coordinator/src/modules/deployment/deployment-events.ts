// The one publisher of deployment changes. Whatever changes a deployment (state, a log entry, new
// output) calls `changed(id)`; viewers (server-sent event streams, the CLI) subscribe and re-read
// what is new from PostgreSQL. Carrying ids rather than data keeps one truth (the database) and
// lets a later multi-process implementation relay the same signal over LISTEN/NOTIFY.
import { EventEmitter } from 'node:events';

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
}
