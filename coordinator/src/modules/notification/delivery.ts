// What the notification worker and its channel senders share: a claimed delivery, what sending
// it came to, and the deployment as the channels describe it. One file per channel sends:
// send-mail.ts, send-webhook.ts, send-commit-status.ts.
import type { EntityManager, MikroORM } from '@mikro-orm/postgresql';
import type { SecretBox } from '../common/crypto.ts';
import type { DeploymentStatus } from '../deployment/deployment.entity.ts';
import type { Mailer } from '../mail/mailer.ts';
import type { CommitStatusSettings, NotificationSettings } from '../project/project.entity.ts';
import type { Channel } from './notification.entity.ts';

/** A `notification_deliveries` row claimed for one attempt. */
export interface ClaimedDelivery {
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

/** What became of one attempt: `retry` is tried again until the attempts run out. */
export type Outcome =
  | { kind: 'delivered'; statusCode: number | null; durationMs: number }
  | { kind: 'retry' | 'failed'; statusCode: number | null; error: string; durationMs: number }
  | { kind: 'skipped'; error: string };

/** What a channel needs to send. */
export interface ChannelContext {
  orm: MikroORM;
  box: SecretBox;
  mailer: Mailer;
  /** The deployment's page, for links in mails, payloads and commit statuses. */
  deploymentUrl: (id: string) => string;
  /** One webhook or commit-status request. */
  httpTimeoutMs: number;
}

/** Sends one claimed delivery of its channel. */
export type ChannelSender = (ctx: ChannelContext, delivery: ClaimedDelivery) => Promise<Outcome>;

/** A deployment with its project's notification settings. */
export interface NoticedDeployment {
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

export async function readNoticedDeployment(
  em: EntityManager,
  deploymentId: string,
): Promise<NoticedDeployment | undefined> {
  const [d] = await em.execute<NoticedDeployment[]>(
    `select d.id, d.project_id, p.name as project_name, d.status, d.reason, d.commit, d.branch,
            d.trigger, d.triggered_by, d.started_at, d.finished_at, p.notifications, p.commit_status
       from deployments d join projects p on p.id = d.project_id
      where d.id = ?`,
    [deploymentId],
  );
  return d;
}
