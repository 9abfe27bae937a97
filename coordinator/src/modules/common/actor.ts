// Who is calling: resolved once per request (session cookie or, later, API token) or set by the
// webhook and agent paths, and recorded with every change in the audit log.
import type { Role } from '../user/user.entity.ts';

export interface Actor {
  type: 'user' | 'token' | 'webhook' | 'agent' | 'system';
  /** The user's, token's, delivery's or agent's id. */
  id: string | null;
  /** A readable name: an email, a token name, "github push …". */
  name: string;
  role: Role | null;
  /** The user behind a session or token. */
  userId: string | null;
  /** Where the request came from (the client address, as TRUST_PROXY decides it), when known. */
  ip?: string | null;
}

const RANK: Record<Role, number> = { viewer: 0, deployer: 1, admin: 2 };

export function hasRole(actor: Actor, needed: Role): boolean {
  return actor.role !== null && RANK[actor.role] >= RANK[needed];
}

export const SYSTEM_ACTOR: Actor = { type: 'system', id: null, name: 'system', role: 'admin', userId: null };
