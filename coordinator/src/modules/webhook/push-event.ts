// Pure webhook logic: which forge sent a delivery and what it is, the body's JSON payload, and
// what a push means for a project (deploy, or ignore and why). No I/O: the route verifies the
// signature, de-duplicates on the delivery id and records the deployment.

/** Node's incoming headers: names lower-cased, repeated headers as arrays. */
export type HeaderBag = Record<string, string | string[] | undefined>;

export type Forge = 'github' | 'gitea' | 'forgejo' | 'gogs' | 'gitlab' | 'unknown';

export type DeliveryMeta = { forge: Forge; event: string | null; deliveryId: string | null };

export type WebhookDecision =
  | { kind: 'pong' }
  | { kind: 'ignored-event'; event: string }
  | { kind: 'ignored'; reason: string }
  | { kind: 'deploy'; branch: string; commit: string | null; pusher: string | null; message: string | null };

/** Event headers, first present wins. Gitea and Forgejo also send the GitHub/Gogs ones, same values. */
const EVENT_HEADERS = [
  'x-github-event',
  'x-gitea-event',
  'x-forgejo-event',
  'x-gogs-event',
  'x-forge-event',
  'x-gitlab-event',
] as const;

const DELIVERY_HEADERS = [
  'x-github-delivery',
  'x-gitea-delivery',
  'x-forgejo-delivery',
  'x-gogs-delivery',
  'x-gitlab-event-uuid',
  'x-forge-delivery',
] as const;

/**
 * Which forge sent it, most specific first: Forgejo sends X-Forgejo-*, X-Gitea-*, X-Gogs-* and
 * X-GitHub-* all at once, Gitea all but the first, so "first header present" would call them GitHub.
 */
const FORGE_BY_HEADER: ReadonlyArray<readonly [string, Forge]> = [
  ['x-forgejo-event', 'forgejo'],
  ['x-gitea-event', 'gitea'],
  ['x-gogs-event', 'gogs'],
  ['x-gitlab-event', 'gitlab'],
  ['x-github-event', 'github'],
];

const MAX_EVENT_LENGTH = 100;
const MAX_DELIVERY_ID_LENGTH = 200;
const SHA_PATTERN = /^[0-9a-f]{7,64}$/i;
const ZERO_SHA_PATTERN = /^0+$/;
const BRANCH_PREFIX = 'refs/heads/';
const TAG_PREFIX = 'refs/tags/';

/** A header's value, trimmed; the first non-empty one when repeated; null when absent or blank. */
function headerValue(headers: HeaderBag, name: string): string | null {
  const raw = headers[name];
  const values = Array.isArray(raw) ? raw : [raw];
  for (const value of values) {
    if (typeof value === 'string' && value.trim() !== '') return value.trim();
  }
  return null;
}

/** GitLab names its push event "Push Hook"; everything else keeps the forge's own name. */
function normalizeEvent(event: string): string {
  return event.toLowerCase() === 'push hook' ? 'push' : event;
}

export function readDeliveryMeta(headers: HeaderBag): DeliveryMeta {
  let event: string | null = null;
  for (const name of EVENT_HEADERS) {
    const value = headerValue(headers, name);
    if (value !== null) {
      event = normalizeEvent(value.slice(0, MAX_EVENT_LENGTH));
      break;
    }
  }

  let deliveryId: string | null = null;
  for (const name of DELIVERY_HEADERS) {
    const value = headerValue(headers, name);
    if (value !== null) {
      // An absurdly long id is not one any forge sends; better no de-duplication than a truncated key.
      deliveryId = value.length <= MAX_DELIVERY_ID_LENGTH ? value : null;
      break;
    }
  }

  let forge: Forge = 'unknown';
  for (const [name, candidate] of FORGE_BY_HEADER) {
    if (headerValue(headers, name) !== null) {
      forge = candidate;
      break;
    }
  }

  return { forge, event, deliveryId };
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function parseJsonObject(text: string): Record<string, unknown> | null {
  const trimmed = text.replace(/^\uFEFF/, '').trim();
  if (trimmed === '') return null;
  let parsed: unknown;
  try {
    parsed = JSON.parse(trimmed);
  } catch {
    return null;
  }
  return isRecord(parsed) ? parsed : null;
}

function parseFormPayload(text: string): Record<string, unknown> | null {
  const payload = new URLSearchParams(text).get('payload');
  return payload === null ? null : parseJsonObject(payload);
}

/**
 * The delivery's payload: a JSON object, sent either as the body itself or (GitHub's
 * `application/x-www-form-urlencoded` option) in the form field `payload`. Null means "No body":
 * empty, not JSON, or JSON that is not an object.
 */
export function parseWebhookBody(
  rawBody: Buffer,
  contentType: string | undefined,
): Record<string, unknown> | null {
  if (rawBody.length === 0) return null;
  const text = rawBody.toString('utf8');
  const mediaType = (contentType ?? '').split(';')[0]!.trim().toLowerCase();
  // Forms carry the JSON in `payload=`; whatever the content type says, a body that is JSON
  // (a client that mislabels it, like `curl -d`) is read as JSON.
  if (mediaType === 'application/x-www-form-urlencoded' && text.startsWith('payload='))
    return parseFormPayload(text);
  const json = parseJsonObject(text);
  if (json !== null) return json;
  return text.startsWith('payload=') ? parseFormPayload(text) : null;
}

function nonEmptyString(value: unknown): string | null {
  return typeof value === 'string' && value.trim() !== '' ? value : null;
}

function field(value: unknown, key: string): unknown {
  return isRecord(value) ? value[key] : undefined;
}

function sha(value: unknown): string | null {
  return typeof value === 'string' && SHA_PATTERN.test(value) ? value.toLowerCase() : null;
}

function looksLikePush(payload: Record<string, unknown>): boolean {
  return ['ref', 'after', 'commits'].some((key) => Object.hasOwn(payload, key));
}

function pusherOf(payload: Record<string, unknown>): string | null {
  return (
    nonEmptyString(field(payload.pusher, 'name')) ??
    nonEmptyString(field(payload.pusher, 'login')) ??
    nonEmptyString(field(payload.sender, 'login')) ??
    nonEmptyString(payload.user_username) ??
    nonEmptyString(payload.user_name)
  );
}

/** The head commit's message: `head_commit.message`, else the pushed commit's entry in `commits`, else the last. */
function messageOf(payload: Record<string, unknown>, commit: string | null): string | null {
  const headMessage = nonEmptyString(field(payload.head_commit, 'message'));
  if (headMessage !== null) return headMessage;
  const commits = Array.isArray(payload.commits) ? payload.commits : [];
  const pushed = commit === null ? undefined : commits.find((entry) => sha(field(entry, 'id')) === commit);
  return nonEmptyString(field(pushed ?? commits.at(-1), 'message'));
}

/**
 * What a delivery means for a project deploying `projectBranch`. `event` is the one from
 * `readDeliveryMeta` (null: no event header, so the payload's shape decides).
 */
/** Where a project deploys from: its branch, and optional globs (`release/*`; `**` crosses `/`). */
export interface DeployedBranches {
  branch: string;
  patterns?: readonly string[];
}

/** A branch glob as a regular expression: `*` any run without `/`, `**` anything, `?` one character. */
export function globToRegExp(glob: string): RegExp {
  let out = '';
  for (let i = 0; i < glob.length; i++) {
    const c = glob[i]!;
    if (c === '*' && glob[i + 1] === '*') {
      out += '.*';
      i++;
    } else if (c === '*') out += '[^/]*';
    else if (c === '?') out += '[^/]';
    else out += c.replace(/[.+^${}()|[\]\\]/g, '\\$&');
  }
  return new RegExp(`^${out}$`);
}

export function branchIsDeployed(branch: string, deployed: DeployedBranches): boolean {
  const exact = deployed.branch.startsWith(BRANCH_PREFIX)
    ? deployed.branch.slice(BRANCH_PREFIX.length)
    : deployed.branch;
  return branch === exact || (deployed.patterns ?? []).some((p) => globToRegExp(p).test(branch));
}

const SKIP_DEPLOY = /\[skip deploy\]/i;

export function decidePush(
  event: string | null,
  payload: Record<string, unknown>,
  projectBranch: string | DeployedBranches,
): WebhookDecision {
  const branches: DeployedBranches =
    typeof projectBranch === 'string' ? { branch: projectBranch } : projectBranch;
  const name = event === null ? (looksLikePush(payload) ? 'push' : 'unknown') : normalizeEvent(event);
  const lowered = name.toLowerCase();
  if (lowered === 'ping') return { kind: 'pong' };
  if (lowered !== 'push') return { kind: 'ignored-event', event: name };

  const deployed = branches.branch.startsWith(BRANCH_PREFIX)
    ? branches.branch.slice(BRANCH_PREFIX.length)
    : branches.branch;
  const pusher = pusherOf(payload);

  const ref = payload.ref;
  if (ref === undefined || ref === null) {
    // No ref: some forge or script pinging "deploy". The branch head is resolved later.
    return { kind: 'deploy', branch: deployed, commit: null, pusher, message: null };
  }
  if (typeof ref !== 'string') return { kind: 'ignored', reason: 'ref is not a string' };
  if (ref.startsWith(TAG_PREFIX)) return { kind: 'ignored', reason: `tag push ${ref}` };
  if (!ref.startsWith(BRANCH_PREFIX) || ref.length === BRANCH_PREFIX.length) {
    return { kind: 'ignored', reason: `ref ${ref} is not a branch` };
  }
  const branch = ref.slice(BRANCH_PREFIX.length);

  const after = payload.after;
  if (payload.deleted === true || (typeof after === 'string' && ZERO_SHA_PATTERN.test(after))) {
    return { kind: 'ignored', reason: `branch ${branch} was deleted` };
  }
  if (!branchIsDeployed(branch, branches))
    return { kind: 'ignored', reason: `branch ${branch} is not deployed` };

  const commit = sha(after) ?? sha(payload.checkout_sha);
  const message = messageOf(payload, commit);
  if (message && SKIP_DEPLOY.test(message)) {
    return { kind: 'ignored', reason: 'the commit message says [skip deploy]' };
  }
  return { kind: 'deploy', branch, commit, pusher, message };
}

/** The HTTP answer for a decision: status and plain-text body. */
export function webhookReply(decision: WebhookDecision): { status: number; body: string } {
  switch (decision.kind) {
    case 'pong':
      return { status: 200, body: 'pong' };
    case 'ignored-event':
      return { status: 202, body: `Ignored: event ${decision.event}` };
    case 'ignored':
      return { status: 200, body: `Ignored: ${decision.reason}` };
    case 'deploy':
      return { status: 200, body: 'Deployment triggered' };
  }
}
