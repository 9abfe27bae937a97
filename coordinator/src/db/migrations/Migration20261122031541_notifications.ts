import { Migration } from '@mikro-orm/migrations';

export class Migration20261122031541_notifications extends Migration {

  override name = 'Migration20261122031541_notifications';

  override up(): void | Promise<void> {
    this.addSql(`create table "deployment_notices" ("deployment_id" uuid not null, "status" varchar(16) not null, "noticed_at" timestamptz(3) not null, primary key ("deployment_id"));`);

    this.addSql(`create table "project_hooks" ("id" uuid not null, "created_at" timestamptz(3) not null, "project_id" uuid not null, "url" text not null, "events" jsonb not null, "secret_encrypted" text not null, primary key ("id"));`);
    this.addSql(`create index "project_hooks_project_id_index" on "project_hooks" ("project_id");`);

    this.addSql(`create table "notification_deliveries" ("id" uuid not null, "created_at" timestamptz(3) not null, "deployment_id" uuid not null, "project_id" uuid not null, "hook_id" uuid null, "channel" varchar(16) not null, "event" varchar(32) not null, "deployment_status" varchar(16) not null, "dedupe_key" varchar(160) not null, "state" varchar(16) not null default 'pending', "attempts" int not null default 0, "next_attempt_at" timestamptz(3) not null, "locked_until" timestamptz(3) null, "last_error" text null, "delivered_at" timestamptz(3) null, "payload" jsonb null, primary key ("id"));`);
    this.addSql(`create index "notification_deliveries_deployment_id_index" on "notification_deliveries" ("deployment_id");`);
    this.addSql(`create index "notification_deliveries_project_id_index" on "notification_deliveries" ("project_id");`);
    this.addSql(`create index "notification_deliveries_hook_id_index" on "notification_deliveries" ("hook_id");`);
    this.addSql(`alter table "notification_deliveries" add constraint "notification_deliveries_dedupe_key_unique" unique ("dedupe_key");`);
    this.addSql(`create index "notification_deliveries_due_index" on "notification_deliveries" ("next_attempt_at") where "state" = 'pending';`);

    this.addSql(`create table "notification_attempts" ("id" uuid not null, "created_at" timestamptz(3) not null, "delivery_id" uuid not null, "success" boolean not null, "status_code" int null, "error" text null, "duration_ms" int not null, primary key ("id"));`);
    this.addSql(`create index "notification_attempts_delivery_id_index" on "notification_attempts" ("delivery_id");`);

    this.addSql(`alter table "projects" add "notifications" jsonb null, add "commit_status" jsonb null, add "commit_status_token_encrypted" text null;`);

    this.addSql(`alter table "deployment_notices" add constraint "deployment_notices_deployment_id_foreign" foreign key ("deployment_id") references "deployments" ("id") on update cascade on delete cascade;`);

    this.addSql(`alter table "project_hooks" add constraint "project_hooks_project_id_foreign" foreign key ("project_id") references "projects" ("id") on delete cascade;`);

    this.addSql(`alter table "notification_deliveries" add constraint "notification_deliveries_deployment_id_foreign" foreign key ("deployment_id") references "deployments" ("id") on delete cascade;`);
    this.addSql(`alter table "notification_deliveries" add constraint "notification_deliveries_project_id_foreign" foreign key ("project_id") references "projects" ("id") on delete cascade;`);
    this.addSql(`alter table "notification_deliveries" add constraint "notification_deliveries_hook_id_foreign" foreign key ("hook_id") references "project_hooks" ("id") on delete cascade;`);

    this.addSql(`alter table "notification_attempts" add constraint "notification_attempts_delivery_id_foreign" foreign key ("delivery_id") references "notification_deliveries" ("id") on delete cascade;`);
  }

  override down(): void | Promise<void> {
    this.addSql(`alter table "notification_deliveries" drop constraint "notification_deliveries_hook_id_foreign";`);
    this.addSql(`alter table "notification_attempts" drop constraint "notification_attempts_delivery_id_foreign";`);

    this.addSql(`drop table if exists "deployment_notices" cascade;`);
    this.addSql(`drop table if exists "project_hooks" cascade;`);
    this.addSql(`drop table if exists "notification_deliveries" cascade;`);
    this.addSql(`drop table if exists "notification_attempts" cascade;`);

    this.addSql(`alter table "projects" drop column "notifications", drop column "commit_status", drop column "commit_status_token_encrypted";`);
  }

}
