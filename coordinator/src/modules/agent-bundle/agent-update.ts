// What the coordinator offers an agent in its welcome (protocol Welcome.update): the agent it
// serves at GET /agent/download, when that is newer than the version the agent said hello with.
// Only a bundle already built counts (a hello never waits for a build), and the file is read
// again only when it changed, so a reconnect storm costs a stat per agent.
import { stat } from 'node:fs/promises';
import type { Welcome } from '@deckhand/protocol';
import type { AgentBundle } from './agent-bundle.ts';

/** `a` is an older release than `b` (x.y.z, a pre-release before its release); false when either is not a version. */
export function olderVersion(a: string, b: string): boolean {
  const parse = (v: string) => {
    const m = /^v?(\d+)\.(\d+)\.(\d+)(-.+)?$/.exec(v.trim());
    return m ? { n: [Number(m[1]), Number(m[2]), Number(m[3])], pre: m[4] ?? null } : null;
  };
  const x = parse(a);
  const y = parse(b);
  if (!x || !y) return false;
  for (let i = 0; i < 3; i++) if (x.n[i] !== y.n[i]) return x.n[i]! < y.n[i]!;
  if (x.pre === y.pre) return false;
  if (x.pre === null) return false;
  if (y.pre === null) return true;
  return x.pre < y.pre;
}

export class AgentUpdates {
  readonly #bundle: AgentBundle;
  #served: { key: string; version: string; sha256: string } | null = null;

  constructor(bundle: AgentBundle) {
    this.#bundle = bundle;
  }

  /** The update to offer an agent of `agentVersion`, or undefined (none newer, or no bundle built). */
  async offerFor(agentVersion: string): Promise<Welcome['update']> {
    let key: string;
    try {
      const s = await stat(this.#bundle.file);
      key = `${s.size}:${s.mtimeMs}`;
    } catch {
      return undefined;
    }
    if (this.#served?.key !== key) {
      try {
        const b = await this.#bundle.get();
        this.#served = { key, version: b.version, sha256: b.sha256 };
      } catch {
        return undefined;
      }
    }
    const served = this.#served;
    return olderVersion(agentVersion, served.version)
      ? { version: served.version, sha256: served.sha256 }
      : undefined;
  }
}
