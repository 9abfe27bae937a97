// A project's outgoing webhooks (create with a secret shown once, list, delete) and the record of
// every notification sent or tried for it: mails, webhook deliveries and commit statuses, each
// with its attempts. Sending is the worker's (notification.worker.ts).
import { LockMode } from '@mikro-orm/core';
import type { MikroORM } from '@mikro-orm/postgresql';
import { recordAudit } from '../audit/audit.service.ts';
import type { Actor } from '../common/actor.ts';
import type { SecretBox } from '../common/crypto.ts';
import { ConflictError, NotFoundError } from '../common/errors.ts';
import { iso, isUuid } from '../common/schemas.ts';
import { Project } from '../project/project.entity.ts';
import { checkHttpUrl } from '../project/project.service.ts';
import { HOOK_EVENTS, type IProjectHook, ProjectHook } from './notification.entity.ts';
import type { CreateHookBody, HookJson, NotificationDeliveryJson } from './notification.schema.ts';
import { newWebhookSecret } from './outgoing-http.ts';

/** Hooks per project: enough for every receiver anyone needs, few enough to bound a deployment's fan-out. */
const MAX_HOOKS = 20;

interface DeliveryRow {
  id: string;
  channel: NotificationDeliveryJson['channel'];
  hook_id: string | null;
  event: string;
  deployment_id: string;
  deployment_status: string;
  state: NotificationDeliveryJson['state'];
  attempts: number;
  next_attempt_at: string;
  last_error: string | null;
  delivered_at: string | null;
  created_at: string;
}

interface AttemptRow {
  delivery_id: string;
  created_at: string;
  success: boolean;
  status_code: number | null;
  error: string | null;
  duration_ms: number;
}

const isoText = (value: string) => new Date(value).toISOString();

export class NotificationService {
  readonly #orm: MikroORM;
  readonly #box: SecretBox;

  constructor(orm: MikroORM, box: SecretBox) {
    this.#orm = orm;
    this.#box = box;
  }

  static hookJson(hook: IProjectHook): HookJson {
    return { id: hook.id, url: hook.url, events: hook.events, created_at: iso(hook.createdAt) };
  }

  async listHooks(projectId: string): Promise<HookJson[]> {
    const em = this.#orm.em.fork();
    await this.#project(projectId, em);
    const hooks = await em.find(ProjectHook, { project: projectId }, { orderBy: { createdAt: 'asc' } });
    return hooks.map((h) => NotificationService.hookJson(h));
  }

  /** Creates a hook; its secret is in the answer and never again. */
  async createHook(
    projectId: string,
    input: CreateHookBody,
    actor: Actor,
  ): Promise<{ hook: HookJson; secret: string }> {
    const url = checkHttpUrl(input.url, 'url');
    const secret = newWebhookSecret();
    return this.#orm.em.fork().transactional(async (em) => {
      // Locks the project row, so two concurrent creations cannot both pass the limit.
      const project = await this.#project(projectId, em, true);
      if ((await em.count(ProjectHook, { project: project.id })) >= MAX_HOOKS) {
        throw new ConflictError(`A project has at most ${MAX_HOOKS} outgoing webhooks`);
      }
      const hook = em.create(ProjectHook, {
        project: project.id,
        url,
        events: input.events ?? [...HOOK_EVENTS],
        secretEncrypted: this.#box.encrypt(secret),
      });
      recordAudit(
        em,
        actor,
        'project.hook_create',
        { type: 'project', id: project.id },
        { hook: hook.id, url },
      );
      await em.flush();
      return { hook: NotificationService.hookJson(hook), secret };
    });
  }

  async deleteHook(projectId: string, hookId: string, actor: Actor): Promise<void> {
    await this.#orm.em.fork().transactional(async (em) => {
      const hook = await this.#hook(projectId, hookId, em);
      recordAudit(em, actor, 'project.hook_delete', { type: 'project', id: projectId }, { hook: hook.id });
      em.remove(hook);
    });
  }

  /** A hook's deliveries, newest first, each with its attempts. */
  async hookDeliveries(
    projectId: string,
    hookId: string,
    limit: number,
  ): Promise<NotificationDeliveryJson[]> {
    await this.#hook(projectId, hookId);
    return this.#deliveries('project_id = ? and hook_id = ?', [projectId, hookId], limit);
  }

  /** Every notification of a project (mail, webhooks, commit statuses), newest first. */
  async projectDeliveries(
    projectId: string,
    limit: number,
    channel?: NotificationDeliveryJson['channel'],
  ): Promise<NotificationDeliveryJson[]> {
    await this.#project(projectId);
    return channel
      ? this.#deliveries('project_id = ? and channel = ?', [projectId, channel], limit)
      : this.#deliveries('project_id = ?', [projectId], limit);
  }

  async #deliveries(where: string, params: unknown[], limit: number): Promise<NotificationDeliveryJson[]> {
    const em = this.#orm.em.fork();
    const rows = await em.execute<DeliveryRow[]>(
      `select id, channel, hook_id, event, deployment_id, deployment_status, state, attempts,
              next_attempt_at, last_error, delivered_at, created_at
         from notification_deliveries
        where ${where}
        order by created_at desc, id
        limit ${Math.trunc(limit)}`,
      params,
    );
    if (rows.length === 0) return [];
    const attempts = await em.execute<AttemptRow[]>(
      `select delivery_id, created_at, success, status_code, error, duration_ms
         from notification_attempts
        where delivery_id in (${rows.map(() => '?').join(', ')})
        order by created_at`,
      rows.map((r) => r.id),
    );
    return rows.map((r) => ({
      id: r.id,
      channel: r.channel,
      hook_id: r.hook_id,
      event: r.event,
      deployment_id: r.deployment_id,
      deployment_status: r.deployment_status,
      state: r.state,
      attempts: r.attempts,
      next_attempt_at: r.state === 'pending' ? isoText(r.next_attempt_at) : null,
      last_error: r.last_error,
      delivered_at: r.delivered_at ? isoText(r.delivered_at) : null,
      created_at: isoText(r.created_at),
      attempt_log: attempts
        .filter((a) => a.delivery_id === r.id)
        .map((a) => ({
          at: isoText(a.created_at),
          success: a.success,
          status_code: a.status_code,
          error: a.error,
          duration_ms: a.duration_ms,
        })),
    }));
  }

  async #project(id: string, em = this.#orm.em.fork(), lock = false) {
    const project = isUuid(id)
      ? await em.findOne(Project, { id }, lock ? { lockMode: LockMode.PESSIMISTIC_WRITE } : {})
      : null;
    if (!project) throw new NotFoundError('Project not found');
    return project;
  }

  async #hook(projectId: string, hookId: string, em = this.#orm.em.fork()): Promise<IProjectHook> {
    await this.#project(projectId, em);
    const hook = isUuid(hookId) ? await em.findOne(ProjectHook, { id: hookId, project: projectId }) : null;
    if (!hook) throw new NotFoundError('Webhook not found');
    return hook;
  }
}
