// The commit-status channel: the deployment's state as a status on its commit at the forge
// (GitHub, Gitea/Forgejo, GitLab; the requests are built in commit-status.ts).
import type { CommitStatusSettings } from '../project/project.entity.ts';
import { commitStatusRequest, parseForgeUrl } from './commit-status.ts';
import type { ChannelSender } from './delivery.ts';
import { postJson } from './outgoing-http.ts';

export const sendCommitStatus: ChannelSender = async (ctx, delivery) => {
  const [d] = await ctx.orm.em.fork().execute<
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
    [delivery.deployment_id],
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
    token: ctx.box.decrypt(d.token),
    sha: d.commit,
    branch: d.branch,
    status: delivery.deployment_status,
    // the reason describes the deployment's current state; an earlier state gets its default text
    reason: d.status === delivery.deployment_status ? d.reason : null,
    projectName: d.name,
    targetUrl: ctx.deploymentUrl(delivery.deployment_id),
  });
  const result = await postJson(request.url, request.headers, request.body, ctx.httpTimeoutMs);
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
};
