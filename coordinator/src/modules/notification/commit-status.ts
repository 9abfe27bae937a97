// Commit statuses on GitHub, Gitea/Forgejo and GitLab: which repository a project's forge_url
// names, where its forge's API is, and the one request that reports a deployment's state on its
// commit. Pure: the worker sends what `commitStatusRequest` builds.
//
// The requests follow each forge's API reference:
// - GitHub: POST {api}/repos/{owner}/{repo}/statuses/{sha} {state, target_url, description,
//   context}, states error | failure | pending | success; `Authorization: Bearer`.
// - Gitea/Forgejo: POST {host}/api/v1/repos/{owner}/{repo}/statuses/{sha}, the same body
//   (CreateStatusOption), states pending | success | error | failure | warning;
//   `Authorization: token`.
// - GitLab: POST {host}/api/v4/projects/{url-encoded path}/statuses/{sha} {state, name, ref,
//   target_url, description}, states pending | running | success | failed | canceled;
//   `PRIVATE-TOKEN`.
import type { DeploymentStatus } from '../deployment/deployment.entity.ts';
import type { CommitStatusProvider } from '../project/project.entity.ts';

/** A repository on a forge: the forge's web origin and the repository's path (`owner/repo`, GitLab groups included). */
export interface ForgeRepository {
  origin: string;
  host: string;
  path: string;
}

/**
 * The repository a git remote names: `https://host/owner/repo.git`, `ssh://git@host:2222/owner/repo.git`,
 * `git://host/owner/repo` or scp-like `git@host:owner/repo.git`. Null for local paths and
 * anything without a host and at least `owner/repo`. Remotes other than http(s) are assumed to
 * have their web interface on https.
 */
export function parseForgeUrl(forgeUrl: string): ForgeRepository | null {
  let origin: string;
  let host: string;
  let path: string;
  const scp = /^(?:[^@/\s]+@)?([^:/\s]+):(?!\/\/)(.+)$/.exec(forgeUrl);
  if (/^[a-z][a-z0-9+.-]*:\/\//i.test(forgeUrl)) {
    let url: URL;
    try {
      url = new URL(forgeUrl);
    } catch {
      return null;
    }
    if (!url.hostname) return null;
    host = url.hostname;
    if (url.protocol === 'http:' || url.protocol === 'https:') origin = url.origin;
    else if (url.protocol === 'ssh:' || url.protocol === 'git:' || url.protocol === 'git+ssh:')
      origin = `https://${url.hostname}`;
    else return null;
    path = decodeURIComponent(url.pathname);
  } else if (scp) {
    host = scp[1]!;
    origin = `https://${host}`;
    path = scp[2]!;
  } else {
    return null;
  }
  path = path
    .replace(/^\/+/, '')
    .replace(/\/+$/, '')
    .replace(/\.git$/, '');
  const segments = path.split('/');
  if (segments.length < 2 || segments.some((s) => s === '' || s === '.' || s === '..')) return null;
  return { origin, host, path };
}

/** The forge API root a provider uses for a repository, unless the project names one. */
export function defaultApiUrl(provider: CommitStatusProvider, repo: ForgeRepository): string {
  switch (provider) {
    case 'github':
      return repo.host === 'github.com' ? 'https://api.github.com' : `${repo.origin}/api/v3`;
    case 'gitea':
      return `${repo.origin}/api/v1`;
    case 'gitlab':
      return `${repo.origin}/api/v4`;
  }
}

/** A deployment's state as the provider spells it. */
export function forgeState(provider: CommitStatusProvider, status: DeploymentStatus): string {
  if (provider === 'gitlab') {
    const gitlab: Record<DeploymentStatus, string> = {
      queued: 'pending',
      running: 'running',
      success: 'success',
      failed: 'failed',
      timed_out: 'failed',
      cancelled: 'canceled',
    };
    return gitlab[status];
  }
  const github: Record<DeploymentStatus, string> = {
    queued: 'pending',
    running: 'pending',
    success: 'success',
    failed: 'failure',
    timed_out: 'failure',
    cancelled: 'error',
  };
  return github[status];
}

const DEFAULT_DESCRIPTIONS: Record<DeploymentStatus, string> = {
  queued: 'Waiting to deploy',
  running: 'Deploying',
  success: 'Deployed',
  failed: 'The deployment failed',
  timed_out: 'The deployment timed out',
  cancelled: 'The deployment was cancelled',
};

export interface CommitStatusReport {
  provider: CommitStatusProvider;
  /** The project's api_url, or null to derive it from the repository. */
  apiUrl: string | null;
  repo: ForgeRepository;
  token: string;
  sha: string;
  branch: string;
  status: DeploymentStatus;
  reason: string | null;
  projectName: string;
  targetUrl: string;
}

export interface HttpRequest {
  url: string;
  headers: Record<string, string>;
  body: string;
}

/** GitHub refuses descriptions past 140 characters; the others are at least as generous. */
const MAX_DESCRIPTION = 140;

export function commitStatusRequest(r: CommitStatusReport): HttpRequest {
  const api = (r.apiUrl ?? defaultApiUrl(r.provider, r.repo)).replace(/\/+$/, '');
  const state = forgeState(r.provider, r.status);
  const oneLine = (r.reason ?? DEFAULT_DESCRIPTIONS[r.status]).replace(/\s+/g, ' ').trim();
  const description =
    oneLine.length > MAX_DESCRIPTION ? `${oneLine.slice(0, MAX_DESCRIPTION - 1)}…` : oneLine;
  const context = `deckhand/${r.projectName}`;
  const sha = encodeURIComponent(r.sha);
  const json = { 'content-type': 'application/json', 'user-agent': 'Deckhand', accept: 'application/json' };
  if (r.provider === 'gitlab') {
    return {
      url: `${api}/projects/${encodeURIComponent(r.repo.path)}/statuses/${sha}`,
      headers: { ...json, 'private-token': r.token },
      body: JSON.stringify({ state, name: context, ref: r.branch, target_url: r.targetUrl, description }),
    };
  }
  const [owner, name] = ownerAndName(r.repo.path);
  const body = JSON.stringify({ state, target_url: r.targetUrl, description, context });
  if (r.provider === 'github') {
    return {
      url: `${api}/repos/${owner}/${name}/statuses/${sha}`,
      headers: {
        ...json,
        accept: 'application/vnd.github+json',
        'x-github-api-version': '2022-11-28',
        authorization: `Bearer ${r.token}`,
      },
      body,
    };
  }
  return {
    url: `${api}/repos/${owner}/${name}/statuses/${sha}`,
    headers: { ...json, authorization: `token ${r.token}` },
    body,
  };
}

/** GitHub and Gitea repositories are exactly `owner/name`; a longer path keeps its first and last parts. */
function ownerAndName(path: string): [string, string] {
  const segments = path.split('/');
  return [encodeURIComponent(segments[0]!), encodeURIComponent(segments.at(-1)!)];
}
