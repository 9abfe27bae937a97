// Small formatting helpers the templates share (every page gets `it.fmt` and `it.h`): times as
// "3 min ago" with the exact UTC time beside, durations, short commits, status badges, the
// hidden fields of a form and its error. The HTML helpers escape every value they put in.
import { escapeHtml } from '../public/ansi.js';

const UNITS: Array<[number, string]> = [
  [86_400_000, 'd'],
  [3_600_000, 'h'],
  [60_000, 'min'],
  [1000, 's'],
];

/**
 * A link to a page of a list (the Deployments page, the audit log): the query parameters that are
 * set, in the order given. `limit` is given only when it is not the list's default
 * (`pageSize`), so links stay short.
 */
export function listHref(path: string, params: Record<string, string | undefined>): string {
  const query = new URLSearchParams();
  for (const [key, value] of Object.entries(params)) if (value) query.set(key, value);
  const text = query.toString();
  return text ? `${path}?${text}` : path;
}

/** A page size for a link: nothing when it is the list's default. */
export const pageSize = (limit: number, defaultLimit: number): string | undefined =>
  limit === defaultLimit ? undefined : String(limit);

/** "1.2 s", "3 min 4 s", "2 h 5 min" */
export function duration(ms: number): string {
  if (!Number.isFinite(ms) || ms < 0) return '';
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(ms < 10_000 ? 1 : 0)} s`;
  const parts: string[] = [];
  let rest = ms;
  for (const [size, unit] of UNITS) {
    if (rest >= size && parts.length < 2) {
      parts.push(`${Math.floor(rest / size)} ${unit}`);
      rest %= size;
    } else if (parts.length) break;
  }
  return parts.join(' ');
}

/** How long something took (or has been running, when it has not finished). */
export function took(startedAt: string | null, finishedAt: string | null, now = Date.now()): string {
  if (!startedAt) return '';
  const end = finishedAt ? Date.parse(finishedAt) : now;
  return duration(end - Date.parse(startedAt));
}

/** "just now", "5 min ago", "3 h ago", "2 d ago", then the date. */
export function ago(iso: string | null, now = Date.now()): string {
  if (!iso) return 'never';
  const ms = now - Date.parse(iso);
  if (ms < 45_000) return 'just now';
  if (ms < 3_600_000) return `${Math.round(ms / 60_000)} min ago`;
  if (ms < 86_400_000) return `${Math.round(ms / 3_600_000)} h ago`;
  if (ms < 7 * 86_400_000) return `${Math.round(ms / 86_400_000)} d ago`;
  return iso.slice(0, 10);
}

/** The exact time, readable: "2026-11-22 03:15:29 UTC". */
export function exact(iso: string | null): string {
  return iso ? `${iso.slice(0, 10)} ${iso.slice(11, 19)} UTC` : '';
}

export function shortCommit(sha: string | null | undefined): string {
  return sha ? sha.slice(0, 10) : '';
}

const STATUS_WORDS: Record<string, string> = {
  success: 'success',
  failed: 'failed',
  cancelled: 'cancelled',
  timed_out: 'timed out',
  running: 'running',
  queued: 'queued',
  skipped: 'skipped',
  online: 'online',
  offline: 'offline',
};

export function statusWord(status: string): string {
  return STATUS_WORDS[status] ?? status;
}

/** A status badge's class suffix: only known statuses, so the class stays a fixed set. */
export function statusClass(status: string): string {
  return status in STATUS_WORDS ? status : 'queued';
}

export const FINAL_STATUSES = ['success', 'failed', 'cancelled', 'timed_out'];

export const fmt = { duration, took, ago, exact, shortCommit, statusWord, statusClass };

/** HTML snippets the templates use with `<%~ %>`; every value in them is escaped here. */
export function htmlHelpers(page: {
  csrf: string;
  flash: { kind: string; message: string; form?: string; values?: Record<string, string | string[]> } | null;
}) {
  const e = escapeHtml;
  return {
    badge: (status: string) =>
      `<span class="badge badge-${statusClass(status)}">${e(statusWord(status))}</span>`,
    time: (iso: string | null, none = '—') =>
      iso
        ? `<time datetime="${e(iso)}" title="${e(exact(iso))}">${e(ago(iso))}</time>`
        : `<span class="muted">${e(none)}</span>`,
    commit: (sha: string | null) =>
      sha ? `<code title="${e(sha)}">${e(shortCommit(sha))}</code>` : '<span class="muted">—</span>',
    /** The hidden fields every form carries: the CSRF token and which form it is. */
    csrf: (form?: string) =>
      `<input type="hidden" name="_csrf" value="${e(page.csrf)}">` +
      (form ? `<input type="hidden" name="_form" value="${e(form)}">` : ''),
    /** The error a failed post of `form` left (or, with `any`, one no form claimed), shown beside it. */
    formError: (form: string, any = false) =>
      page.flash && (page.flash.form === form || (any && !page.flash.form))
        ? `<div class="alert alert-${page.flash.kind === 'error' ? 'error' : 'notice'}" role="alert" id="${e(form)}-error">${e(page.flash.message)}</div>`
        : '',
    /** What was typed into `form` before it failed (to fill it in again), else `fallback`. */
    value: (form: string, name: string, fallback: string | string[] = ''): string | string[] => {
      const v = page.flash && page.flash.form === form ? page.flash.values?.[name] : undefined;
      return v ?? fallback;
    },
  };
}
