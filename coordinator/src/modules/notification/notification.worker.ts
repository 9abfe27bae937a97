// The notification worker: tells people and systems what became of a deployment — mail to a
// project's addresses, its outgoing webhooks, the commit status on its forge.
//
// It never hooks into the code that runs deployments. On its own timer it reads deployment states
// from PostgreSQL and works through an outbox:
// 1. Notice: a deployment whose state differs from the last one recorded in `deployment_notices`
//    (and moved forward: queued → running → ended) gets that state recorded and, in the same
//    transaction, one `notification_deliveries` row per channel that wants it. The conditional
//    upsert lets exactly one process win a state, so replicas never fan out twice.
// 2. Deliver: due rows are claimed with FOR UPDATE SKIP LOCKED and a lease (`locked_until`),
//    sent by their channel (send-mail.ts, send-webhook.ts, send-commit-status.ts), and the outcome
//    recorded as a `notification_attempts` row; failures are retried with exponential backoff
//    until the attempts run out.
// A restart loses nothing (the rows wait) and sends nothing twice, unless a process died in the
// middle of a send, whose lease then expires and the send is tried again. Nothing here writes to
// a deployment: a failed notification is recorded and logged, never the deployment's business.
import { randomUUID } from 'node:crypto';
import type { MikroORM } from '@mikro-orm/postgresql';
import type { Logger } from 'pino';
import type { SecretBox } from '../common/crypto.ts';
import { PassLoop } from '../common/pass-loop.ts';
import type { Mailer } from '../mail/mailer.ts';
import type { NotificationSettings } from '../project/project.entity.ts';
import {
  type ChannelContext,
  type ChannelSender,
  type ClaimedDelivery,
  type NoticedDeployment,
  type Outcome,
  readNoticedDeployment,
} from './delivery.ts';
import type { Channel, HookEvent } from './notification.entity.ts';
import { sendCommitStatus } from './send-commit-status.ts';
import { sendMail } from './send-mail.ts';
import { sendWebhook } from './send-webhook.ts';

export interface NotificationWorkerOptions {
  orm: MikroORM;
  box: SecretBox;
  mailer: Mailer;
  publicUrl: () => string;
  log: Logger;
  intervalMs: number;
  /** Tries per delivery, the first included. */
  retryAttempts: number;
  /** Delay after the first failure; each next one is 2.5 times longer. */
  retryBaseMs: number;
  /** One webhook or commit-status request. */
  httpTimeoutMs?: number;
}

const FINAL: ReadonlySet<string> = new Set(['success', 'failed', 'cancelled', 'timed_out']);
/** Ended deployments older than this are not noticed any more (a coordinator down for a day). */
const LOOKBACK = "interval '1 day'";
/** How long a claimed delivery is ours: longer than any send can take (SMTP waits 10 s per step). */
const LEASE_SECONDS = 300;
const BATCH = 20;
const BACKOFF_FACTOR = 2.5;

const rank = (column: string) => `(case ${column} when 'queued' then 0 when 'running' then 1 else 2 end)`;

const SENDERS: Record<Channel, ChannelSender> = {
  email: sendMail,
  webhook: sendWebhook,
  commit_status: sendCommitStatus,
};

export class NotificationWorker {
  readonly #o: NotificationWorkerOptions;
  readonly #channels: ChannelContext;
  readonly #loop: PassLoop;

  constructor(options: NotificationWorkerOptions) {
    this.#o = options;
    this.#channels = {
      orm: options.orm,
      box: options.box,
      mailer: options.mailer,
      deploymentUrl: (id) => this.#deploymentUrl(id),
      httpTimeoutMs: options.httpTimeoutMs ?? 10_000,
    };
    this.#loop = new PassLoop({
      intervalMs: options.intervalMs,
      pass: () => this.#pass(),
      log: options.log,
      name: 'notification',
    });
  }

  start(): void {
    this.#loop.start();
  }

  async stop(): Promise<void> {
    await this.#loop.stop();
  }

  /** Runs a pass soon; passes never overlap, and a nudge during one causes another after it. */
  nudge(): void {
    this.#loop.nudge();
  }

  /** One pass, awaited (tests). */
  async runOnce(): Promise<void> {
    await this.#pass();
  }

  async #pass(): Promise<void> {
    await this.#noticeChanges();
    // Sends until nothing is due (a burst of deployments is not spread over many intervals).
    while (!this.#loop.stopRequested && (await this.#deliverDue()) === BATCH);
  }

  // --- 1. Notice ------------------------------------------------------------------------------

  async #noticeChanges(): Promise<void> {
    const changed = await this.#o.orm.em.fork().execute<Array<{ id: string }>>(
      `select d.id
         from deployments d
         join projects p on p.id = d.project_id
         left join deployment_notices n on n.deployment_id = d.id
        where (n.status is null or ${rank('n.status')} < ${rank('d.status')})
          and (d.finished_at is null or d.finished_at > now() - ${LOOKBACK})
          and (p.notifications->>'since' is not null
               or p.commit_status is not null
               or exists (select 1 from project_hooks h where h.project_id = p.id))
        order by d.started_at
        limit 200`,
    );
    for (const { id } of changed) {
      if (this.#loop.stopRequested) return;
      await this.#notice(id);
    }
  }

  /** Records the deployment's current state as noticed and creates its deliveries, at most once. */
  async #notice(deploymentId: string): Promise<void> {
    await this.#o.orm.em.fork().transactional(async (em) => {
      const d = await readNoticedDeployment(em, deploymentId);
      if (!d) return;
      const won = await em.execute<Array<{ deployment_id: string }>>(
        `insert into deployment_notices (deployment_id, status, noticed_at) values (?, ?, now())
         on conflict (deployment_id) do update set status = excluded.status, noticed_at = excluded.noticed_at
          where ${rank('deployment_notices.status')} < ${rank('excluded.status')}
         returning deployment_id`,
        [d.id, d.status],
      );
      if (won.length === 0) return; // another process noticed this state (or a later one) first

      const final = FINAL.has(d.status);
      // When the state was reached: deliveries go only to channels configured before it.
      const at = final
        ? new Date(d.finished_at ?? Date.now())
        : d.status === 'queued'
          ? new Date(d.started_at)
          : new Date();
      const event = final
        ? 'deployment.finished'
        : d.status === 'running'
          ? 'deployment.started'
          : 'deployment.queued';
      const add = (
        channel: Channel,
        hookId: string | null,
        extra: Partial<{ state: string; error: string; payload: unknown }> = {},
      ) =>
        em.execute(
          `insert into notification_deliveries
             (id, created_at, deployment_id, project_id, hook_id, channel, event, deployment_status,
              dedupe_key, state, attempts, next_attempt_at, last_error, payload)
           values (?, now(), ?, ?, ?, ?, ?, ?, ?, ?, 0, now(), ?, ?::jsonb)
           on conflict (dedupe_key) do nothing`,
          [
            randomUUID(),
            d.id,
            d.project_id,
            hookId,
            channel,
            event,
            d.status,
            `${d.id}:${channel}:${hookId ?? ''}:${d.status}`,
            extra.state ?? 'pending',
            extra.error ?? null,
            extra.payload === undefined ? null : JSON.stringify(extra.payload),
          ],
        );

      const mail = d.notifications;
      if (
        final &&
        mail?.since &&
        mail.emails.length > 0 &&
        wantsMail(mail.on, d.status) &&
        at >= new Date(mail.since)
      ) {
        await add('email', null);
      }

      if (event !== 'deployment.queued') {
        const hooks = await em.execute<Array<{ id: string; events: HookEvent[]; created_at: string }>>(
          'select id, events, created_at from project_hooks where project_id = ? order by created_at',
          [d.project_id],
        );
        const payload = this.#webhookPayload(event, d);
        for (const hook of hooks) {
          if (hook.events.includes(event) && new Date(hook.created_at) <= at)
            await add('webhook', hook.id, { payload });
        }
      }

      const status = d.commit_status;
      if (status && at >= new Date(status.since)) {
        if (d.commit) {
          // A later state makes an earlier one not yet sent pointless (and sent after it, wrong).
          await em.execute(
            `update notification_deliveries set state = 'superseded', locked_until = null
              where deployment_id = ? and channel = 'commit_status' and state = 'pending'
                and (locked_until is null or locked_until < now())`,
            [d.id],
          );
          await add('commit_status', null);
        } else if (final) {
          await add('commit_status', null, {
            state: 'skipped',
            error: 'The deployment ended before its commit was known',
          });
        }
      }
    });
  }

  #webhookPayload(event: string, d: NoticedDeployment) {
    const startedAt = new Date(d.started_at);
    const finishedAt = d.finished_at ? new Date(d.finished_at) : null;
    return {
      type: event,
      timestamp: new Date().toISOString(),
      data: {
        project: { id: d.project_id, name: d.project_name },
        deployment: {
          id: d.id,
          status: d.status,
          reason: d.reason,
          commit: d.commit,
          branch: d.branch,
          trigger: d.trigger,
          triggered_by: d.triggered_by,
          started_at: startedAt.toISOString(),
          finished_at: finishedAt?.toISOString() ?? null,
          duration_seconds: finishedAt
            ? Math.round((finishedAt.getTime() - startedAt.getTime()) / 1000)
            : null,
          url: this.#deploymentUrl(d.id),
        },
      },
    };
  }

  #deploymentUrl(id: string): string {
    return `${this.#o.publicUrl()}/deploy/${id}`;
  }

  // --- 2. Deliver -----------------------------------------------------------------------------

  /** Claims and sends one batch of due deliveries; how many were claimed. */
  async #deliverDue(): Promise<number> {
    const claimed = await this.#o.orm.em.fork().execute<ClaimedDelivery[]>(
      `update notification_deliveries
          set locked_until = now() + interval '${LEASE_SECONDS} seconds', attempts = attempts + 1
        where id in (
          select d.id from notification_deliveries d
           where d.state = 'pending' and d.next_attempt_at <= now()
             and (d.locked_until is null or d.locked_until < now())
             and not (d.channel = 'commit_status' and exists (
                   select 1 from notification_deliveries o
                    where o.deployment_id = d.deployment_id and o.channel = 'commit_status'
                      and o.state = 'pending' and o.created_at < d.created_at))
           order by d.next_attempt_at
           limit ${BATCH}
           for update skip locked)
        returning id, channel, hook_id, event, deployment_id, project_id, deployment_status, attempts, payload`,
    );
    await Promise.all(claimed.map((row) => this.#deliver(row)));
    return claimed.length;
  }

  async #deliver(row: ClaimedDelivery): Promise<void> {
    let outcome: Outcome;
    try {
      outcome = await SENDERS[row.channel](this.#channels, row);
    } catch (err) {
      // A bug or the database: the delivery is retried like any failure, and the error logged.
      this.#o.log.error({ err, delivery: row.id, channel: row.channel }, 'notification could not be sent');
      outcome = { kind: 'retry', statusCode: null, error: 'Internal error while sending', durationMs: 0 };
    }
    await this.#record(row, outcome);
  }

  async #record(row: ClaimedDelivery, outcome: Outcome): Promise<void> {
    const exhausted = row.attempts >= this.#o.retryAttempts;
    const state =
      outcome.kind === 'delivered'
        ? 'delivered'
        : outcome.kind === 'skipped'
          ? 'skipped'
          : outcome.kind === 'retry' && !exhausted
            ? 'pending'
            : 'failed';
    const delayMs = Math.round(this.#o.retryBaseMs * BACKOFF_FACTOR ** (row.attempts - 1));
    const error = outcome.kind === 'delivered' ? null : outcome.error;
    await this.#o.orm.em.fork().transactional(async (em) => {
      if (outcome.kind !== 'skipped') {
        await em.execute(
          `insert into notification_attempts (id, created_at, delivery_id, success, status_code, error, duration_ms)
           values (?, now(), ?, ?, ?, ?, ?)`,
          [randomUUID(), row.id, outcome.kind === 'delivered', outcome.statusCode, error, outcome.durationMs],
        );
      }
      await em.execute(
        `update notification_deliveries
            set state = ?, locked_until = null, last_error = ?,
                delivered_at = case when ? then now() else delivered_at end,
                next_attempt_at = case when ? then now() + ? * interval '1 millisecond' else next_attempt_at end
          where id = ?`,
        [state, error, state === 'delivered', state === 'pending', delayMs, row.id],
      );
    });
    const context = {
      delivery: row.id,
      channel: row.channel,
      project: row.project_id,
      deployment: row.deployment_id,
      attempt: row.attempts,
    };
    if (state === 'delivered') this.#o.log.info(context, 'notification delivered');
    else if (state === 'skipped') this.#o.log.info({ ...context, reason: error }, 'notification skipped');
    else if (state === 'pending')
      this.#o.log.warn({ ...context, error, retryInMs: delayMs }, 'notification failed, will retry');
    else this.#o.log.warn({ ...context, error }, 'notification failed for good');
  }
}

export function wantsMail(on: NotificationSettings['on'], status: string): boolean {
  switch (on) {
    case 'always':
      return FINAL.has(status);
    case 'failure':
      return status === 'failed' || status === 'timed_out';
    case 'success':
      return status === 'success';
    case 'never':
      return false;
  }
}
