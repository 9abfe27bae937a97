import { Migration } from '@mikro-orm/migrations';

export class Migration20261122010514_reliability extends Migration {

  override name = 'Migration20261122010514_reliability';

  override up(): void | Promise<void> {
    // Existing projects get the defaults (ProjectPolicies in project.entity.ts).
    this.addSql(`alter table "projects" add "policies" jsonb null;`);
    this.addSql(`update "projects" set "policies" = '{"timeouts": {"command_seconds": null, "deployment_seconds": 3600, "queue_seconds": 3600}, "concurrency": "queue", "supersede_running": false, "releases": null}'::jsonb;`);
    this.addSql(`alter table "projects" alter column "policies" set not null;`);

    this.addSql(`alter table "deployments" add "kind" varchar(16) not null default 'deploy', add "rollback_to" uuid null, add "deadline_at" timestamptz(3) null, add "cancel_requested_at" timestamptz(3) null, add "cancel_as" varchar(16) null, add "cancel_reason" text null;`);

    this.addSql(`alter table "deployment_jobs" add "lease_expires_at" timestamptz(3) null, add "cancel_sent_at" timestamptz(3) null;`);
  }

  override down(): void | Promise<void> {
    this.addSql(`alter table "deployment_jobs" drop column "lease_expires_at", drop column "cancel_sent_at";`);

    this.addSql(`alter table "deployments" drop column "kind", drop column "rollback_to", drop column "deadline_at", drop column "cancel_requested_at", drop column "cancel_as", drop column "cancel_reason";`);

    this.addSql(`alter table "projects" drop column "policies";`);
  }

}
