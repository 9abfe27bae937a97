// The push webhook, decided in API.md's order: unknown project → 401; the delivery's credential
// (X-Hub-Signature-256, X-Gitea-Signature, X-Gogs-Signature or GitLab's X-Gitlab-Token), checked
// over the raw bytes before anything parses them → 401; no JSON body → 400; ping / other events /
// tags / deleted or undeployed branches / `[skip deploy]` → answered and ignored; a delivery id
// already handled → "Already handled"; otherwise a deployment of the pushed commit. Every delivery
// to a known project is recorded with what was decided and why (verified bodies kept, for
// Deckhand's own "redeliver").
import { randomUUID } from 'node:crypto';
import type { EntityManager, MikroORM } from '@mikro-orm/postgresql';
import { recordAudit } from '../audit/audit.service.ts';
import type { Actor } from '../common/actor.ts';
import { ConflictError, NotFoundError } from '../common/errors.ts';
import type { DeploymentService, Triggered } from '../deployment/deployment.service.ts';
import type { IProject } from '../project/project.entity.ts';
import { type ProjectService } from '../project/project.service.ts';
import {
  decidePush,
  type HeaderBag,
  parseWebhookBody,
  readDeliveryMeta,
  webhookReply,
} from './push-event.ts';
import { verifyDelivery } from './signature.ts';
import { WebhookDelivery } from './webhook-delivery.entity.ts';
import { isUuid } from '../common/schemas.ts';

/** Verified bodies up to this size are kept with their delivery, for redelivery. */
const MAX_KEPT_PAYLOAD = 1024 * 1024;

export interface DeliveryJson {
  id: string;
  received_at: string;
  forge: string;
  event: string | null;
  delivery_id: string | null;
  signature_valid: boolean;
  status_code: number;
  decision: string;
  reason: string;
  deployment_id: string | null;
  redelivery_of: string | null;
  headers: Record<string, string>;
}

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
    const verified = verifyDelivery(this.#projects.webhookSecret(project), rawBody, headers);
    return this.#decide(project, headers, rawBody, verified.ok, null);
  }

  /**
   * Deckhand's own "redeliver": the recorded (verified) delivery decided again, as a new
   * delivery. It is not a forge's redelivery, so the delivery-id de-duplication does not apply.
   */
  async redeliver(projectId: string, deliveryId: string, actor: Actor): Promise<WebhookResult> {
    const project = await this.#projects.find(projectId);
    const em = this.#orm.em.fork();
    const original =
      project && isUuid(deliveryId)
        ? await em.findOne(
            WebhookDelivery,
            { id: deliveryId, project: project.id },
            { populate: ['payload'] },
          )
        : null;
    if (!project || !original) throw new NotFoundError('Delivery not found');
    if (!original.signatureValid || !original.payload) {
      throw new ConflictError('Only a verified delivery whose payload was kept can be redelivered');
    }
    const headers: HeaderBag = { ...original.headers };
    const result = await this.#decide(project, headers, Buffer.from(original.payload), true, original.id);
    await em.transactional(async (tx) => {
      recordAudit(
        tx,
        actor,
        'webhook.redeliver',
        { type: 'webhook_delivery', id: original.id },
        { status: result.status },
        project.id,
      );
    });
    return result;
  }

  async listDeliveries(projectId: string, limit: number): Promise<DeliveryJson[]> {
    const project = await this.#projects.find(projectId);
    if (!project) throw new NotFoundError('Project not found');
    const rows = await this.#orm.em
      .fork()
      .find(WebhookDelivery, { project: project.id }, { orderBy: { createdAt: 'desc' }, limit });
    return rows.map((d) => ({
      id: d.id,
      received_at: d.createdAt.toISOString(),
      forge: d.forge,
      event: d.event ?? null,
      delivery_id: d.deliveryId ?? null,
      signature_valid: d.signatureValid,
      status_code: d.statusCode,
      decision: d.decision,
      reason: d.reason,
      deployment_id: d.deploymentId ?? null,
      redelivery_of: d.redeliveryOf ?? null,
      headers: d.headers,
    }));
  }

  async #decide(
    project: IProject,
    headers: HeaderBag,
    rawBody: Buffer,
    verified: boolean,
    redeliveryOf: string | null,
  ): Promise<WebhookResult> {
    const meta = readDeliveryMeta(headers);
    const base = {
      project: project.id,
      forge: meta.forge,
      event: meta.event?.slice(0, 64) ?? null,
      // A redelivery is recorded without the forge's id, so it is never taken for a duplicate.
      deliveryId: redeliveryOf ? null : (meta.deliveryId?.slice(0, 128) ?? null),
      headers: recordableHeaders(headers),
      redeliveryOf,
      payload: verified && rawBody.length <= MAX_KEPT_PAYLOAD ? rawBody : null,
    };
    const record = (
      em: EntityManager,
      r: WebhookResult,
      fields: { signatureValid: boolean; decision: string },
    ) => {
      em.create(WebhookDelivery, {
        ...base,
        ...(fields.signatureValid ? {} : { payload: null }),
        ...fields,
        statusCode: r.status,
        reason: r.body,
        deploymentId: r.deploymentId ?? null,
      });
      return r;
    };
    const fork = () => this.#orm.em.fork();

    if (!verified) {
      return fork().transactional(async (em) =>
        record(em, { status: 401, body: 'Unauthorized' }, { signatureValid: false, decision: 'rejected' }),
      );
    }
    const contentType = headers['content-type'];
    const payload = parseWebhookBody(rawBody, typeof contentType === 'string' ? contentType : undefined);
    if (!payload) {
      return fork().transactional(async (em) =>
        record(em, { status: 400, body: 'No body' }, { signatureValid: true, decision: 'invalid' }),
      );
    }
    const decision = decidePush(meta.event, payload, {
      branch: project.branchName,
      patterns: project.branchPatterns ?? [],
    });
    if (decision.kind !== 'deploy') {
      const reply = webhookReply(decision);
      return fork().transactional(async (em) =>
        record(em, reply, { signatureValid: true, decision: 'ignored' }),
      );
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
      redeliveryOf: string | null;
      payload: Buffer | null;
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
           (id, created_at, project_id, forge, event, delivery_id, signature_valid, status_code, decision, reason,
            deployment_id, headers, payload, redelivery_of)
         values (?, now(), ?, ?, ?, ?, true, ?, 'deployed', ?, ?, ?, ?, ?)
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
            base.payload,
            base.redeliveryOf,
          ],
        );
        if (claimed.length === 0) {
          em.create(WebhookDelivery, {
            ...base,
            payload: null,
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
          name: `${forge} push${who}${base.redeliveryOf ? ' (redelivered)' : ''}`,
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
