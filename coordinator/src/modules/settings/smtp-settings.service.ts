// Where mail settings come from: the environment (SMTP_URL or SMTP_HOST…) when it names a server,
// else what an admin stored (encrypted at rest), else nowhere ("SMTP not configured"). The
// password is write-only: descriptions say whether one is set, never what it is.
import type { MikroORM } from '@mikro-orm/postgresql';
import { recordAudit } from '../audit/audit.service.ts';
import type { Actor } from '../common/actor.ts';
import type { SecretBox } from '../common/crypto.ts';
import type { SmtpSettings } from '../mail/mailer.ts';
import { Setting } from './setting.entity.ts';

const KEY = 'smtp';

export interface SmtpSettingsInput {
  host: string;
  port?: number;
  secure?: boolean;
  user?: string | null;
  /** Omitted: keep the stored one; null: remove it. */
  password?: string | null;
  from: string;
}

export interface SmtpSettingsJson {
  /** Which settings mail is sent with. */
  source: 'environment' | 'stored' | 'none';
  /** The settings in effect (from `source`), without the password. */
  settings: {
    host: string | null;
    port: number | null;
    secure: boolean;
    user: string | null;
    from: string;
    has_password: boolean;
  } | null;
  /** Stored settings exist (in effect or not: the environment wins). */
  stored: boolean;
}

function describe(s: SmtpSettings): NonNullable<SmtpSettingsJson['settings']> {
  if (s.url) {
    // The environment's URL may carry credentials: show where it points, not what it holds.
    const url = new URL(s.url);
    return {
      host: url.hostname,
      port: url.port ? Number(url.port) : null,
      secure: url.protocol === 'smtps:',
      user: url.username ? decodeURIComponent(url.username) : null,
      from: s.from,
      has_password: url.password !== '',
    };
  }
  return {
    host: s.host ?? null,
    port: s.port ?? null,
    secure: s.secure ?? false,
    user: s.user ?? null,
    from: s.from,
    has_password: Boolean(s.password),
  };
}

export class SmtpSettingsService {
  readonly #orm: MikroORM;
  readonly #box: SecretBox;
  readonly #fromEnv: SmtpSettings | null;

  constructor(orm: MikroORM, box: SecretBox, fromEnv: SmtpSettings | null) {
    this.#orm = orm;
    this.#box = box;
    this.#fromEnv = fromEnv;
  }

  /** What the mailer sends with, read at each send. */
  async effective(): Promise<SmtpSettings | null> {
    return this.#fromEnv ?? (await this.stored());
  }

  async stored(): Promise<SmtpSettings | null> {
    const row = await this.#orm.em.fork().findOne(Setting, { key: KEY });
    return row ? this.#box.decryptJson<SmtpSettings>(row.valueEncrypted) : null;
  }

  async describe(): Promise<SmtpSettingsJson> {
    const stored = await this.stored();
    const effective = this.#fromEnv ?? stored;
    return {
      source: this.#fromEnv ? 'environment' : stored ? 'stored' : 'none',
      settings: effective ? describe(effective) : null,
      stored: stored !== null,
    };
  }

  async save(input: SmtpSettingsInput, actor: Actor): Promise<SmtpSettingsJson> {
    await this.#orm.em.fork().transactional(async (em) => {
      const row = await em.findOne(Setting, { key: KEY });
      const previous = row ? this.#box.decryptJson<SmtpSettings>(row.valueEncrypted) : null;
      const password = input.password === undefined ? previous?.password : (input.password ?? undefined);
      const value: SmtpSettings = {
        host: input.host,
        from: input.from,
        ...(input.port !== undefined ? { port: input.port } : {}),
        ...(input.secure !== undefined ? { secure: input.secure } : {}),
        ...(input.user ? { user: input.user, password: password ?? '' } : {}),
      };
      const valueEncrypted = this.#box.encryptJson(value);
      if (row) {
        row.valueEncrypted = valueEncrypted;
        row.updatedBy = actor.name;
      } else {
        em.create(Setting, { key: KEY, valueEncrypted, updatedBy: actor.name });
      }
      recordAudit(
        em,
        actor,
        'settings.smtp_update',
        { type: 'settings', id: KEY },
        {
          fields: Object.keys(input).filter(
            (k) => (input as unknown as Record<string, unknown>)[k] !== undefined,
          ),
        },
      );
    });
    return this.describe();
  }

  async clear(actor: Actor): Promise<SmtpSettingsJson> {
    await this.#orm.em.fork().transactional(async (em) => {
      await em.nativeDelete(Setting, { key: KEY });
      recordAudit(em, actor, 'settings.smtp_delete', { type: 'settings', id: KEY });
    });
    return this.describe();
  }
}
