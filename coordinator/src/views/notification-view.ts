// A project's notifications as their pages show them: each notice's channel in words (the webhook
// named by its URL), its state as a badge class from a fixed set, and every attempt with what the
// other side answered. Only what the JSON already holds: never a payload, a token or a signing
// secret (those are not in the record the pages read).
import type { HookJson, NotificationDeliveryJson } from '../modules/notification/notification.schema.ts';

const CHANNEL_WORDS: Record<string, string> = {
  email: 'Mail',
  webhook: 'Webhook',
  commit_status: 'Commit status',
};

const STATE_WORDS: Record<string, string> = {
  pending: 'pending',
  delivered: 'delivered',
  failed: 'failed',
  skipped: 'skipped',
  superseded: 'superseded',
};

export const CHANNEL_FILTERS = [
  { channel: null, label: 'All', none: 'No notifications' },
  { channel: 'email', label: 'Mail', none: 'No mail sent' },
  { channel: 'webhook', label: 'Webhooks', none: 'No webhook deliveries' },
  { channel: 'commit_status', label: 'Commit statuses', none: 'No commit statuses reported' },
] as const;

export interface NoticeRow {
  id: string;
  channel: string;
  /** The webhook's URL (a deleted hook: null). */
  hookUrl: string | null;
  hookHref: string | null;
  event: string;
  deploymentId: string;
  deploymentStatus: string;
  state: string;
  stateWord: string;
  /** The badge's class suffix: a fixed set, whatever the record holds. */
  stateClass: string;
  createdAt: string;
  deliveredAt: string | null;
  nextAttemptAt: string | null;
  /** Why it is not delivered (kept when no attempt was made, e.g. skipped). */
  lastError: string | null;
  attempts: Array<{
    at: string;
    success: boolean;
    /** "HTTP 500", or null when no answer came. */
    answer: string | null;
    error: string | null;
    durationMs: number;
  }>;
}

export function noticeRows(
  projectId: string,
  notices: NotificationDeliveryJson[],
  hooks: HookJson[],
): NoticeRow[] {
  const urls = new Map(hooks.map((h) => [h.id, h.url]));
  return notices.map((n) => {
    const hookUrl = n.hook_id ? (urls.get(n.hook_id) ?? null) : null;
    return {
      id: n.id,
      channel: CHANNEL_WORDS[n.channel] ?? n.channel,
      hookUrl,
      hookHref: n.hook_id && hookUrl ? `/projects/${projectId}/hooks/${n.hook_id}/deliveries` : null,
      event: n.event,
      deploymentId: n.deployment_id,
      deploymentStatus: n.deployment_status,
      state: n.state,
      stateWord: STATE_WORDS[n.state] ?? n.state,
      stateClass: n.state in STATE_WORDS ? n.state : 'pending',
      createdAt: n.created_at,
      deliveredAt: n.delivered_at,
      nextAttemptAt: n.state === 'pending' ? n.next_attempt_at : null,
      lastError: n.last_error,
      attempts: n.attempt_log.map((a) => ({
        at: a.at,
        success: a.success,
        answer: a.status_code === null ? null : `HTTP ${a.status_code}`,
        error: a.error,
        durationMs: a.duration_ms,
      })),
    };
  });
}
