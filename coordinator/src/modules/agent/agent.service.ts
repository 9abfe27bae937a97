// Agent registration: a name, labels and a token (random, shown once, stored as a hash).
// Presence (online, version, last seen) is written by the agent hub when agents connect.
import type { EntityManager, MikroORM } from '@mikro-orm/postgresql';
import { UniqueConstraintViolationException } from '@mikro-orm/postgresql';
import { recordAudit } from '../audit/audit.service.ts';
import type { Actor } from '../common/actor.ts';
import { hashToken, randomToken } from '../common/crypto.ts';
import { ConflictError, NotFoundError } from '../common/errors.ts';
import { isoOrNull, isUuid } from '../common/schemas.ts';
import { uuidArray } from '../deployment/job-plan.ts';
import { Agent, type IAgent } from './agent.entity.ts';

export const AGENT_TOKEN_PREFIX = 'dha_';

export interface AgentJson {
  id: string;
  name: string;
  labels: string[];
  online: boolean;
  version: string | null;
  last_seen_at: string | null;
}

export class AgentService {
  readonly #orm: MikroORM;
  /** How long after its last sign of life a connected agent still counts as online. */
  readonly #onlineWindowMs: number;
  /** Called after an agent is deleted, so a live connection can be closed. */
  onRevoked: (agentId: string) => void = () => {};

  constructor(orm: MikroORM, onlineWindowMs: number) {
    this.#orm = orm;
    this.#onlineWindowMs = onlineWindowMs;
  }

  /**
   * Online: held by a coordinator process that saw it recently. The time check covers a process
   * that died without clearing its agents.
   */
  isOnline(agent: IAgent): boolean {
    return (
      agent.connectedTo !== null &&
      agent.connectedTo !== undefined &&
      agent.lastSeenAt !== null &&
      agent.lastSeenAt !== undefined &&
      Date.now() - agent.lastSeenAt.getTime() < this.#onlineWindowMs
    );
  }

  /** The agent a token belongs to, or null for an unknown or revoked token. */
  async authenticate(token: string): Promise<IAgent | null> {
    if (!token.startsWith(AGENT_TOKEN_PREFIX)) return null;
    return this.#orm.em.fork().findOne(Agent, { tokenHash: hashToken(token) });
  }

  /** Presence: this process holds the agent's connection now. */
  async connected(
    agentId: string,
    processId: string,
    hello: { agentVersion: string; hostname: string; labels: string[] },
  ): Promise<IAgent> {
    const em = this.#orm.em.fork();
    const agent = await em.findOneOrFail(Agent, { id: agentId });
    const now = new Date();
    agent.connectedTo = processId;
    agent.connectedAt = now;
    agent.lastSeenAt = now;
    agent.version = hello.agentVersion.slice(0, 64);
    agent.hostname = hello.hostname.slice(0, 255);
    // Labels are the admin's to set; an agent registered without any adopts those it declares.
    if (agent.labels.length === 0 && hello.labels.length > 0) agent.labels = [...new Set(hello.labels)];
    await em.flush();
    return agent;
  }

  /**
   * Renews the presence of the agents this process holds, and returns those of them that still
   * exist: an agent revoked through another coordinator process is missing, and its connection
   * here must close.
   */
  async seen(agentIds: string[], processId: string): Promise<Set<string>> {
    if (agentIds.length === 0) return new Set();
    const rows = await this.#orm.em.fork().execute<Array<{ id: string }>>(
      `update agents set last_seen_at = case when connected_to = ? then now() else last_seen_at end
        where id = any(?::uuid[]) returning id`,
      [processId, uuidArray(agentIds)],
    );
    return new Set(rows.map((r) => r.id));
  }

  async disconnected(agentId: string, processId: string): Promise<void> {
    await this.#orm.em
      .fork()
      .nativeUpdate(
        Agent,
        { id: agentId, connectedTo: processId },
        { connectedTo: null, lastSeenAt: new Date() },
      );
  }

  toJson(agent: IAgent): AgentJson {
    return {
      id: agent.id,
      name: agent.name,
      labels: agent.labels,
      online: this.isOnline(agent),
      version: agent.version ?? null,
      last_seen_at: isoOrNull(agent.lastSeenAt),
    };
  }

  async create(
    input: { name: string; labels?: string[] },
    actor: Actor,
  ): Promise<{ agent: { id: string; name: string; labels: string[] }; token: string }> {
    const token = randomToken(AGENT_TOKEN_PREFIX);
    try {
      return await this.#orm.em.fork().transactional(async (em) => {
        const agent = em.create(Agent, {
          name: input.name,
          labels: [...new Set(input.labels ?? [])],
          tokenHash: hashToken(token),
        });
        recordAudit(em, actor, 'agent.create', { type: 'agent', id: agent.id }, { name: agent.name });
        await em.flush();
        return { agent: { id: agent.id, name: agent.name, labels: agent.labels }, token };
      });
    } catch (err) {
      if (err instanceof UniqueConstraintViolationException)
        throw new ConflictError('An agent with this name already exists');
      throw err;
    }
  }

  async list(): Promise<AgentJson[]> {
    const agents = await this.#orm.em.fork().find(Agent, {}, { orderBy: { name: 'asc' } });
    return agents.map((a) => this.toJson(a));
  }

  /** Agents a target names: all carrying every label, or those with the given names. */
  async matching(
    target: { labels: string[] } | { names: string[] },
    em: EntityManager = this.#orm.em.fork(),
  ): Promise<IAgent[]> {
    if ('names' in target)
      return em.find(Agent, { name: { $in: target.names } }, { orderBy: { name: 'asc' } });
    return em.find(Agent, { labels: { $contains: target.labels } }, { orderBy: { name: 'asc' } });
  }

  async delete(id: string, actor: Actor): Promise<void> {
    await this.#orm.em.fork().transactional(async (em) => {
      const agent = isUuid(id) ? await em.findOne(Agent, { id }) : null;
      if (!agent) throw new NotFoundError('Agent not found');
      recordAudit(em, actor, 'agent.delete', { type: 'agent', id: agent.id }, { name: agent.name });
      em.remove(agent);
    });
    this.onRevoked(id);
  }
}
