// Accounts and sessions: registration (first account is admin; then closed unless opened by
// configuration), login without account enumeration, server-side sessions that logout ends for
// good, and the shell's password reset.
import { randomBytes } from 'node:crypto';
import type { EntityManager, MikroORM } from '@mikro-orm/postgresql';
import { recordAudit } from '../audit/audit.service.ts';
import type { Actor } from '../common/actor.ts';
import { constantTimeEqual, hashToken } from '../common/crypto.ts';
import { BadRequestError, ForbiddenError, NotFoundError, UnauthorizedError } from '../common/errors.ts';
import { dummyPasswordHash, hashPassword, verifyPassword } from './password.ts';
import { Invitation } from './invitation.entity.ts';
import { type IUser, type Role, Session, User } from './user.entity.ts';

export interface UserJson {
  id: string;
  email: string;
  role: Role;
}

export interface SessionJson {
  /** An opaque id (a digest of the cookie's secret, which it does not reveal). */
  id: string;
  created_at: string;
  last_seen_at: string;
  expires_at: string;
  ip: string | null;
  user_agent: string | null;
  /** The session this request came with. */
  current: boolean;
}

export interface RegistrationPolicy {
  mode: 'closed' | 'open';
  /** Required for the first account when the coordinator listens beyond loopback. */
  setupToken: string | null;
}

export interface ClientInfo {
  ip: string | null;
  userAgent: string | null;
}

const REGISTER_LOCK = 'deckhand:first-registration';
const TOUCH_EVERY_MS = 60_000;

export function userJson(user: IUser): UserJson {
  return { id: user.id, email: user.email, role: user.role };
}

export function userActor(user: { id: string; email: string; role: Role }): Actor {
  return { type: 'user', id: user.id, name: user.email, role: user.role, userId: user.id };
}

export function normaliseEmail(email: string): string {
  return email.trim().toLowerCase();
}

export class UserService {
  readonly #orm: MikroORM;
  readonly #policy: RegistrationPolicy;
  readonly #sessionTtlMs: number;

  constructor(orm: MikroORM, policy: RegistrationPolicy, sessionTtlMs: number) {
    this.#orm = orm;
    this.#policy = policy;
    this.#sessionTtlMs = sessionTtlMs;
  }

  async register(
    input: { email: string; password: string; setup_token?: string; invitation?: string },
    client: ClientInfo,
  ): Promise<{ user: UserJson; sessionId: string }> {
    const email = normaliseEmail(input.email);
    const passwordHash = await hashPassword(input.password);
    return this.#orm.em.fork().transactional(async (em) => {
      // Serialise registrations so two racing "first" accounts cannot both become admin.
      await em.execute('select pg_advisory_xact_lock(hashtext(?))', [REGISTER_LOCK]);
      const first = (await em.count(User, {})) === 0;
      // An invitation for this address opens registration for it, with the role it names.
      const invitation =
        !first && input.invitation
          ? await em.findOne(Invitation, {
              tokenHash: hashToken(input.invitation),
              email,
              acceptedAt: null,
              revokedAt: null,
              expiresAt: { $gt: new Date() },
            })
          : null;
      if (!first && input.invitation && !invitation) {
        throw new ForbiddenError('This invitation is not valid for this email (used, revoked or expired?)');
      }
      if (invitation) {
        invitation.acceptedAt = new Date();
      } else if (first) {
        const token = this.#policy.setupToken;
        if (token !== null && !(input.setup_token && constantTimeEqual(input.setup_token, token))) {
          throw new ForbiddenError(
            'Registration is closed: the first account needs the setup token printed in the coordinator log',
          );
        }
      } else if (this.#policy.mode !== 'open') {
        throw new ForbiddenError('Registration is closed');
      }
      if (await em.findOne(User, { email })) {
        throw new BadRequestError('This email cannot be registered');
      }
      const user = em.create(User, {
        email,
        passwordHash,
        role: first ? 'admin' : (invitation?.role ?? 'viewer'),
      });
      recordAudit(em, userActor(user), 'user.register', { type: 'user', id: user.id }, { role: user.role });
      const sessionId = this.#createSession(em, user, client);
      return { user: userJson(user), sessionId };
    });
  }

  async login(
    email: string,
    password: string,
    client: ClientInfo,
  ): Promise<{ user: UserJson; sessionId: string }> {
    const em = this.#orm.em.fork();
    const user = await em.findOne(User, { email: normaliseEmail(email) });
    const ok = await verifyPassword(user?.passwordHash ?? (await dummyPasswordHash()), password);
    if (!user || !ok) throw new UnauthorizedError('Invalid email or password');
    return em.transactional(async (tx) => {
      const sessionId = this.#createSession(tx, user, client);
      recordAudit(tx, userActor(user), 'user.login', { type: 'user', id: user.id }, { ip: client.ip });
      return { user: userJson(user), sessionId };
    });
  }

  async get(id: string): Promise<UserJson> {
    const user = await this.#orm.em.fork().findOne(User, { id });
    if (!user) throw new UnauthorizedError();
    return userJson(user);
  }

  /** The user a session cookie names, or null when the session is unknown, expired or ended. */
  async authenticateSession(sessionId: string): Promise<UserJson | null> {
    // One plain query on every authenticated request (no entity hydration: it is the hot path).
    const em = this.#orm.em.fork();
    const [row] = await em.execute<
      Array<{ id: string; user_id: string; email: string; role: Role; stale: boolean }>
    >(
      `select s.id, u.id as user_id, u.email, u.role,
              s.last_seen_at < now() - ? * interval '1 millisecond' as stale
         from sessions s join users u on u.id = s.user_id
        where s.id = ? and s.revoked_at is null and s.expires_at > now()`,
      [TOUCH_EVERY_MS, hashToken(sessionId)],
    );
    if (!row) return null;
    if (row.stale) await em.nativeUpdate(Session, { id: row.id }, { lastSeenAt: new Date() });
    return { id: row.user_id, email: row.email, role: row.role };
  }

  async logout(sessionId: string): Promise<void> {
    await this.#orm.em
      .fork()
      .nativeUpdate(Session, { id: hashToken(sessionId), revokedAt: null }, { revokedAt: new Date() });
  }

  /** A user's live sessions (neither ended nor expired), most recently used first. */
  async sessions(userId: string, currentSessionId: string | null): Promise<SessionJson[]> {
    const rows = await this.#orm.em
      .fork()
      .find(
        Session,
        { user: userId, revokedAt: null, expiresAt: { $gt: new Date() } },
        { orderBy: { lastSeenAt: 'desc' } },
      );
    const current = currentSessionId ? hashToken(currentSessionId) : null;
    return rows.map((s) => ({
      id: s.id,
      created_at: s.createdAt.toISOString(),
      last_seen_at: s.lastSeenAt.toISOString(),
      expires_at: s.expiresAt.toISOString(),
      ip: s.ip ?? null,
      user_agent: s.userAgent ?? null,
      current: s.id === current,
    }));
  }

  /** Ends one of the user's own sessions (signing out another browser). */
  async endSession(userId: string, id: string): Promise<void> {
    const ended = await this.#orm.em
      .fork()
      .nativeUpdate(Session, { id, user: userId, revokedAt: null }, { revokedAt: new Date() });
    if (ended === 0) throw new NotFoundError('Session not found');
  }

  /** From the server's shell: sets a new password and ends every session of that account. */
  async resetPassword(email: string, password: string): Promise<void> {
    const passwordHash = await hashPassword(password);
    await this.#orm.em.fork().transactional(async (em) => {
      const user = await em.findOne(User, { email: normaliseEmail(email) });
      if (!user) throw new NotFoundError(`No account with the email ${normaliseEmail(email)}`);
      user.passwordHash = passwordHash;
      await em.nativeUpdate(Session, { user: user.id, revokedAt: null }, { revokedAt: new Date() });
      recordAudit(
        em,
        { type: 'system', id: null, name: 'password-reset command', role: 'admin', userId: null },
        'user.password_reset',
        { type: 'user', id: user.id },
      );
    });
  }

  #createSession(em: EntityManager, user: IUser, client: ClientInfo): string {
    const sessionId = randomBytes(32).toString('base64url');
    em.create(Session, {
      id: hashToken(sessionId),
      user,
      expiresAt: new Date(Date.now() + this.#sessionTtlMs),
      ip: client.ip?.slice(0, 64) ?? null,
      userAgent: client.userAgent?.slice(0, 512) ?? null,
    });
    return sessionId;
  }
}
