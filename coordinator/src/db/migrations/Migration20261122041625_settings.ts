import { Migration } from '@mikro-orm/migrations';

export class Migration20261122041625_settings extends Migration {

  override name = 'Migration20261122041625_settings';

  override up(): void | Promise<void> {
    this.addSql(`create table "settings" ("key" varchar(64) not null, "value_encrypted" text not null, "updated_at" timestamptz(3) not null, "updated_by" text not null, primary key ("key"));`);
  }

  override down(): void | Promise<void> {
    this.addSql(`drop table if exists "settings" cascade;`);
  }

}
