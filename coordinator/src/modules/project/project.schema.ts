// The project's JSON shapes (API.md "Projects"): request bodies validated at the route, the
// response shape serialised from it. Names and patterns here are the rules for user input.
import Type, { type Static } from 'typebox';
import { NullableTimestamp, Timestamp, Uuid } from '../common/schemas.ts';

export const ProjectName = Type.String({
  minLength: 1,
  maxLength: 100,
  pattern: '^[A-Za-z0-9][A-Za-z0-9._-]*$',
  description: 'Letters, digits, ".", "_" and "-"; also the folder name on hosts',
});
// A git remote: URL (https, ssh, git, file) or scp-like `user@host:path`, or an absolute path.
// Never starting with "-", so it cannot be read as a git option.
export const ForgeUrl = Type.String({ minLength: 1, maxLength: 2000, pattern: '^[^\\s-][^\\s]*$' });
// git check-ref-format rules, in short: no spaces, "..", "~^:?*[\\", no leading "-" or "/".
export const BranchName = Type.String({
  minLength: 1,
  maxLength: 255,
  pattern:
    '^(?!-)(?!/)(?!.*\\.\\.)(?!.*//)(?!.*@\\{)(?!.*\\.lock$)(?!.*/$)(?!.*\\.$)[^\\s~^:?*\\[\\\\\\x00-\\x1f\\x7f]+$',
});
const Label = Type.String({ minLength: 1, maxLength: 63, pattern: '^[A-Za-z0-9][A-Za-z0-9_.:-]*$' });
const EnvName = '^[A-Za-z_][A-Za-z0-9_]*$';
export const Commands = Type.Array(Type.String({ minLength: 1, maxLength: 10_000 }), {
  minItems: 1,
  maxItems: 100,
});
// Record keys are checked with propertyNames: a bad name is refused, not silently dropped.
const EnvKeys = { maxProperties: 200, propertyNames: { pattern: EnvName, maxLength: 128 } };
export const EnvMap = Type.Record(Type.String(), Type.String({ maxLength: 32_768 }), EnvKeys);
export const SecretsPatch = Type.Record(
  Type.String(),
  Type.Union([Type.String({ maxLength: 32_768 }), Type.Null()]),
  EnvKeys,
);
export const Fingerprint = Type.String({ pattern: '^SHA256:[A-Za-z0-9+/]{43}=?$' });

export const AgentTargetSchema = Type.Object(
  {
    agents: Type.Union([
      Type.Object(
        { labels: Type.Array(Label, { minItems: 1, maxItems: 20 }) },
        { additionalProperties: false },
      ),
      Type.Object(
        { names: Type.Array(Label, { minItems: 1, maxItems: 100 }) },
        { additionalProperties: false },
      ),
    ]),
  },
  { additionalProperties: false },
);
// A host name or address (IPv6 in brackets or bare); never starting with "-".
export const SshHost = Type.String({
  minLength: 1,
  maxLength: 255,
  pattern: '^[A-Za-z0-9.:_\\[][A-Za-z0-9.:_\\[\\]-]*$',
});
export const SshPort = Type.Integer({ minimum: 1, maximum: 65535 });
export const SshTargetInput = Type.Object(
  {
    ssh: Type.Object(
      {
        host: SshHost,
        port: Type.Optional(SshPort),
        username: Type.String({ minLength: 1, maxLength: 64, pattern: '^[A-Za-z0-9._][A-Za-z0-9._-]*$' }),
        private_key: Type.Optional(
          Type.String({
            minLength: 1,
            maxLength: 16_384,
            description: 'OpenSSH or PEM, without passphrase; write-only',
          }),
        ),
        host_key_fingerprint: Fingerprint,
      },
      { additionalProperties: false },
    ),
  },
  { additionalProperties: false },
);
export const TargetInput = Type.Union([AgentTargetSchema, SshTargetInput]);
export type TargetInput = Static<typeof TargetInput>;

export const CheckoutInput = Type.Object(
  {
    credentials: Type.Optional(Type.Enum(['deploy_key', 'host'])),
    known_hosts: Type.Optional(Type.Union([Type.String({ maxLength: 65_536 }), Type.Null()])),
  },
  { additionalProperties: false },
);

const Seconds = (max: number) => Type.Integer({ minimum: 1, maximum: max });
export const PolicyFields = {
  timeouts: Type.Optional(
    Type.Object(
      {
        command_seconds: Type.Optional(Type.Union([Seconds(7 * 86_400), Type.Null()])),
        deployment_seconds: Type.Optional(Type.Union([Seconds(7 * 86_400), Type.Null()])),
        queue_seconds: Type.Optional(Seconds(30 * 86_400)),
      },
      { additionalProperties: false },
    ),
  ),
  concurrency: Type.Optional(Type.Enum(['queue', 'supersede'])),
  supersede_running: Type.Optional(Type.Boolean()),
  retention_days: Type.Optional(
    Type.Union([Type.Integer({ minimum: 1, maximum: 36_500 }), Type.Null()], {
      description: 'Prune finished deployments older than this many days (null: the RETENTION_DAYS setting)',
    }),
  ),
  releases: Type.Optional(
    Type.Union([
      Type.Object(
        {
          keep: Type.Optional(Type.Integer({ minimum: 1, maximum: 100 })),
          health_check: Type.Optional(
            Type.Union([Type.String({ minLength: 1, maxLength: 10_000 }), Type.Null()]),
          ),
        },
        { additionalProperties: false },
      ),
      Type.Null(),
    ]),
  ),
};

export const BranchPatterns = Type.Array(
  Type.String({ minLength: 1, maxLength: 255, pattern: '^[A-Za-z0-9._/*?-]+$' }),
  { maxItems: 20, description: 'Globs of further branches to deploy on push: * (no /), ** (anything), ?' },
);

const NotifyOn = Type.Enum(['failure', 'success', 'always', 'never'], {
  description: 'failure: failed or timed_out; success; always: every end (cancelled too); never',
});
const NotifyEmails = Type.Array(Type.String({ format: 'email', maxLength: 320 }), { maxItems: 20 });
export const NotificationsInput = Type.Object(
  { emails: Type.Optional(NotifyEmails), on: Type.Optional(NotifyOn) },
  { additionalProperties: false },
);
export type NotificationsInput = Static<typeof NotificationsInput>;
// An http(s) URL without credentials in it (they would be shown to every reader of the project).
export const HttpUrl = Type.String({ maxLength: 2000, pattern: '^https?://[^\\s/@]+(/[^\\s]*)?$' });
export const CommitStatusInput = Type.Object(
  {
    provider: Type.Enum(['github', 'gitea', 'gitlab']),
    token: Type.Optional(Type.String({ minLength: 1, maxLength: 1000, pattern: '^[\\x21-\\x7e]+$' })),
    api_url: Type.Optional(Type.Union([HttpUrl, Type.Null()])),
  },
  { additionalProperties: false },
);
export type CommitStatusInput = Static<typeof CommitStatusInput>;
const IntegrationFields = {
  notifications: Type.Optional(Type.Union([NotificationsInput, Type.Null()])),
  commit_status: Type.Optional(Type.Union([CommitStatusInput, Type.Null()])),
};

export const CreateProjectBody = Type.Object({
  name: ProjectName,
  forge_url: ForgeUrl,
  branch_name: Type.Optional(BranchName),
  branch_patterns: Type.Optional(BranchPatterns),
  commands: Commands,
  target: TargetInput,
  env: Type.Optional(EnvMap),
  secrets: Type.Optional(EnvMap),
  webhook_secret: Type.Optional(Type.String({ minLength: 16, maxLength: 256 })),
  checkout: Type.Optional(CheckoutInput),
  ...PolicyFields,
  ...IntegrationFields,
});
export type CreateProjectBody = Static<typeof CreateProjectBody>;

export const UpdateProjectBody = Type.Object({
  name: Type.Optional(ProjectName),
  forge_url: Type.Optional(ForgeUrl),
  branch_name: Type.Optional(BranchName),
  branch_patterns: Type.Optional(BranchPatterns),
  commands: Type.Optional(Commands),
  target: Type.Optional(TargetInput),
  env: Type.Optional(EnvMap),
  secrets: Type.Optional(SecretsPatch),
  checkout: Type.Optional(CheckoutInput),
  ...PolicyFields,
  ...IntegrationFields,
});
export type UpdateProjectBody = Static<typeof UpdateProjectBody>;

export const ProjectJson = Type.Object({
  id: Uuid,
  name: Type.String(),
  forge_url: Type.String(),
  branch_name: Type.String(),
  branch_patterns: Type.Array(Type.String()),
  commands: Type.Array(Type.String()),
  target: Type.Unknown({
    description:
      '{agents: {labels}} | {agents: {names}} | {ssh: {host, port, username, host_key_fingerprint}}',
  }),
  env: Type.Record(Type.String(), Type.String()),
  secret_keys: Type.Array(Type.String()),
  checkout: Type.Object({
    credentials: Type.Enum(['deploy_key', 'host']),
    known_hosts: Type.Union([Type.String(), Type.Null()]),
  }),
  timeouts: Type.Object({
    command_seconds: Type.Union([Type.Integer(), Type.Null()]),
    deployment_seconds: Type.Union([Type.Integer(), Type.Null()]),
    queue_seconds: Type.Integer(),
  }),
  concurrency: Type.Enum(['queue', 'supersede']),
  supersede_running: Type.Boolean(),
  retention_days: Type.Union([Type.Integer(), Type.Null()]),
  releases: Type.Union([
    Type.Object({ keep: Type.Integer(), health_check: Type.Union([Type.String(), Type.Null()]) }),
    Type.Null(),
  ]),
  notifications: Type.Object({ emails: Type.Array(Type.String()), on: NotifyOn }),
  commit_status: Type.Union([
    Type.Object({
      provider: Type.Enum(['github', 'gitea', 'gitlab']),
      api_url: Type.Union([Type.String(), Type.Null()]),
      has_token: Type.Boolean({ description: 'The token itself is write-only' }),
    }),
    Type.Null(),
  ]),
  deploy_key: Type.Object({
    public_key: Type.String({ description: 'Add it to the forge as a read-only deploy key' }),
  }),
  created_at: Timestamp,
  updated_at: NullableTimestamp,
});
export type ProjectJson = Static<typeof ProjectJson>;

export const WebhookJson = Type.Object({ url: Type.String(), secret: Type.String() });
