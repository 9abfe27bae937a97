// Managing the accounts (admins): the list, invitations, roles, removal. An instance always keeps
// an admin: the last one can be neither demoted nor removed. Registering with an invitation is
// UserService.register's.
import type { EntityManager, MikroORM } from '@mikro-orm/postgresql';
import { recordAudit } from '../audit/audit.service.ts';
import type { Actor } from '../common/actor.ts';
import { hashToken, randomToken } from '../common/crypto.ts';
import { ConflictError, NotFoundError } from '../common/errors.ts';
import { iso, isUuid } from '../common/schemas.ts';
import { Invitation, type IInvitation } from './invitation.entity.ts';
import { type Role, Session, User } from './user.entity.ts';
import { normaliseEmail } from './user.service.ts';

export const INVITATION_PREFIX = 'dhi_';
const INVITATION_TTL_MS = 7 * 24 * 60 * 60 * 1000;

export interface UserListJson {
  id: string;
  email: string;
  role: Role;
  created_at: string;
  last_seen_at: string | null;
}

export interface InvitationJson {
  id: string;
  email: string;
  role: Role;
  invited_by: string;
  created_at: string;
  expires_at: string;
  accepted_at: string | null;
}

function invitationJson(i: IInvitation): InvitationJson {
  return {
    id: i.id,
    email: i.email,
    role: i.role,
    invited_by: i.invitedBy,
    created_at: iso(i.createdAt),
    expires_at: iso(i.expiresAt),
    accepted_at: i.acceptedAt ? iso(i.acceptedAt) : null,
  };
}

export class UserAdminService {
  readonly #orm: MikroORM;
  readonly #registerUrl: (token: string) => string;

  constructor(orm: MikroORM, registerUrl: (token: string) => string) {
    this.#orm = orm;
    this.#registerUrl = registerUrl;
  }

  async list(): Promise<UserListJson[]> {
    const rows = await this.#orm.em.fork().execute<
      Array<{
        id: string;
        email: string;
        role: Role;
        created_at: Date | string;
        last_seen_at: Date | string | null;
      }>
    >(
      `select u.id, u.email, u.role, u.created_at,
              (select max(s.last_seen_at) from sessions s where s.user_id = u.id) as last_seen_at
         from users u order by u.created_at`,
    );
    return rows.map((r) => ({
      id: r.id,
      email: r.email,
      role: r.role,
      created_at: iso(new Date(r.created_at)),
      last_seen_at: r.last_seen_at === null ? null : iso(new Date(r.last_seen_at)),
    }));
  }

  /** A new invitation and its link (shown once). Inviting an address again replaces the open one. */
  async invite(
    input: { email: string; role: Role },
    actor: Actor,
  ): Promise<{ invitation: InvitationJson; url: string }> {
    const email = normaliseEmail(input.email);
    const token = randomToken(INVITATION_PREFIX);
    const invitation = await this.#orm.em.fork().transactional(async (em) => {
      if (await em.findOne(User, { email })) throw new ConflictError('A user with this email already exists');
      await em.nativeUpdate(
        Invitation,
        { email, acceptedAt: null, revokedAt: null },
        { revokedAt: new Date() },
      );
      const created = em.create(Invitation, {
        email,
        role: input.role,
        tokenHash: hashToken(token),
        invitedBy: actor.name,
        expiresAt: new Date(Date.now() + INVITATION_TTL_MS),
      });
      recordAudit(
        em,
        actor,
        'user.invite',
        { type: 'invitation', id: created.id },
        { email, role: input.role },
      );
      return created;
    });
    return { invitation: invitationJson(invitation), url: this.#registerUrl(token) };
  }

  /** Open invitations (neither accepted, revoked nor expired), newest first. */
  async invitations(): Promise<InvitationJson[]> {
    const open = await this.#orm.em
      .fork()
      .find(
        Invitation,
        { acceptedAt: null, revokedAt: null, expiresAt: { $gt: new Date() } },
        { orderBy: { createdAt: 'desc' } },
      );
    return open.map(invitationJson);
  }

  async revokeInvitation(id: string, actor: Actor): Promise<void> {
    await this.#orm.em.fork().transactional(async (em) => {
      const invitation = isUuid(id)
        ? await em.findOne(Invitation, { id, acceptedAt: null, revokedAt: null })
        : null;
      if (!invitation) throw new NotFoundError('Invitation not found');
      invitation.revokedAt = new Date();
      recordAudit(
        em,
        actor,
        'user.invitation_revoke',
        { type: 'invitation', id },
        { email: invitation.email },
      );
    });
  }

  async setRole(id: string, role: Role, actor: Actor): Promise<UserListJson> {
    await this.#orm.em.fork().transactional(async (em) => {
      const user = isUuid(id) ? await em.findOne(User, { id }) : null;
      if (!user) throw new NotFoundError('User not found');
      if (user.role === 'admin' && role !== 'admin') await this.#keepAnAdmin(em, user.id);
      const from = user.role;
      user.role = role;
      recordAudit(
        em,
        actor,
        'user.role',
        { type: 'user', id: user.id },
        { email: user.email, from, to: role },
      );
    });
    const listed = (await this.list()).find((u) => u.id === id);
    if (!listed) throw new NotFoundError('User not found');
    return listed;
  }

  /** Removes an account: its sessions and API tokens go with it (they cascade). */
  async delete(id: string, actor: Actor): Promise<void> {
    await this.#orm.em.fork().transactional(async (em) => {
      const user = isUuid(id) ? await em.findOne(User, { id }) : null;
      if (!user) throw new NotFoundError('User not found');
      if (user.role === 'admin') await this.#keepAnAdmin(em, user.id);
      recordAudit(em, actor, 'user.delete', { type: 'user', id: user.id }, { email: user.email });
      await em.nativeDelete(Session, { user: user.id });
      em.remove(user);
    });
  }

  async #keepAnAdmin(em: EntityManager, userId: string): Promise<void> {
    // Admins are locked in a fixed order, so two admins removing each other cannot both succeed.
    const admins = await em.execute<Array<{ id: string }>>(
      `select id from users where role = 'admin' order by id for update`,
    );
    if (admins.every((a) => a.id === userId)) {
      throw new ConflictError('This is the last admin: make another user an admin first');
    }
  }
}
