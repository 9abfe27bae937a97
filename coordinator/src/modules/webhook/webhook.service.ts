// The push webhook, decided in API.md's order: unknown project → 401; signature over the raw
// bytes (before anything parses them) → 401; no JSON body → 400; ping / other events / tags /
// deleted or other branches → answered and ignored; a delivery id already handled → "Already
// handled"; otherwise a deployment of the pushed commit. Every delivery to a known project is
// recorded with what was decided and why.
import { randomUUID } from 'node:crypto';
import type { EntityManager, MikroORM } from '@mikro-orm/postgresql';
import type { Actor } from '../common/actor.ts';
import type { DeploymentService, Triggered } from '../deployment/deployment.service.ts';
import type { IProject } from '../project/project.entity.ts';
import type { ProjectService } from '../project/project.service.ts';
import {
  decidePush,
  type HeaderBag,
  parseWebhookBody,
  readDeliveryMeta,
  webhookReply,
} from './push-event.ts';
import { verifyHubSignature256 } from './signature.ts';
import { WebhookDelivery } from './webhook-delivery.entity.ts';

export interface WebhookResult {
  status: number;
  body: string;
  deploymentId?: string;
}

// Headers that carry credentials never reach the delivery record.
const SECRET_HEADERS =
  /^(authorization|cookie|x-hub-signature(-256)?|x-gitea-signature|x-gogs-signature|x-gitlab-token)$/i;

function recordableHeaders(headers: HeaderBag): Record<string, string> {
  const kept: Record<string, string> = {};
  for (const [name, value] of Object.entries(headers)) {
    if (value === undefined || SECRET_HEADERS.test(name)) continue;
    kept[name] = (Array.isArray(value) ? value.join(', ') : value).slice(0, 512);
  }
  return kept;
}

export class WebhookService {
  readonly #orm: MikroORM;
  readonly #projects: ProjectService;
  readonly #deployments: DeploymentService;

  constructor(orm: MikroORM, projects: ProjectService, deployments: DeploymentService) {
    this.#orm = orm;
    this.#projects = projects;
    this.#deployments = deployments;
  }

  async receive(projectId: string, headers: HeaderBag, rawBody: Buffer): Promise<WebhookResult> {
    const project = await this.#projects.find(projectId);
    if (!project) return { status: 401, body: 'Unauthorized' };
    const meta = readDeliveryMeta(headers);
    const base = {
      project: project.id,
      forge: meta.forge,
      event: meta.event?.slice(0, 64) ?? null,
      deliveryId: meta.deliveryId?.slice(0, 128) ?? null,
      headers: recordableHeaders(headers),
    };
    const record = (
      em: EntityManager,
      r: WebhookResult,
      fields: { signatureValid: boolean; decision: string },
    ) => {
      em.create(WebhookDelivery, {
        ...base,
        ...fields,
        statusCode: r.status,
        reason: r.body,
        deploymentId: r.deploymentId ?? null,
      });
      return r;
    };

    const signature = headers['x-hub-signature-256'];
    if (
      !verifyHubSignature256(
        this.#projects.webhookSecret(project),
        rawBody,
        typeof signature === 'string' ? signature : undefined,
      )
    ) {
      return this.#orm.em
        .fork()
        .transactional(async (em) =>
          record(em, { status: 401, body: 'Unauthorized' }, { signatureValid: false, decision: 'rejected' }),
        );
    }
    const contentType = headers['content-type'];
    const payload = parseWebhookBody(rawBody, typeof contentType === 'string' ? contentType : undefined);
    if (!payload) {
      return this.#orm.em
        .fork()
        .transactional(async (em) =>
          record(em, { status: 400, body: 'No body' }, { signatureValid: true, decision: 'invalid' }),
        );
    }
    const decision = decidePush(meta.event, payload, project.branchName);
    if (decision.kind !== 'deploy') {
      const reply = webhookReply(decision);
      return this.#orm.em
        .fork()
        .transactional(async (em) => record(em, reply, { signatureValid: true, decision: 'ignored' }));
    }
    return this.#deploy(project, base, decision, meta.forge);
  }

  async #deploy(
    project: IProject,
    base: {
      project: string;
      forge: string;
      event: string | null;
      deliveryId: string | null;
      headers: Record<string, string>;
    },
    decision: { branch: string; commit: string | null; pusher: string | null; message: string | null },
    forge: string,
  ): Promise<WebhookResult> {
    const deploymentId = randomUUID();
    const triggered = webhookReply({ kind: 'deploy', ...decision });
    const result: WebhookResult & { stored?: Triggered } = await this.#orm.em
      .fork()
      .transactional(async (em) => {
        // Claim the delivery id first: the partial unique index makes a concurrent or repeated
        // delivery of the same id lose here, inside the transaction, so it never deploys twice.
        const claimed = await em.execute<Array<{ id: string }>>(
          `insert into webhook_deliveries
           (id, created_at, project_id, forge, event, delivery_id, signature_valid, status_code, decision, reason, deployment_id, headers)
         values (?, now(), ?, ?, ?, ?, true, ?, 'deployed', ?, ?, ?)
         on conflict (project_id, delivery_id) where decision = 'deployed' and delivery_id is not null do nothing
         returning id`,
          [
            randomUUID(),
            project.id,
            base.forge,
            base.event,
            base.deliveryId,
            triggered.status,
            triggered.body,
            deploymentId,
            JSON.stringify(base.headers),
          ],
        );
        if (claimed.length === 0) {
          em.create(WebhookDelivery, {
            ...base,
            signatureValid: true,
            statusCode: 200,
            decision: 'duplicate',
            reason: 'Already handled',
            deploymentId: null,
          });
          return { status: 200, body: 'Already handled' };
        }
        const who = decision.pusher ? ` by ${decision.pusher}` : '';
        const actor: Actor = {
          type: 'webhook',
          id: base.deliveryId,
          name: `${forge} push${who}`,
          role: null,
          userId: null,
        };
        const stored = await this.#deployments.triggerIn(em, {
          id: deploymentId,
          project,
          trigger: 'webhook',
          actor,
          commit: decision.commit,
          branch: decision.branch,
        });
        return { ...triggered, deploymentId, stored };
      });
    if (result.stored) this.#deployments.queued(result.stored);
    return { status: result.status, body: result.body, deploymentId: result.deploymentId };
  }
}
