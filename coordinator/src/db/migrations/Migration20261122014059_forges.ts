import { Migration } from '@mikro-orm/migrations';

export class Migration20261122014059_forges extends Migration {

  override name = 'Migration20261122014059_forges';

  override up(): void | Promise<void> {
    this.addSql(`alter table "projects" add "branch_patterns" jsonb null;`);
    this.addSql(`update "projects" set "branch_patterns" = '[]'::jsonb;`);
    this.addSql(`alter table "projects" alter column "branch_patterns" set not null;`);

    this.addSql(`alter table "webhook_deliveries" add "payload" bytea null, add "redelivery_of" uuid null;`);
  }

  override down(): void | Promise<void> {
    this.addSql(`alter table "projects" drop column "branch_patterns";`);

    this.addSql(`alter table "webhook_deliveries" drop column "payload", drop column "redelivery_of";`);
  }

}
