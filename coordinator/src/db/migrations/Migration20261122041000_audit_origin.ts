import { Migration } from '@mikro-orm/migrations';

export class Migration20261122041000_audit_origin extends Migration {

  override name = 'Migration20261122041000_audit_origin';

  override up(): void | Promise<void> {
    this.addSql(`alter table "audit_events" add column "ip" varchar(64) null, add column "project_id" uuid null;`);
    this.addSql(`create index "audit_events_project_id_index" on "audit_events" ("project_id");`);
    // Earlier events: the project from the target or the details, where they name one.
    this.addSql(`update "audit_events" set "project_id" = case when "target_type" = 'project' then "target_id"::uuid else ("details"->>'project')::uuid end where "target_type" = 'project' or ("details"->>'project') ~ '^[0-9a-f-]{36}$';`);
  }

  override down(): void | Promise<void> {
    this.addSql(`drop index "audit_events_project_id_index";`);
    this.addSql(`alter table "audit_events" drop column "ip", drop column "project_id";`);
  }

}
