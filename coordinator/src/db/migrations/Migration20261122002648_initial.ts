import { Migration } from '@mikro-orm/migrations';

export class Migration20261122002648_initial extends Migration {
  override name = 'Migration20261122002648_initial';

  override up(): void | Promise<void> {
    this.addSql(
      `create table "agents" ("id" uuid not null, "created_at" timestamptz(3) not null, "name" varchar(100) not null, "labels" jsonb not null, "token_hash" varchar(64) not null, "version" varchar(64) null, "hostname" varchar(255) null, "connected_to" varchar(128) null, "connected_at" timestamptz(3) null, "last_seen_at" timestamptz(3) null, primary key ("id"));`,
    );
    this.addSql(`alter table "agents" add constraint "agents_name_unique" unique ("name");`);
    this.addSql(`alter table "agents" add constraint "agents_token_hash_unique" unique ("token_hash");`);

    this.addSql(
      `create table "audit_events" ("id" uuid not null, "created_at" timestamptz(3) not null, "actor_type" varchar(16) not null, "actor_id" varchar(64) null, "actor_name" text not null, "action" varchar(64) not null, "target_type" varchar(32) null, "target_id" varchar(64) null, "details" jsonb null, primary key ("id"));`,
    );
    this.addSql(`create index "audit_events_action_index" on "audit_events" ("action");`);

    this.addSql(
      `create table "projects" ("id" uuid not null, "created_at" timestamptz(3) not null, "name" varchar(100) not null, "forge_url" text not null, "branch_name" varchar(255) not null, "commands" jsonb not null, "target" jsonb not null, "env" jsonb not null, "secret_keys" jsonb not null, "secrets_encrypted" text null, "ssh_private_key_encrypted" text null, "webhook_secret_encrypted" text not null, "updated_at" timestamptz(3) not null, primary key ("id"));`,
    );
    this.addSql(`alter table "projects" add constraint "projects_name_unique" unique ("name");`);

    this.addSql(
      `create table "deployments" ("id" uuid not null, "created_at" timestamptz(3) not null, "project_id" uuid not null, "status" varchar(16) not null, "reason" text null, "commit" varchar(64) null, "branch" varchar(255) not null, "trigger" varchar(16) not null, "triggered_by" text not null, "triggered_by_user_id" uuid null, "snapshot" jsonb not null, "hosts" jsonb not null, "started_at" timestamptz(3) not null, "finished_at" timestamptz(3) null, primary key ("id"));`,
    );
    this.addSql(`create index "deployments_project_id_index" on "deployments" ("project_id");`);
    this.addSql(`create index "deployments_status_index" on "deployments" ("status");`);

    this.addSql(
      `create table "log_entries" ("id" uuid not null, "created_at" timestamptz(3) not null, "deployment_id" uuid not null, "seq" int not null, "host" varchar(255) not null, "cmd" text not null, "status" varchar(16) not null, "success" boolean not null default false, "exit_code" int null, "signal" varchar(16) null, "output" bytea null, "output_bytes" bigint not null default '0', "started_at" timestamptz(3) not null, "finished_at" timestamptz(3) null, primary key ("id"));`,
    );
    this.addSql(`create index "log_entries_deployment_id_index" on "log_entries" ("deployment_id");`);

    this.addSql(
      `create table "log_chunks" ("id" bigserial primary key, "log_entry_id" uuid not null, "offset" bigint not null, "data" bytea not null, "created_at" timestamptz(3) not null);`,
    );
    this.addSql(
      `alter table "log_chunks" add constraint "log_chunks_log_entry_id_offset_unique" unique ("log_entry_id", "offset");`,
    );

    this.addSql(
      `create table "users" ("id" uuid not null, "created_at" timestamptz(3) not null, "email" varchar(320) not null, "password_hash" text not null, "role" varchar(16) not null, "updated_at" timestamptz(3) not null, primary key ("id"));`,
    );
    this.addSql(`alter table "users" add constraint "users_email_unique" unique ("email");`);

    this.addSql(
      `create table "sessions" ("id" varchar(64) not null, "user_id" uuid not null, "created_at" timestamptz(3) not null, "last_seen_at" timestamptz(3) not null, "expires_at" timestamptz(3) not null, "revoked_at" timestamptz(3) null, "ip" varchar(64) null, "user_agent" varchar(512) null, primary key ("id"));`,
    );
    this.addSql(`create index "sessions_user_id_index" on "sessions" ("user_id");`);

    this.addSql(
      `create table "webhook_deliveries" ("id" uuid not null, "created_at" timestamptz(3) not null, "project_id" uuid not null, "forge" varchar(16) not null, "event" varchar(64) null, "delivery_id" varchar(128) null, "signature_valid" boolean not null, "status_code" int not null, "decision" varchar(32) not null, "reason" text not null, "deployment_id" uuid null, "headers" jsonb not null, primary key ("id"));`,
    );
    this.addSql(`create index "webhook_deliveries_project_id_index" on "webhook_deliveries" ("project_id");`);

    this.addSql(
      `alter table "deployments" add constraint "deployments_project_id_foreign" foreign key ("project_id") references "projects" ("id") on delete cascade;`,
    );

    this.addSql(
      `alter table "log_entries" add constraint "log_entries_deployment_id_foreign" foreign key ("deployment_id") references "deployments" ("id") on delete cascade;`,
    );

    this.addSql(
      `alter table "log_chunks" add constraint "log_chunks_log_entry_id_foreign" foreign key ("log_entry_id") references "log_entries" ("id") on delete cascade;`,
    );

    this.addSql(
      `alter table "sessions" add constraint "sessions_user_id_foreign" foreign key ("user_id") references "users" ("id") on delete cascade;`,
    );

    this.addSql(
      `alter table "webhook_deliveries" add constraint "webhook_deliveries_project_id_foreign" foreign key ("project_id") references "projects" ("id") on delete cascade;`,
    );
    // Not expressible in the entity definitions: listing order and verified-delivery de-duplication.
    this.addSql(
      `create index "deployments_project_started_index" on "deployments" ("project_id", "started_at" desc);`,
    );
    this.addSql(`create index "deployments_started_index" on "deployments" ("started_at" desc);`);
    this.addSql(
      `create index "log_entries_order_index" on "log_entries" ("deployment_id", "started_at", "seq");`,
    );
    this.addSql(
      `create unique index "webhook_deliveries_handled_unique" on "webhook_deliveries" ("project_id", "delivery_id") where "decision" = 'deployed' and "delivery_id" is not null;`,
    );
  }

  override down(): void | Promise<void> {
    this.addSql(`alter table "deployments" drop constraint "deployments_project_id_foreign";`);
    this.addSql(`alter table "webhook_deliveries" drop constraint "webhook_deliveries_project_id_foreign";`);
    this.addSql(`alter table "log_entries" drop constraint "log_entries_deployment_id_foreign";`);
    this.addSql(`alter table "log_chunks" drop constraint "log_chunks_log_entry_id_foreign";`);
    this.addSql(`alter table "sessions" drop constraint "sessions_user_id_foreign";`);

    this.addSql(`drop table if exists "agents" cascade;`);
    this.addSql(`drop table if exists "audit_events" cascade;`);
    this.addSql(`drop table if exists "projects" cascade;`);
    this.addSql(`drop table if exists "deployments" cascade;`);
    this.addSql(`drop table if exists "log_entries" cascade;`);
    this.addSql(`drop table if exists "log_chunks" cascade;`);
    this.addSql(`drop table if exists "users" cascade;`);
    this.addSql(`drop table if exists "sessions" cascade;`);
    this.addSql(`drop table if exists "webhook_deliveries" cascade;`);
  }
}
