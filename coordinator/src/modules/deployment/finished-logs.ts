// The log entries of finished deployments, kept as their JSON text for `GET /deploy/:id`.
//
// Once a deployment has ended, its entries never change: each entry ends no later than its job,
// and output that arrives for an entry that has ended is acknowledged and dropped (job.service.ts).
// Reading them is the expensive part of the most read answer (pages, the CLI, pipelines polling
// until the end): every entry's output gathered from its chunks, then serialised. So the text is
// kept here once, bounded by size, least recently read out first.
//
// Nothing needs to be told when a deployment goes (retention, a deleted project): a read always
// looks up the deployment's own row first, and one that is gone is a 404 whatever this holds.
// Each coordinator process has its own; a miss costs one read from PostgreSQL.
export class FinishedLogs {
  readonly #maxBytes: number;
  readonly #byId = new Map<string, string>();
  #bytes = 0;

  constructor(maxBytes: number) {
    this.#maxBytes = maxBytes;
  }

  get(deploymentId: string): string | undefined {
    const json = this.#byId.get(deploymentId);
    if (json !== undefined) {
      // Map keeps insertion order: moving it to the end makes the first key the least recent.
      this.#byId.delete(deploymentId);
      this.#byId.set(deploymentId, json);
    }
    return json;
  }

  set(deploymentId: string, json: string): void {
    const size = json.length * 2; // UTF-16 code units
    if (size > this.#maxBytes) return;
    const old = this.#byId.get(deploymentId);
    if (old !== undefined) {
      this.#byId.delete(deploymentId);
      this.#bytes -= old.length * 2;
    }
    this.#byId.set(deploymentId, json);
    this.#bytes += size;
    for (const [id, text] of this.#byId) {
      if (this.#bytes <= this.#maxBytes) break;
      this.#byId.delete(id);
      this.#bytes -= text.length * 2;
    }
  }

  get size(): number {
    return this.#byId.size;
  }
}
