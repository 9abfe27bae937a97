// API tokens: created by a user (shown once, stored as a SHA-256 hash), listed without their
// values, revoked. A token acts as its user, within its scope: `read` reads, `deploy` also
// triggers and cancels, `admin` also manages — never more than the user's own role, checked on
// every request, so demoting a user narrows their tokens at once.
import type { MikroORM } from '@mikro-orm/postgresql';
import { recordAudit } from '../audit/audit.service.ts';
import type { Actor } from '../common/actor.ts';
import { hashToken, randomToken } from '../common/crypto.ts';
import { BadRequestError, ForbiddenError, NotFoundError } from '../common/errors.ts';
import { iso, isoOrNull, isUuid } from '../common/schemas.ts';
import type { Role } from '../user/user.entity.ts';
import { ApiToken, type IApiToken, type TokenScope } from './api-token.entity.ts';

export const API_TOKEN_PREFIX = 'dht_';

const SCOPE_ROLE: Record<TokenScope, Role> = { read: 'viewer', deploy: 'deployer', admin: 'admin' };
const RANK: Record<Role, number> = { viewer: 0, deployer: 1, admin: 2 };
const TOUCH_EVERY_MS = 60_000;

export interface ApiTokenJson {
  id: string;
  name: string;
  scope: TokenScope;
  expires_at: string | null;
  created_at: string;
  last_used_at: string | null;
}

function lower(a: Role, b: Role): Role {
  return RANK[a] <= RANK[b] ? a : b;
}

export class ApiTokenService {
  readonly #orm: MikroORM;

  constructor(orm: MikroORM) {
    this.#orm = orm;
  }

  toJson(t: IApiToken): ApiTokenJson {
    return {
      id: t.id,
      name: t.name,
      scope: t.scope,
      expires_at: isoOrNull(t.expiresAt),
      created_at: iso(t.createdAt),
      last_used_at: isoOrNull(t.lastUsedAt),
    };
  }

  async create(
    input: { name: string; scope: TokenScope; expires_at?: string | null },
    actor: Actor,
  ): Promise<{ api_token: ApiTokenJson; token: string }> {
    if (!actor.userId || !actor.role) throw new ForbiddenError('Only users can create API tokens');
    if (RANK[SCOPE_ROLE[input.scope]] > RANK[actor.role]) {
      throw new ForbiddenError(`A ${actor.role} cannot create a token with the ${input.scope} scope`);
    }
    const expiresAt = input.expires_at ? new Date(input.expires_at) : null;
    if (expiresAt && (Number.isNaN(expiresAt.getTime()) || expiresAt.getTime() <= Date.now())) {
      throw new BadRequestError('expires_at must be a time in the future');
    }
    const token = randomToken(API_TOKEN_PREFIX);
    return this.#orm.em.fork().transactional(async (em) => {
      const row = em.create(ApiToken, {
        user: actor.userId!,
        name: input.name,
        scope: input.scope,
        tokenHash: hashToken(token),
        expiresAt,
      });
      recordAudit(
        em,
        actor,
        'token.create',
        { type: 'api_token', id: row.id },
        { name: row.name, scope: row.scope },
      );
      await em.flush();
      return { api_token: this.toJson(row), token };
    });
  }

  async list(actor: Actor): Promise<ApiTokenJson[]> {
    const rows = await this.#orm.em
      .fork()
      .find(ApiToken, { user: actor.userId ?? '', revokedAt: null }, { orderBy: { createdAt: 'desc' } });
    return rows.map((t) => this.toJson(t));
  }

  /** Revokes one of the caller's tokens (an admin may revoke anyone's). */
  async revoke(id: string, actor: Actor): Promise<void> {
    await this.#orm.em.fork().transactional(async (em) => {
      const row = isUuid(id) ? await em.findOne(ApiToken, { id, revokedAt: null }) : null;
      const mine = row && (row.user as unknown as { id: string }).id === actor.userId;
      if (!row || (!mine && actor.role !== 'admin')) throw new NotFoundError('API token not found');
      row.revokedAt = new Date();
      recordAudit(em, actor, 'token.revoke', { type: 'api_token', id: row.id }, { name: row.name });
    });
  }

  /** The actor a bearer token stands for, or null when it is unknown, revoked or expired. */
  async authenticate(token: string): Promise<Actor | null> {
    if (!token.startsWith(API_TOKEN_PREFIX)) return null;
    const em = this.#orm.em.fork();
    const row = await em.findOne(ApiToken, { tokenHash: hashToken(token) }, { populate: ['user'] });
    const now = Date.now();
    if (!row || row.revokedAt || (row.expiresAt && row.expiresAt.getTime() <= now)) return null;
    if (!row.lastUsedAt || now - row.lastUsedAt.getTime() > TOUCH_EVERY_MS) {
      await em.nativeUpdate(ApiToken, { id: row.id }, { lastUsedAt: new Date(now) });
    }
    const user = row.user as unknown as { id: string; email: string; role: Role };
    return {
      type: 'token',
      id: row.id,
      name: `${user.email} (token ${row.name})`,
      role: lower(SCOPE_ROLE[row.scope], user.role),
      userId: user.id,
    };
  }
}
