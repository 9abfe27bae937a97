// The audit log as its page shows it: each event's action in words, its target named (a project
// by its current name, an agent or user by the name the event recorded) and linked where it has a
// page, and its details as short "key: value" lines. The JSON keeps the raw fields; this only reads
// them. Details never hold secret values (the audit log records which fields changed, not values).
import type { AuditEventJson } from '../modules/audit/audit.service.ts';

const ACTION_WORDS: Record<string, string> = {
  'deployment.trigger': 'Deployment triggered',
  'deployment.cancel': 'Deployment cancelled',
  'webhook.redeliver': 'Webhook delivery redelivered',
  'project.create': 'Project created',
  'project.update': 'Project changed',
  'project.delete': 'Project deleted',
  'project.webhook_rotate': 'Webhook secret rotated',
  'project.deploy_key_rotate': 'Deploy key rotated',
  'project.hook_create': 'Outgoing webhook added',
  'project.hook_delete': 'Outgoing webhook deleted',
  'agent.create': 'Agent added',
  'agent.delete': 'Agent revoked',
  'agent.install.start': 'Agent installation started',
  'agent.install.succeeded': 'Agent installed',
  'agent.install.failed': 'Agent installation failed',
  'token.create': 'API token created',
  'token.revoke': 'API token revoked',
  'user.register': 'Account registered',
  'user.login': 'Signed in',
  'user.password_reset': 'Password reset',
  'user.invite': 'User invited',
  'user.invitation_revoke': 'Invitation revoked',
  'user.role': 'Role changed',
  'user.delete': 'User removed',
  'settings.smtp_update': 'Mail settings changed',
  'settings.smtp_delete': 'Mail settings removed',
};

const ACTOR_WORDS: Record<string, string> = {
  user: 'user',
  token: 'API token',
  webhook: 'webhook',
  agent: 'agent',
  system: 'system',
};

/** Detail keys the row already shows elsewhere (the project column, the target). */
const SHOWN_ELSEWHERE = new Set(['project']);

export interface AuditRow {
  id: string;
  created_at: string;
  action: string;
  actionWords: string;
  actor: { kind: string; name: string };
  target: { label: string; href: string | null } | null;
  /** The event's project when the target is something else in it (a deployment, a delivery). */
  project: { label: string; href: string | null } | null;
  ip: string | null;
  details: string[];
}

const short = (id: string) => id.slice(0, 8);

function detailValue(value: unknown): string {
  if (value === null || value === undefined) return '—';
  if (Array.isArray(value)) return value.length ? value.map(detailValue).join(', ') : '—';
  if (typeof value === 'object') return JSON.stringify(value);
  return String(value);
}

function detailText(details: Record<string, unknown> | null, ip: string | null): string[] {
  if (!details) return [];
  return Object.entries(details)
    .filter(([key, value]) => !SHOWN_ELSEWHERE.has(key) && !(key === 'ip' && value === ip))
    .map(
      ([key, value]) =>
        `${key}: ${key === 'commit' && typeof value === 'string' ? value.slice(0, 10) : detailValue(value)}`,
    );
}

function projectRef(id: string, names: Map<string, string>, recordedName?: unknown) {
  const name = names.get(id);
  if (name) return { label: name, href: `/projects/${id}` };
  // Deleted: the audit log outlives the project, so only the name the event recorded is left.
  return { label: `${typeof recordedName === 'string' ? recordedName : short(id)} (deleted)`, href: null };
}

function targetOf(
  event: AuditEventJson,
  names: Map<string, string>,
): { label: string; href: string | null } | null {
  const { target, details } = event;
  if (!target) return null;
  const recorded = (key: string) => (typeof details?.[key] === 'string' ? (details[key] as string) : null);
  switch (target.type) {
    case 'project':
      return projectRef(target.id, names, details?.name);
    case 'deployment':
      return { label: `deployment ${short(target.id)}`, href: `/deploy/${target.id}` };
    case 'webhook_delivery':
      return {
        label: `delivery ${short(target.id)}`,
        href:
          event.project_id && names.has(event.project_id) ? `/projects/${event.project_id}#deliveries` : null,
      };
    case 'agent':
      return { label: `agent ${recorded('name') ?? short(target.id)}`, href: '/agents' };
    case 'user': {
      // Registering and signing in are done by the user themself: the actor's name is theirs.
      const own = event.actor.type === 'user' && event.actor.id === target.id ? event.actor.name : null;
      return { label: `user ${recorded('email') ?? own ?? short(target.id)}`, href: null };
    }
    case 'invitation':
      return { label: `invitation for ${recorded('email') ?? short(target.id)}`, href: null };
    case 'api_token':
      return { label: `API token ${recorded('name') ?? short(target.id)}`, href: null };
    case 'settings':
      return target.id === 'smtp'
        ? { label: 'mail settings', href: '/settings#smtp' }
        : { label: `settings: ${target.id}`, href: null };
    default:
      return { label: `${target.type} ${short(target.id)}`, href: null };
  }
}

export function auditRows(events: AuditEventJson[], projectNames: Map<string, string>): AuditRow[] {
  return events.map((e) => ({
    id: e.id,
    created_at: e.created_at,
    action: e.action,
    actionWords: ACTION_WORDS[e.action] ?? e.action,
    actor: { kind: ACTOR_WORDS[e.actor.type] ?? e.actor.type, name: e.actor.name },
    target: targetOf(e, projectNames),
    project:
      e.project_id && !(e.target?.type === 'project' && e.target.id === e.project_id)
        ? projectRef(e.project_id, projectNames)
        : null,
    ip: e.ip,
    details: detailText(e.details, e.ip),
  }));
}
