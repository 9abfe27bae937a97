import { Migration } from '@mikro-orm/migrations';

export class Migration20261122073005_agent_installs extends Migration {

  override name = 'Migration20261122073005_agent_installs';

  override up(): void | Promise<void> {
    this.addSql(`create table "agent_installs" ("id" uuid not null, "created_at" timestamptz(3) not null, "created_by" varchar(255) not null, "host" varchar(255) not null, "port" int not null, "username" varchar(64) not null, "host_key_fingerprint" varchar(64) not null, "name" varchar(100) not null, "labels" jsonb not null, "status" varchar(16) not null, "steps" jsonb not null, "lines" jsonb not null, "error" text null, "agent_id" uuid null, "agent_version" varchar(64) null, "coordinator" varchar(128) not null, "updated_at" timestamptz(3) not null, "finished_at" timestamptz(3) null, primary key ("id"));`);
    this.addSql(`create index "agent_installs_created_at_index" on "agent_installs" ("created_at");`);
  }

  override down(): void | Promise<void> {
    this.addSql(`drop table if exists "agent_installs" cascade;`);
  }

}
