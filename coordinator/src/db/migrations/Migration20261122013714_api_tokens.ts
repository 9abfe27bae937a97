import { Migration } from '@mikro-orm/migrations';

export class Migration20261122013714_api_tokens extends Migration {

  override name = 'Migration20261122013714_api_tokens';

  override up(): void | Promise<void> {
    this.addSql(`create table "api_tokens" ("id" uuid not null, "created_at" timestamptz(3) not null, "user_id" uuid not null, "name" varchar(100) not null, "scope" varchar(16) not null, "token_hash" varchar(64) not null, "expires_at" timestamptz(3) null, "last_used_at" timestamptz(3) null, "revoked_at" timestamptz(3) null, primary key ("id"));`);
    this.addSql(`create index "api_tokens_user_id_index" on "api_tokens" ("user_id");`);
    this.addSql(`alter table "api_tokens" add constraint "api_tokens_token_hash_unique" unique ("token_hash");`);

    this.addSql(`alter table "api_tokens" add constraint "api_tokens_user_id_foreign" foreign key ("user_id") references "users" ("id") on delete cascade;`);
  }

  override down(): void | Promise<void> {
    this.addSql(`drop table if exists "api_tokens" cascade;`);
  }

}
