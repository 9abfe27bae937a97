// POST /webhook/:projectId (the spec, API.md "Webhook") for pushes: GitHub's real example payloads
// signed with @octokit/webhooks-methods and a Gitea push deploy the project's branch; other events
// and other refs are acknowledged without a deployment; a repeated delivery deploys once.
import { randomUUID } from 'node:crypto';
import { sign } from '@octokit/webhooks-methods';
import { beforeAll, describe, expect, it } from 'vitest';
import { coordinatorWithAdmin } from '../helpers/coordinator.ts';
import { branchPush, issues, ping, PUSHED, tagPush, webhookFixture } from '../helpers/github-examples.ts';
import { expectPlain, pushTo, webhookTools } from '../helpers/webhooks.ts';

const api = coordinatorWithAdmin();
const { createProject, deliver, githubDelivery, deploymentsOf, sql } = webhookTools(api);
const giteaPush = webhookFixture('gitea-push.json');

describe('Webhook: a correctly signed push to the project branch', () => {
  it('is 200 Deployment triggered and creates a webhook deployment of the pushed commit', async () => {
    const project = await createProject({ branch_name: 'main' });
    const res = await githubDelivery(project, pushTo('main'));
    expectPlain(res, 200, 'Deployment triggered');
    const rows = await deploymentsOf(project.id);
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({ status: 'queued', commit: PUSHED, branch: 'main', trigger: 'webhook' });
  });

  it('shows up in GET /deploy/:id with trigger webhook and the commit', async () => {
    const project = await createProject({ branch_name: 'main' });
    expectPlain(await githubDelivery(project, pushTo('main')), 200, 'Deployment triggered');
    const [row] = await deploymentsOf(project.id);
    const res = await api.admin.get(`/deploy/${row.id}`);
    expect(res.status).toBe(200);
    expect(res.json.deployment).toMatchObject({
      proj_id: project.id,
      trigger: 'webhook',
      commit: PUSHED,
      branch: 'main',
      status: 'queued',
      finished_at: null,
    });
  });

  it('uses the webhook_secret given at creation', async () => {
    const secret = 'a-webhook-secret-of-my-choosing';
    const project = await createProject({ webhook_secret: secret });
    expectPlain(
      await githubDelivery({ id: project.id, secret }, pushTo('main')),
      200,
      'Deployment triggered',
    );
  });

  it("works with the spec's own headers: X-Forge-Event: push and X-Hub-Signature-256", async () => {
    const project = await createProject();
    const body = JSON.stringify(pushTo('main'));
    const res = await deliver(project.id, body, {
      'content-type': 'application/json',
      'x-forge-event': 'push',
      'x-hub-signature-256': await sign(project.secret, body),
    });
    expectPlain(res, 200, 'Deployment triggered');
    expect(await deploymentsOf(project.id)).toHaveLength(1);
  });

  it('accepts an upper-case hex signature', async () => {
    const project = await createProject();
    const body = JSON.stringify(pushTo('main'));
    const signature = await sign(project.secret, body);
    const res = await deliver(project.id, body, {
      'content-type': 'application/json',
      'x-github-event': 'push',
      'x-hub-signature-256': `sha256=${signature.slice('sha256='.length).toUpperCase()}`,
    });
    expectPlain(res, 200, 'Deployment triggered');
  });
});

describe('Webhook: a Gitea push', () => {
  it('deploys with X-Gitea-Event / X-Gitea-Delivery and X-Hub-Signature-256', async () => {
    const project = await createProject({ branch_name: 'develop' });
    const body = JSON.stringify(giteaPush);
    const res = await deliver(project.id, body, {
      'content-type': 'application/json',
      'x-gitea-event': 'push',
      'x-gitea-delivery': randomUUID(),
      'x-hub-signature-256': await sign(project.secret, body),
    });
    expectPlain(res, 200, 'Deployment triggered');
    const rows = await deploymentsOf(project.id);
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({
      commit: 'bffeb74224043ba2feb48d137756c8a9331c449a',
      branch: 'develop',
      trigger: 'webhook',
    });
  });

  it('de-duplicates on X-Gitea-Delivery', async () => {
    const project = await createProject({ branch_name: 'develop' });
    const body = JSON.stringify(giteaPush);
    const headers = {
      'content-type': 'application/json',
      'x-gitea-event': 'push',
      'x-gitea-delivery': randomUUID(),
      'x-hub-signature-256': await sign(project.secret, body),
    };
    expectPlain(await deliver(project.id, body, headers), 200, 'Deployment triggered');
    expectPlain(await deliver(project.id, body, headers), 200, 'Already handled');
    expect(await deploymentsOf(project.id)).toHaveLength(1);
  });
});

describe('Webhook: events other than a push to the branch', () => {
  let project: { id: string; secret: string };
  beforeAll(async () => {
    project = await createProject({ branch_name: 'main' });
  });

  it('answers a ping with 200 pong', async () => {
    expectPlain(await githubDelivery(project, ping, { event: 'ping' }), 200, 'pong');
  });

  it('answers an issues event with 202 Ignored: event issues', async () => {
    expectPlain(await githubDelivery(project, issues, { event: 'issues' }), 202, 'Ignored: event issues');
  });

  it('ignores a tag push with 200 Ignored: …', async () => {
    const res = await githubDelivery(project, tagPush);
    expect(res.status).toBe(200);
    expect(res.text.startsWith('Ignored:')).toBe(true);
    expect(res.text).toContain('simple-tag');
  });

  it('ignores a deleted branch with 200 Ignored: …', async () => {
    const deletion = {
      ...pushTo('main'),
      before: PUSHED,
      after: '0000000000000000000000000000000000000000',
      created: false,
      deleted: true,
      commits: [],
      head_commit: null,
    };
    const res = await githubDelivery(project, deletion);
    expect(res.status).toBe(200);
    expect(res.text.startsWith('Ignored:')).toBe(true);
  });

  it('ignores a push to another branch with 200 Ignored: branch <name> is not deployed', async () => {
    expectPlain(
      await githubDelivery(project, pushTo('feature/login')),
      200,
      'Ignored: branch feature/login is not deployed',
    );
    expectPlain(await githubDelivery(project, branchPush), 200, 'Ignored: branch master is not deployed');
  });

  it('has deployed nothing for any of them', async () => {
    expect(await deploymentsOf(project.id)).toHaveLength(0);
  });
});

describe('Webhook: the same X-GitHub-Delivery twice', () => {
  it('answers the second one 200 Already handled, and only one deployment exists', async () => {
    const project = await createProject();
    const delivery = randomUUID();
    expectPlain(await githubDelivery(project, pushTo('main'), { delivery }), 200, 'Deployment triggered');
    expectPlain(await githubDelivery(project, pushTo('main'), { delivery }), 200, 'Already handled');
    expect(await deploymentsOf(project.id)).toHaveLength(1);
  });

  it('deploys exactly once when the same delivery arrives 5 times at once', async () => {
    const project = await createProject();
    const delivery = randomUUID();
    const results = await Promise.all(
      Array.from({ length: 5 }, () => githubDelivery(project, pushTo('main'), { delivery })),
    );
    expect(results.map((r) => r.status)).toEqual([200, 200, 200, 200, 200]);
    const texts = results.map((r) => r.text).sort();
    expect(texts).toEqual([
      'Already handled',
      'Already handled',
      'Already handled',
      'Already handled',
      'Deployment triggered',
    ]);
    expect(await deploymentsOf(project.id)).toHaveLength(1);
  });

  it('deploys twice for two different delivery ids', async () => {
    const project = await createProject();
    expectPlain(await githubDelivery(project, pushTo('main')), 200, 'Deployment triggered');
    expectPlain(await githubDelivery(project, pushTo('main')), 200, 'Deployment triggered');
    expect(await deploymentsOf(project.id)).toHaveLength(2);
  });

  it('does not count a delivery that was refused (bad signature) as handled', async () => {
    const project = await createProject();
    const delivery = randomUUID();
    const body = JSON.stringify(pushTo('main'));
    const refused = await deliver(project.id, body, {
      'content-type': 'application/json',
      'x-github-event': 'push',
      'x-github-delivery': delivery,
      'x-hub-signature-256': await sign('not-the-secret-at-all', body),
    });
    expectPlain(refused, 401, 'Unauthorized');
    expectPlain(await githubDelivery(project, pushTo('main'), { delivery }), 200, 'Deployment triggered');
  });
});

describe('Webhook: deliveries are recorded', () => {
  it('in webhook_deliveries, with what was decided, and never the signature header', async () => {
    const project = await createProject();
    const delivery = randomUUID();
    const body = JSON.stringify(pushTo('main'));
    const signature = await sign(project.secret, body);
    expectPlain(await githubDelivery(project, pushTo('main'), { delivery }), 200, 'Deployment triggered');
    expectPlain(await githubDelivery(project, pushTo('main'), { delivery }), 200, 'Already handled');
    const refused = await deliver(project.id, body, {
      'content-type': 'application/json',
      'x-github-event': 'push',
      'x-hub-signature-256': await sign('not-the-secret-at-all', body),
    });
    expectPlain(refused, 401, 'Unauthorized');
    const rows = await sql(
      `select delivery_id, forge, event, signature_valid, status_code, decision, reason, deployment_id, headers
         from webhook_deliveries where project_id = ? order by created_at`,
      [project.id],
    );
    expect(rows).toHaveLength(3);
    const [deployed] = await deploymentsOf(project.id);
    expect(rows[0]).toMatchObject({
      delivery_id: delivery,
      forge: 'github',
      event: 'push',
      signature_valid: true,
      status_code: 200,
      decision: 'deployed',
      reason: 'Deployment triggered',
      deployment_id: deployed.id,
    });
    expect(rows[1]).toMatchObject({ delivery_id: delivery, status_code: 200, reason: 'Already handled' });
    expect(rows[2]).toMatchObject({ signature_valid: false, status_code: 401, reason: 'Unauthorized' });
    for (const row of rows) {
      const headers = row.headers as Record<string, string>;
      expect(headers['x-github-event']).toBe('push');
      expect(Object.keys(headers).map((h) => h.toLowerCase())).not.toContain('x-hub-signature-256');
      expect(JSON.stringify(headers)).not.toContain(signature.slice('sha256='.length));
    }
    const all = await sql('select headers::text as h from webhook_deliveries');
    for (const { h } of all) expect(h.toLowerCase()).not.toContain('x-hub-signature');
  });

  it('records the deployment trigger in the audit log', async () => {
    const project = await createProject();
    expectPlain(await githubDelivery(project, pushTo('main')), 200, 'Deployment triggered');
    const [deployed] = await deploymentsOf(project.id);
    const rows = await sql(
      `select actor_type from audit_events where action = 'deployment.trigger' and target_id = ?`,
      [deployed.id],
    );
    expect(rows).toEqual([{ actor_type: 'webhook' }]);
  });
});
