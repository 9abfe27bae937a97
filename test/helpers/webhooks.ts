// Deliveries to POST /webhook/:projectId for the webhook suites: GitHub-style signed requests sent
// without a session, and what the coordinator stored for them.
import { createHmac, randomUUID } from 'node:crypto';
import { sign } from '@octokit/webhooks-methods';
import { expect } from 'vitest';
import { Client, type CoordinatorWithAdmin, createProject, type HttpResponse } from './coordinator.ts';
import { branchPush, type Payload } from './github-examples.ts';
import { sql } from './sql.ts';

export interface WebhookProject {
  id: string;
  secret: string;
}

/** @octokit/webhooks-methods refuses to sign an empty payload; GitHub's scheme, by hand, for that one. */
export const signEmpty = (secret: string) =>
  `sha256=${createHmac('sha256', secret).update('').digest('hex')}`;
export const signAny = (secret: string, body: string) =>
  body === '' ? signEmpty(secret) : sign(secret, body);

/** The real push example, as a push to `branch`. */
export const pushTo = (branch: string): Payload => ({ ...branchPush, ref: `refs/heads/${branch}` });

/** The signature with its last hex digit changed. */
export function flip(signature: string): string {
  const last = signature.at(-1)!;
  return signature.slice(0, -1) + (last === '0' ? '1' : '0');
}

/** A plain-text answer: `status`, exactly `body`, text/plain. */
export function expectPlain(res: HttpResponse, status: number, body: string) {
  expect({ status: res.status, text: res.text }).toEqual({ status, text: body });
  expect(res.headers.get('content-type')).toMatch(/^text\/plain/);
}

/** Webhook deliveries to the coordinator of `api`, bound to it (use them inside tests and hooks). */
export function webhookTools(api: CoordinatorWithAdmin) {
  /** POSTs raw bytes to the project's webhook, without any session. */
  const deliver = (projectId: string, body: string | Buffer, headers: Record<string, string>) =>
    new Client(api.coord.url).request('POST', `/webhook/${projectId}`, { body, headers, cookie: null });

  return {
    deliver,

    /** Creates a project as the admin: its id and webhook secret. */
    async createProject(overrides: Record<string, unknown> = {}): Promise<WebhookProject> {
      const res = await createProject(api.admin, overrides);
      return { id: res.json.project.id as string, secret: res.json.webhook.secret as string };
    },

    /** A GitHub-style delivery of `payload`, serialised once and signed over exactly those bytes. */
    async githubDelivery(
      project: WebhookProject,
      payload: unknown,
      opts: { event?: string; delivery?: string; headers?: Record<string, string> } = {},
    ) {
      const body = JSON.stringify(payload);
      return deliver(project.id, body, {
        'content-type': 'application/json',
        'x-github-event': opts.event ?? 'push',
        'x-github-delivery': opts.delivery ?? randomUUID(),
        'x-hub-signature-256': await sign(project.secret, body),
        ...opts.headers,
      });
    },

    /** The project's deployments, oldest first. */
    deploymentsOf(projectId: string) {
      return sql(
        api.coord,
        'select id, status, commit, branch, trigger, triggered_by from deployments where project_id = ? order by started_at',
        [projectId],
      );
    },

    /** Rows of ad-hoc SQL on the coordinator's database. */
    sql: (query: string, params: unknown[] = []) => sql(api.coord, query, params),
  };
}
