// The mail sent when a deployment ends: subject, a plain-text part and an HTML part, both from
// Eta templates in views/mail/. Command output and commit messages are untrusted: the HTML
// template only prints them escaped (Eta's autoEscape), and both parts get the output without
// terminal escape sequences or control characters.
import { fileURLToPath } from 'node:url';
import { Eta } from 'eta';

export interface FailingCommand {
  host: string;
  cmd: string;
  status: string;
  exitCode: number | null;
  /** The last lines of its output (secrets were masked on the host before it was stored). */
  tail: string;
  /** Whether there was more output before the tail. */
  truncated: boolean;
}

export interface DeploymentMailData {
  projectName: string;
  deploymentId: string;
  status: string;
  reason: string | null;
  commit: string | null;
  branch: string;
  trigger: string;
  triggeredBy: string;
  startedAt: Date;
  finishedAt: Date | null;
  failing: FailingCommand | null;
  url: string;
}

export interface RenderedMail {
  subject: string;
  text: string;
  html: string;
}

const views = fileURLToPath(new URL('../../views', import.meta.url));
const cache = process.env.NODE_ENV === 'production';
const htmlEta = new Eta({ views, autoEscape: true, cache });
const textEta = new Eta({ views, autoEscape: false, autoTrim: false, cache });

const STATUS_WORDS: Record<string, string> = {
  success: 'succeeded',
  failed: 'failed',
  timed_out: 'timed out',
  cancelled: 'was cancelled',
};

export function renderDeploymentMail(d: DeploymentMailData): RenderedMail {
  const outcome = STATUS_WORDS[d.status] ?? d.status;
  const shortCommit = d.commit ? d.commit.slice(0, 12) : null;
  const where = shortCommit ? `${shortCommit} on ${d.branch}` : d.branch;
  // Header injection is nodemailer's to prevent; still, a subject is one line.
  const subject = `[Deckhand] ${d.projectName}: deployment ${outcome} (${where})`.replace(/[\r\n]+/g, ' ');
  const model = {
    ...d,
    outcome,
    shortCommit,
    duration: formatDuration(d.startedAt, d.finishedAt),
    finishedAtText: (d.finishedAt ?? d.startedAt).toISOString(),
  };
  return {
    subject,
    text: textEta.render('mail/deployment-text', model),
    html: htmlEta.render('mail/deployment-html', model),
  };
}

export function formatDuration(start: Date, end: Date | null): string {
  if (!end) return 'unknown';
  const total = Math.max(0, Math.round((end.getTime() - start.getTime()) / 1000));
  const h = Math.floor(total / 3600);
  const m = Math.floor((total % 3600) / 60);
  const s = total % 60;
  if (h) return `${h} h ${m} min ${s} s`;
  if (m) return `${m} min ${s} s`;
  return `${s} s`;
}

/** Output lines kept in the mail. */
export const TAIL_LINES = 50;

/**
 * The last `TAIL_LINES` lines of command output, readable in a mail: terminal escape sequences
 * and control characters removed, carriage-return progress lines reduced to what was last shown.
 */
export function outputTail(bytes: Buffer, cutAtStart: boolean): { tail: string; truncated: boolean } {
  let text = new TextDecoder('utf-8', { fatal: false }).decode(bytes);
  // A tail read from the middle of the output may start inside a character.
  if (cutAtStart) text = text.replace(/^\uFFFD+/, '');
  text = text
    // eslint-disable-next-line no-control-regex -- removing terminal escapes is the point
    .replace(/\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]/g, '')
    .replace(/\r\n/g, '\n')
    .split('\n')
    .map((line) => line.slice(line.lastIndexOf('\r') + 1))
    .join('\n')
    // eslint-disable-next-line no-control-regex -- as above
    .replace(/[\x00-\x08\x0b-\x1f\x7f]/g, '');
  const lines = text.replace(/\n$/, '').split('\n');
  // the first line of a tail cut from the middle is usually partial: drop it
  if (cutAtStart && lines.length > 1) lines.shift();
  const truncated = cutAtStart || lines.length > TAIL_LINES;
  return { tail: lines.slice(-TAIL_LINES).join('\n'), truncated };
}
