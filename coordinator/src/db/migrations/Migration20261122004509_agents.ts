import { Migration } from '@mikro-orm/migrations';

export class Migration20261122004509_agents extends Migration {

  override name = 'Migration20261122004509_agents';

  override up(): void | Promise<void> {
    this.addSql(`create table "deployment_jobs" ("id" uuid not null, "created_at" timestamptz(3) not null, "deployment_id" uuid not null, "agent_id" uuid null, "host" varchar(255) not null, "status" varchar(16) not null, "reason" text null, "sent_at" timestamptz(3) null, "started_at" timestamptz(3) null, "finished_at" timestamptz(3) null, primary key ("id"));`);
    this.addSql(`create index "deployment_jobs_deployment_id_index" on "deployment_jobs" ("deployment_id");`);
    this.addSql(`create index "deployment_jobs_agent_id_status_index" on "deployment_jobs" ("agent_id", "status");`);

    this.addSql(`alter table "projects" add "deploy_key_public" text null, add "deploy_key_private_encrypted" text null, add "checkout_credentials" varchar(16) not null default 'deploy_key', add "forge_known_hosts" text null;`);


    this.addSql(`alter table "log_entries" add constraint "log_entries_deployment_id_host_seq_unique" unique ("deployment_id", "host", "seq");`);


    this.addSql(`alter table "deployment_jobs" add constraint "deployment_jobs_deployment_id_foreign" foreign key ("deployment_id") references "deployments" ("id") on delete cascade;`);
    this.addSql(`alter table "deployment_jobs" add constraint "deployment_jobs_agent_id_foreign" foreign key ("agent_id") references "agents" ("id") on delete set null;`);

    // One running deployment per project, guaranteed by the database (SQL only).
    this.addSql(`create unique index "deployments_one_running_per_project" on "deployments" ("project_id") where "status" = 'running';`);
    this.addSql(`create index "deployment_jobs_pending_index" on "deployment_jobs" ("agent_id") where "status" = 'pending';`);
  }

  override down(): void | Promise<void> {
    this.addSql(`drop index "deployments_one_running_per_project";`);
    this.addSql(`drop table if exists "deployment_jobs" cascade;`);


    this.addSql(`alter table "log_entries" drop constraint "log_entries_deployment_id_host_seq_unique";`);

    this.addSql(`alter table "projects" drop column "deploy_key_public", drop column "deploy_key_private_encrypted", drop column "checkout_credentials", drop column "forge_known_hosts";`);

  }

}
