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
//    sent, and the outcome recorded as a `notification_attempts` row; failures are retried with
//    exponential backoff until the attempts run out.
// A restart loses nothing (the rows wait) and sends nothing twice, unless a process died in the
// middle of a send, whose lease then expires and the send is tried again. Nothing here writes to
// a deployment: a failed notification is recorded and logged, never the deployment's business.
import { randomUUID } from 'node:crypto';
import type { MikroORM } from '@mikro-orm/postgresql';
import type { Logger } from 'pino';
import type { SecretBox } from '../common/crypto.ts';
import { PassLoop } from '../common/pass-loop.ts';
import { BadRequestError } from '../common/errors.ts';
import type { DeploymentStatus } from '../deployment/deployment.entity.ts';
import { type Mailer, SmtpNotConfiguredError } from '../mail/mailer.ts';
import type { CommitStatusSettings, NotificationSettings } from '../project/project.entity.ts';
import { commitStatusRequest, parseForgeUrl } from './commit-status.ts';
import { type FailingCommand, outputTail, renderDeploymentMail } from './deployment-mail.ts';
import type { Channel, HookEvent } from './notification.entity.ts';
import { postJson, signWebhook } from './outgoing-http.ts';

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
/** Bytes of a failing command's output read for the mail's tail. */
const TAIL_BYTES = 16 * 1024;
const BACKOFF_FACTOR = 2.5;

const rank = (column: string) => `(case ${column} when 'queued' then 0 when 'running' then 1 else 2 end)`;

interface DeploymentRow {
  id: string;
  project_id: string;
  project_name: string;
  status: DeploymentStatus;
  reason: string | null;
  commit: string | null;
  branch: string;
  trigger: string;
  triggered_by: string;
  started_at: string;
  finished_at: string | null;
  notifications: NotificationSettings | null;
  commit_status: CommitStatusSettings | null;
}

interface ClaimedRow {
  id: string;
  channel: Channel;
  hook_id: string | null;
  event: string;
  deployment_id: string;
  project_id: string;
  deployment_status: DeploymentStatus;
  attempts: number;
  payload: Record<string, unknown> | null;
}

type Outcome =
  | { kind: 'delivered'; statusCode: number | null; durationMs: number }
  | { kind: 'retry' | 'failed'; statusCode: number | null; error: string; durationMs: number }
  | { kind: 'skipped'; error: string };

export class NotificationWorker {
  readonly #o: NotificationWorkerOptions;
  readonly #httpTimeoutMs: number;
  readonly #loop: PassLoop;
  #stopped = true;

  constructor(options: NotificationWorkerOptions) {
    this.#o = options;
    this.#httpTimeoutMs = options.httpTimeoutMs ?? 10_000;
    this.#loop = new PassLoop({
      intervalMs: options.intervalMs,
      pass: () => this.#pass(),
      log: options.log,
      name: 'notification',
    });
  }

  start(): void {
    this.#stopped = false;
    this.#loop.start();
  }

  async stop(): Promise<void> {
    this.#stopped = true;
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
    while (!this.#stopped && (await this.#deliverDue()) === BATCH);
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
      if (this.#stopped) return;
      await this.#notice(id);
    }
  }

  /** Records the deployment's current state as noticed and creates its deliveries, at most once. */
  async #notice(deploymentId: string): Promise<void> {
    await this.#o.orm.em.fork().transactional(async (em) => {
      const [d] = await em.execute<DeploymentRow[]>(
        `select d.id, d.project_id, p.name as project_name, d.status, d.reason, d.commit, d.branch,
                d.trigger, d.triggered_by, d.started_at, d.finished_at, p.notifications, p.commit_status
           from deployments d join projects p on p.id = d.project_id
          where d.id = ?`,
        [deploymentId],
      );
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

  #webhookPayload(event: string, d: DeploymentRow) {
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
    const claimed = await this.#o.orm.em.fork().execute<ClaimedRow[]>(
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

  async #deliver(row: ClaimedRow): Promise<void> {
    let outcome: Outcome;
    try {
      outcome =
        row.channel === 'email'
          ? await this.#sendMail(row)
          : row.channel === 'webhook'
            ? await this.#sendWebhook(row)
            : await this.#sendCommitStatus(row);
    } catch (err) {
      // A bug or the database: the delivery is retried like any failure, and the error logged.
      this.#o.log.error({ err, delivery: row.id, channel: row.channel }, 'notification could not be sent');
      outcome = { kind: 'retry', statusCode: null, error: 'Internal error while sending', durationMs: 0 };
    }
    await this.#record(row, outcome);
  }

  async #record(row: ClaimedRow, outcome: Outcome): Promise<void> {
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

  async #sendMail(row: ClaimedRow): Promise<Outcome> {
    const em = this.#o.orm.em.fork();
    const [d] = await em.execute<DeploymentRow[]>(
      `select d.id, d.project_id, p.name as project_name, d.status, d.reason, d.commit, d.branch,
              d.trigger, d.triggered_by, d.started_at, d.finished_at, p.notifications, p.commit_status
         from deployments d join projects p on p.id = d.project_id
        where d.id = ?`,
      [row.deployment_id],
    );
    const settings = d?.notifications;
    if (!d || !settings || settings.on === 'never' || settings.emails.length === 0) {
      return { kind: 'skipped', error: 'Mail notifications were turned off' };
    }
    const mail = renderDeploymentMail({
      projectName: d.project_name,
      deploymentId: d.id,
      status: d.status,
      reason: d.reason,
      commit: d.commit,
      branch: d.branch,
      trigger: d.trigger,
      triggeredBy: d.triggered_by,
      startedAt: new Date(d.started_at),
      finishedAt: d.finished_at ? new Date(d.finished_at) : null,
      failing: await this.#failingCommand(d.id),
      url: this.#deploymentUrl(d.id),
    });
    const started = performance.now();
    const elapsed = () => Math.round(performance.now() - started);
    try {
      await this.#o.mailer.send({ to: settings.emails.join(', '), ...mail });
      return { kind: 'delivered', statusCode: null, durationMs: elapsed() };
    } catch (err) {
      if (err instanceof SmtpNotConfiguredError) return { kind: 'skipped', error: 'SMTP not configured' };
      const message = err instanceof Error ? err.message : String(err);
      // Refused addresses will be refused again; a server that is down may come back.
      const kind = err instanceof BadRequestError ? 'failed' : 'retry';
      return { kind, statusCode: null, error: message, durationMs: elapsed() };
    }
  }

  /** The first command that did not succeed (not one skipped after it), with its output's tail. */
  async #failingCommand(deploymentId: string): Promise<FailingCommand | null> {
    const em = this.#o.orm.em.fork();
    const [entry] = await em.execute<
      Array<{
        id: string;
        host: string;
        cmd: string;
        status: string;
        exit_code: number | null;
        size: string | number | null;
        tail: Buffer | null;
      }>
    >(
      `select id, host, cmd, status, exit_code, octet_length(output) as size,
              substring(output from greatest(octet_length(output) - ${TAIL_BYTES - 1}, 1)) as tail
         from log_entries
        where deployment_id = ? and success = false and status <> 'skipped'
        order by started_at, seq
        limit 1`,
      [deploymentId],
    );
    if (!entry) return null;
    let bytes: Buffer;
    let cut: boolean;
    if (entry.tail) {
      bytes = entry.tail;
      cut = Number(entry.size) > TAIL_BYTES;
    } else {
      // Not compacted (the entry never ended properly): the newest chunks hold the tail.
      const chunks = await em.execute<Array<{ data: Buffer; offset: string | number }>>(
        `select data, "offset" from log_chunks where log_entry_id = ? order by "offset" desc limit 64`,
        [entry.id],
      );
      const joined = Buffer.concat(chunks.reverse().map((c) => c.data));
      bytes = joined.subarray(Math.max(0, joined.length - TAIL_BYTES));
      cut = bytes.length < joined.length || (chunks.length > 0 && Number(chunks[0]!.offset) > 0);
    }
    const { tail, truncated } = outputTail(bytes, cut);
    return {
      host: entry.host,
      cmd: entry.cmd,
      status: entry.status,
      exitCode: entry.exit_code,
      tail,
      truncated,
    };
  }

  async #sendWebhook(row: ClaimedRow): Promise<Outcome> {
    const [hook] = await this.#o.orm.em
      .fork()
      .execute<Array<{ url: string; secret_encrypted: string }>>(
        'select url, secret_encrypted from project_hooks where id = ?',
        [row.hook_id],
      );
    if (!hook || !row.payload) return { kind: 'skipped', error: 'The webhook was deleted' };
    const body = JSON.stringify(row.payload);
    const timestamp = Math.floor(Date.now() / 1000);
    const secret = this.#o.box.decrypt(hook.secret_encrypted);
    const result = await postJson(
      hook.url,
      {
        'content-type': 'application/json',
        'user-agent': 'Deckhand-Webhooks',
        'webhook-id': row.id,
        'webhook-timestamp': String(timestamp),
        'webhook-signature': signWebhook(secret, row.id, timestamp, body),
      },
      body,
      this.#httpTimeoutMs,
    );
    if (result.ok) return { kind: 'delivered', statusCode: result.statusCode, durationMs: result.durationMs };
    return {
      kind: 'retry',
      statusCode: result.statusCode,
      error: result.error ?? 'failed',
      durationMs: result.durationMs,
    };
  }

  async #sendCommitStatus(row: ClaimedRow): Promise<Outcome> {
    const [d] = await this.#o.orm.em.fork().execute<
      Array<{
        commit: string | null;
        branch: string;
        reason: string | null;
        status: string;
        name: string;
        forge_url: string;
        commit_status: CommitStatusSettings | null;
        token: string | null;
      }>
    >(
      `select d.commit, d.branch, d.reason, d.status, p.name, p.forge_url, p.commit_status,
              p.commit_status_token_encrypted as token
         from deployments d join projects p on p.id = d.project_id
        where d.id = ?`,
      [row.deployment_id],
    );
    if (!d?.commit_status || !d.token) return { kind: 'skipped', error: 'Commit statuses were turned off' };
    if (!d.commit) return { kind: 'skipped', error: 'The deployment has no commit' };
    const repo = parseForgeUrl(d.forge_url);
    if (!repo) {
      return {
        kind: 'failed',
        statusCode: null,
        error: 'forge_url does not name a repository on a forge',
        durationMs: 0,
      };
    }
    const request = commitStatusRequest({
      provider: d.commit_status.provider,
      apiUrl: d.commit_status.api_url,
      repo,
      token: this.#o.box.decrypt(d.token),
      sha: d.commit,
      branch: d.branch,
      status: row.deployment_status,
      // the reason describes the deployment's current state; an earlier state gets its default text
      reason: d.status === row.deployment_status ? d.reason : null,
      projectName: d.name,
      targetUrl: this.#deploymentUrl(row.deployment_id),
    });
    const result = await postJson(request.url, request.headers, request.body, this.#httpTimeoutMs);
    if (result.ok) return { kind: 'delivered', statusCode: result.statusCode, durationMs: result.durationMs };
    const code = result.statusCode;
    // A refusal (bad token, unknown repository or commit) will be refused again; 429 and 5xx may pass later.
    const retry = code === null || code === 429 || code >= 500;
    return {
      kind: retry ? 'retry' : 'failed',
      statusCode: code,
      error: result.error ?? 'failed',
      durationMs: result.durationMs,
    };
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
