import { Migration } from '@mikro-orm/migrations';

export class Migration20261122040000_rate_limits extends Migration {

  override name = 'Migration20261122040000_rate_limits';

  override up(): void | Promise<void> {
    this.addSql(`create table "rate_limit_hits" ("key" varchar(255) not null, "count" int not null, "window_started_at" timestamptz(3) not null, primary key ("key"));`);
    this.addSql(`create index "rate_limit_hits_window_started_at_index" on "rate_limit_hits" ("window_started_at");`);
  }

  override down(): void | Promise<void> {
    this.addSql(`drop table if exists "rate_limit_hits" cascade;`);
  }

}
