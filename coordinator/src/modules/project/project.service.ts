// Projects: create, read, update, delete, and the webhook secret (shown on creation, rotation and
// to admins on request; encrypted at rest). Secret values are write-only: only their names leave.
import { randomBytes } from 'node:crypto';
import ssh2 from 'ssh2';
import type { EntityManager, MikroORM } from '@mikro-orm/postgresql';
import { UniqueConstraintViolationException } from '@mikro-orm/postgresql';
import { recordAudit } from '../audit/audit.service.ts';
import { ed25519KeyPair } from '../ssh/ed25519-key.ts';
import type { Actor } from '../common/actor.ts';
import type { SecretBox } from '../common/crypto.ts';
import { BadRequestError, ConflictError, NotFoundError } from '../common/errors.ts';
import { iso, isUuid } from '../common/schemas.ts';
import { Deployment } from '../deployment/deployment.entity.ts';
import { parseForgeUrl } from '../notification/commit-status.ts';
import {
  type CommitStatusSettings,
  DEFAULT_POLICIES,
  type IProject,
  type NotificationSettings,
  Project,
  type ProjectPolicies,
  type Target,
} from './project.entity.ts';
import type {
  CommitStatusInput,
  CreateProjectBody,
  NotificationsInput,
  PolicyFields,
  ProjectJson,
  TargetInput,
  UpdateProjectBody,
} from './project.schema.ts';

const sshUtils = ssh2.utils;

/** A project's policies, defaults filled in for what it does not say. */
export function policiesOf(project: { policies?: ProjectPolicies | null }): ProjectPolicies {
  const p = project.policies ?? DEFAULT_POLICIES;
  return {
    timeouts: { ...DEFAULT_POLICIES.timeouts, ...p.timeouts },
    concurrency: p.concurrency ?? 'queue',
    supersede_running: p.supersede_running ?? false,
    releases: p.releases ?? null,
    retention_days: p.retention_days ?? null,
  };
}

function mergePolicies(
  current: ProjectPolicies,
  input: Partial<Pick<CreateProjectBody, keyof typeof PolicyFields>>,
): ProjectPolicies {
  const releases =
    input.releases === undefined
      ? current.releases
      : input.releases === null
        ? null
        : {
            keep: input.releases.keep ?? current.releases?.keep ?? 5,
            health_check:
              input.releases.health_check === undefined
                ? (current.releases?.health_check ?? null)
                : input.releases.health_check,
          };
  return {
    timeouts: { ...current.timeouts, ...input.timeouts },
    concurrency: input.concurrency ?? current.concurrency,
    supersede_running: input.supersede_running ?? current.supersede_running,
    releases,
    retention_days: input.retention_days === undefined ? current.retention_days : input.retention_days,
  };
}

/**
 * Mail settings after an update. `since` moves only when mail is switched on (from nothing or
 * `never`), so deployments that ended before are never mailed, and editing the list keeps it.
 */
function mergeNotifications(
  current: NotificationSettings | null,
  input: NotificationsInput | null | undefined,
): NotificationSettings | null {
  if (input === undefined) return current;
  if (input === null) return null;
  const emails = [...new Set(input.emails ?? current?.emails ?? [])];
  const on = input.on ?? current?.on ?? 'failure';
  const wasOn = current !== null && current.on !== 'never' && current.emails.length > 0;
  const isOn = on !== 'never' && emails.length > 0;
  const since = isOn ? (wasOn ? current.since : new Date().toISOString()) : null;
  return { emails, on, since };
}

/** A URL the coordinator may send to: http or https, no credentials in it. */
export function checkHttpUrl(value: string, field: string): string {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new BadRequestError(`${field} is not a valid URL`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:')
    throw new BadRequestError(`${field} must be an http:// or https:// URL`);
  if (url.username || url.password) throw new BadRequestError(`${field} must not contain credentials`);
  return url.toString();
}

/** Commit statuses need to know the repository: forge_url must name one on a forge. */
function checkForgeRepository(forgeUrl: string): void {
  if (!parseForgeUrl(forgeUrl)) {
    throw new BadRequestError(
      'commit_status needs a forge_url naming a repository on a forge (https://host/owner/repo or git@host:owner/repo)',
    );
  }
}

/**
 * An SSH target's key must be one ssh2 can log in with, unencrypted (Deckhand has nowhere to keep
 * a passphrase). The message never quotes the key.
 */
function checkSshPrivateKey(text: string): void {
  if (/ENCRYPTED|Proc-Type: 4,ENCRYPTED/.test(text)) {
    throw new BadRequestError('target.ssh.private_key must not be protected by a passphrase');
  }
  const parsed = sshUtils.parseKey(text);
  const key = Array.isArray(parsed) ? parsed[0] : parsed;
  if (!key || key instanceof Error) {
    const why =
      key instanceof Error && /passphrase|encrypted/i.test(key.message)
        ? ': it is protected by a passphrase'
        : '';
    throw new BadRequestError(`target.ssh.private_key is not a private key in OpenSSH or PEM format${why}`);
  }
  if (!key.isPrivateKey()) {
    throw new BadRequestError('target.ssh.private_key is a public key: give the private half');
  }
}

export class ProjectService {
  readonly #orm: MikroORM;
  readonly #box: SecretBox;
  readonly #webhookUrl: (projectId: string) => string;

  constructor(orm: MikroORM, box: SecretBox, webhookUrl: (projectId: string) => string) {
    this.#orm = orm;
    this.#box = box;
    this.#webhookUrl = webhookUrl;
  }

  toJson(project: IProject): ProjectJson {
    return {
      id: project.id,
      name: project.name,
      forge_url: project.forgeUrl,
      branch_name: project.branchName,
      branch_patterns: project.branchPatterns ?? [],
      commands: project.commands,
      target: project.target,
      env: project.env,
      secret_keys: project.secretKeys,
      checkout: { credentials: project.checkoutCredentials, known_hosts: project.forgeKnownHosts ?? null },
      notifications: {
        emails: project.notifications?.emails ?? [],
        on: project.notifications?.on ?? 'never',
      },
      commit_status: project.commitStatus
        ? {
            provider: project.commitStatus.provider,
            api_url: project.commitStatus.api_url,
            has_token: Boolean(project.commitStatusTokenEncrypted),
          }
        : null,
      deploy_key: { public_key: project.deployKeyPublic ?? '' },
      ...policiesOf(project),
      created_at: iso(project.createdAt),
      updated_at: iso(project.updatedAt),
    };
  }

  async create(
    input: CreateProjectBody,
    actor: Actor,
  ): Promise<{ project: ProjectJson; webhook: { url: string; secret: string } }> {
    const target = this.#target(input.target, null);
    const commitStatus = this.#commitStatus(input.commit_status, null);
    if (commitStatus.commitStatus) checkForgeRepository(input.forge_url);
    const secret = input.webhook_secret ?? randomBytes(24).toString('base64url');
    return this.#unique(() =>
      this.#orm.em.fork().transactional(async (em) => {
        const project = em.create(Project, {
          name: input.name,
          forgeUrl: input.forge_url,
          branchName: input.branch_name ?? 'main',
          branchPatterns: input.branch_patterns ?? [],
          commands: input.commands,
          target: target.target,
          env: input.env ?? {},
          secretKeys: Object.keys(input.secrets ?? {}).sort(),
          secretsEncrypted:
            input.secrets && Object.keys(input.secrets).length ? this.#box.encryptJson(input.secrets) : null,
          sshPrivateKeyEncrypted: target.privateKeyEncrypted,
          webhookSecretEncrypted: this.#box.encrypt(secret),
          ...this.#newDeployKey(),
          checkoutCredentials: input.checkout?.credentials ?? 'deploy_key',
          forgeKnownHosts: input.checkout?.known_hosts?.trim() || null,
          policies: mergePolicies(DEFAULT_POLICIES, input),
          notifications: mergeNotifications(null, input.notifications),
          ...commitStatus,
        });
        recordAudit(em, actor, 'project.create', { type: 'project', id: project.id }, { name: project.name });
        await em.flush();
        return { project: this.toJson(project), webhook: { url: this.#webhookUrl(project.id), secret } };
      }),
    );
  }

  async list(): Promise<ProjectJson[]> {
    const projects = await this.#orm.em.fork().find(Project, {}, { orderBy: { name: 'asc' } });
    return projects.map((p) => this.toJson(p));
  }

  async get(id: string): Promise<ProjectJson> {
    return this.toJson(await this.#find(id));
  }

  /** The entity itself, for other services (deployment triggers, webhooks). */
  /** `em`: a transaction of the caller's (its connection is reused: no second one while it holds one). */
  async find(id: string, em: EntityManager = this.#orm.em.fork()): Promise<IProject | null> {
    if (!isUuid(id)) return null;
    return em.findOne(Project, { id });
  }

  webhookSecret(project: IProject): string {
    return this.#box.decrypt(project.webhookSecretEncrypted);
  }

  async update(id: string, input: UpdateProjectBody, actor: Actor): Promise<ProjectJson> {
    return this.#unique(() =>
      this.#orm.em.fork().transactional(async (em) => {
        const project = await this.#find(id, em);
        if (input.name !== undefined) project.name = input.name;
        if (input.forge_url !== undefined) project.forgeUrl = input.forge_url;
        if (input.branch_name !== undefined) project.branchName = input.branch_name;
        if (input.branch_patterns !== undefined) project.branchPatterns = input.branch_patterns;
        if (input.commands !== undefined) project.commands = input.commands;
        if (input.env !== undefined) project.env = input.env;
        if (input.checkout?.credentials !== undefined)
          project.checkoutCredentials = input.checkout.credentials;
        if (input.checkout?.known_hosts !== undefined)
          project.forgeKnownHosts = input.checkout.known_hosts?.trim() || null;
        project.policies = mergePolicies(policiesOf(project), input);
        project.notifications = mergeNotifications(project.notifications ?? null, input.notifications);
        if (input.commit_status !== undefined) {
          Object.assign(
            project,
            this.#commitStatus(input.commit_status, {
              settings: project.commitStatus ?? null,
              token: project.commitStatusTokenEncrypted ?? null,
            }),
          );
        }
        if (project.commitStatus && (input.commit_status !== undefined || input.forge_url !== undefined))
          checkForgeRepository(project.forgeUrl);
        if (input.target !== undefined) {
          const target = this.#target(input.target, project.sshPrivateKeyEncrypted ?? null);
          project.target = target.target;
          project.sshPrivateKeyEncrypted = target.privateKeyEncrypted;
        }
        if (input.secrets !== undefined) {
          const current: Record<string, string> = project.secretsEncrypted
            ? this.#box.decryptJson(project.secretsEncrypted)
            : {};
          for (const [key, value] of Object.entries(input.secrets)) {
            if (value === null) delete current[key];
            else current[key] = value;
          }
          project.secretKeys = Object.keys(current).sort();
          project.secretsEncrypted = project.secretKeys.length ? this.#box.encryptJson(current) : null;
        }
        recordAudit(
          em,
          actor,
          'project.update',
          { type: 'project', id: project.id },
          {
            fields: Object.keys(input).filter((k) => (input as Record<string, unknown>)[k] !== undefined),
          },
        );
        await em.flush();
        return this.toJson(project);
      }),
    );
  }

  async delete(id: string, actor: Actor): Promise<void> {
    await this.#orm.em.fork().transactional(async (em) => {
      const project = await this.#find(id, em);
      const running = await em.count(Deployment, { project: project.id, status: 'running' });
      if (running > 0) throw new ConflictError('The project has a running deployment: cancel it first');
      recordAudit(em, actor, 'project.delete', { type: 'project', id: project.id }, { name: project.name });
      em.remove(project);
    });
  }

  /** Where the project's forge sends pushes (not a secret: the signature is). */
  webhookUrl(id: string): string {
    return this.#webhookUrl(id);
  }

  async getWebhook(id: string): Promise<{ url: string; secret: string }> {
    const project = await this.#find(id);
    return { url: this.#webhookUrl(project.id), secret: this.webhookSecret(project) };
  }

  async rotateWebhook(id: string, actor: Actor): Promise<{ url: string; secret: string }> {
    const secret = randomBytes(24).toString('base64url');
    await this.#orm.em.fork().transactional(async (em) => {
      const project = await this.#find(id, em);
      project.webhookSecretEncrypted = this.#box.encrypt(secret);
      recordAudit(em, actor, 'project.webhook_rotate', { type: 'project', id: project.id });
    });
    return { url: this.#webhookUrl(id), secret };
  }

  /** Replaces the deploy key; the new public half must be added to the forge. */
  async rotateDeployKey(id: string, actor: Actor): Promise<ProjectJson> {
    return this.#orm.em.fork().transactional(async (em) => {
      const project = await this.#find(id, em);
      Object.assign(project, this.#newDeployKey());
      recordAudit(em, actor, 'project.deploy_key_rotate', { type: 'project', id: project.id });
      await em.flush();
      return this.toJson(project);
    });
  }

  /** The private deploy key for a checkout, generating one for projects older than deploy keys. */
  async deployKey(project: IProject, em: EntityManager = this.#orm.em.fork()): Promise<string> {
    if (!project.deployKeyPrivateEncrypted) {
      const key = this.#newDeployKey();
      await em.nativeUpdate(Project, { id: project.id, deployKeyPrivateEncrypted: null }, key);
      const fresh = await em.findOneOrFail(Project, { id: project.id }, { refresh: true });
      return this.#box.decrypt(fresh.deployKeyPrivateEncrypted!);
    }
    return this.#box.decrypt(project.deployKeyPrivateEncrypted);
  }

  #newDeployKey(): { deployKeyPublic: string; deployKeyPrivateEncrypted: string } {
    const pair = ed25519KeyPair('deckhand deploy key');
    return { deployKeyPublic: pair.public, deployKeyPrivateEncrypted: this.#box.encrypt(pair.private) };
  }

  async #find(id: string, em = this.#orm.em.fork()): Promise<IProject> {
    const project = isUuid(id) ? await em.findOne(Project, { id }) : null;
    if (!project) throw new NotFoundError('Project not found');
    return project;
  }

  /** The private key of the project's SSH target, decrypted for the connection that needs it (null: none). */
  async sshPrivateKey(projectId: string): Promise<string | null> {
    const project = isUuid(projectId) ? await this.#orm.em.fork().findOne(Project, { id: projectId }) : null;
    return project?.sshPrivateKeyEncrypted ? this.#box.decrypt(project.sshPrivateKeyEncrypted) : null;
  }

  /** The forge token for commit statuses, decrypted for the one request that needs it. */
  commitStatusToken(project: IProject): string | null {
    return project.commitStatusTokenEncrypted ? this.#box.decrypt(project.commitStatusTokenEncrypted) : null;
  }

  /**
   * Commit-status settings after create/update: the token is write-only and kept when omitted for
   * the same provider; `since` moves when reporting is (re)configured for another provider.
   */
  #commitStatus(
    input: CommitStatusInput | null | undefined,
    current: { settings: CommitStatusSettings | null; token: string | null } | null,
  ): { commitStatus: CommitStatusSettings | null; commitStatusTokenEncrypted: string | null } {
    if (!input) return { commitStatus: null, commitStatusTokenEncrypted: null };
    const same = current?.settings?.provider === input.provider;
    const token = input.token ? this.#box.encrypt(input.token) : same ? (current?.token ?? null) : null;
    if (!token) throw new BadRequestError('commit_status.token is required');
    const apiUrl =
      input.api_url === undefined
        ? same
          ? (current?.settings?.api_url ?? null)
          : null
        : input.api_url === null
          ? null
          : checkHttpUrl(input.api_url, 'commit_status.api_url').replace(/\/+$/, '');
    return {
      commitStatus: {
        provider: input.provider,
        api_url: apiUrl,
        since: same && current?.settings ? current.settings.since : new Date().toISOString(),
      },
      commitStatusTokenEncrypted: token,
    };
  }

  /** Splits an input target into what is stored in clear and the encrypted private key. */
  #target(
    input: TargetInput,
    existingKey: string | null,
  ): { target: Target; privateKeyEncrypted: string | null } {
    if ('agents' in input) return { target: input as Target, privateKeyEncrypted: null };
    const { private_key, ...ssh } = input.ssh;
    if (!private_key && !existingKey) throw new BadRequestError('target.ssh.private_key is required');
    if (private_key) checkSshPrivateKey(private_key);
    return {
      target: { ssh: { ...ssh, port: ssh.port ?? 22 } },
      privateKeyEncrypted: private_key ? this.#box.encrypt(private_key) : existingKey,
    };
  }

  async #unique<T>(work: () => Promise<T>): Promise<T> {
    try {
      return await work();
    } catch (err) {
      if (err instanceof UniqueConstraintViolationException) {
        throw new ConflictError('A project with this name already exists');
      }
      throw err;
    }
  }
}
