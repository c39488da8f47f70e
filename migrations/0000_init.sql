CREATE TABLE "tenants" (
	"id" text PRIMARY KEY NOT NULL,
	"name" text NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "api_keys" (
	"id" text PRIMARY KEY NOT NULL,
	"tenant_id" text,
	"secret_hash" text NOT NULL,
	"scopes" text[] NOT NULL,
	"name" text,
	"tool_server" text,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"revoked_at" timestamp with time zone,
	CONSTRAINT "api_keys_scopes_known" CHECK ("api_keys"."scopes" <@ array['admin','issue','verify','report','audit']::text[]),
	CONSTRAINT "api_keys_scopes_nonempty" CHECK (cardinality("api_keys"."scopes") > 0),
	CONSTRAINT "api_keys_tenant_or_admin" CHECK ("api_keys"."tenant_id" is not null or 'admin' = any("api_keys"."scopes"))
);
--> statement-breakpoint
CREATE TABLE "custodial_keys" (
	"tenant_id" text PRIMARY KEY NOT NULL,
	"did" text NOT NULL,
	"encrypted_seed" text NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "service_keys" (
	"kid" text PRIMARY KEY NOT NULL,
	"public_key" text NOT NULL,
	"encrypted_seed" text NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"retired_at" timestamp with time zone
);
--> statement-breakpoint
CREATE TABLE "trusted_roots" (
	"tenant_id" text NOT NULL,
	"did" text NOT NULL,
	"label" text,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "trusted_roots_tenant_id_did_pk" PRIMARY KEY("tenant_id","did")
);
--> statement-breakpoint
CREATE TABLE "delegations" (
	"tenant_id" text NOT NULL,
	"hash" text NOT NULL,
	"jws" text NOT NULL,
	"jti" text NOT NULL,
	"iss" text NOT NULL,
	"sub" text NOT NULL,
	"aud" text NOT NULL,
	"cmd" text NOT NULL,
	"policy" jsonb NOT NULL,
	"nbf" bigint NOT NULL,
	"exp" bigint,
	"iat" bigint NOT NULL,
	"parent_hash" text,
	"root_hash" text NOT NULL,
	"depth" integer NOT NULL,
	"ancestors" text[] DEFAULT '{}'::text[] NOT NULL,
	"max_calls" bigint,
	"calls_used" bigint DEFAULT 0 NOT NULL,
	"max_spend_micros" bigint,
	"spend_reserved_micros" bigint DEFAULT 0 NOT NULL,
	"revoked_at" timestamp with time zone,
	"revoked_reason" text,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "delegations_tenant_id_hash_pk" PRIMARY KEY("tenant_id","hash"),
	CONSTRAINT "delegations_tenant_jti_uq" UNIQUE("tenant_id","jti"),
	CONSTRAINT "delegations_calls_within_max" CHECK ("delegations"."max_calls" is null or "delegations"."calls_used" <= "delegations"."max_calls"),
	CONSTRAINT "delegations_calls_nonneg" CHECK ("delegations"."calls_used" >= 0 and ("delegations"."max_calls" is null or "delegations"."max_calls" >= 0)),
	CONSTRAINT "delegations_spend_nonneg" CHECK ("delegations"."spend_reserved_micros" >= 0 and ("delegations"."max_spend_micros" is null or "delegations"."max_spend_micros" >= 0)),
	CONSTRAINT "delegations_shape" CHECK ("delegations"."depth" >= 0 and ("delegations"."depth" = 0) = ("delegations"."parent_hash" is null) and cardinality("delegations"."ancestors") = "delegations"."depth"),
	CONSTRAINT "delegations_hash_format" CHECK ("delegations"."hash" ~ '^sha256:[0-9a-f]{64}$')
);
--> statement-breakpoint
CREATE TABLE "denials" (
	"id" bigserial PRIMARY KEY NOT NULL,
	"tenant_id" text NOT NULL,
	"jti" text,
	"invocation_hash" text,
	"code" text NOT NULL,
	"block" text,
	"dr_chain" text[] DEFAULT '{}'::text[] NOT NULL,
	"caller_key_id" text NOT NULL,
	"violations" jsonb DEFAULT '[]'::jsonb NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "invocations" (
	"tenant_id" text NOT NULL,
	"jti" text NOT NULL,
	"hash" text NOT NULL,
	"jws" text NOT NULL,
	"leaf_hash" text NOT NULL,
	"dr_chain" text[] NOT NULL,
	"tool" text,
	"estimated_micros" bigint DEFAULT 0 NOT NULL,
	"caller_key_id" text NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "invocations_tenant_id_jti_pk" PRIMARY KEY("tenant_id","jti"),
	CONSTRAINT "invocations_estimate_nonneg" CHECK ("invocations"."estimated_micros" >= 0)
);
--> statement-breakpoint
CREATE TABLE "actuals" (
	"tenant_id" text NOT NULL,
	"jti" text NOT NULL,
	"cost_micros" bigint,
	"tokens_in" bigint,
	"tokens_out" bigint,
	"source" text NOT NULL,
	"unavailable_reason" text,
	"body_hash" text NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "actuals_tenant_id_jti_pk" PRIMARY KEY("tenant_id","jti"),
	CONSTRAINT "actuals_source_known" CHECK ("actuals"."source" in ('harness-reported','api-usage','manual-meter','unavailable')),
	CONSTRAINT "actuals_cost_iff_available" CHECK (("actuals"."source" = 'unavailable') = ("actuals"."cost_micros" is null)),
	CONSTRAINT "actuals_unavailable_has_reason" CHECK ("actuals"."source" <> 'unavailable' or ("actuals"."unavailable_reason" is not null and btrim("actuals"."unavailable_reason") <> '')),
	CONSTRAINT "actuals_nonneg" CHECK (("actuals"."cost_micros" is null or "actuals"."cost_micros" >= 0) and ("actuals"."tokens_in" is null or "actuals"."tokens_in" >= 0) and ("actuals"."tokens_out" is null or "actuals"."tokens_out" >= 0))
);
--> statement-breakpoint
CREATE TABLE "receipts" (
	"id" bigserial PRIMARY KEY NOT NULL,
	"tenant_id" text NOT NULL,
	"kind" text NOT NULL,
	"subject" text NOT NULL,
	"jws" text NOT NULL,
	"kid" text NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "receipts_kind_known" CHECK ("receipts"."kind" in ('delegation.accepted','invocation.allowed','invocation.denied','actual.recorded','delegation.revoked'))
);
--> statement-breakpoint
ALTER TABLE "api_keys" ADD CONSTRAINT "api_keys_tenant_id_tenants_id_fk" FOREIGN KEY ("tenant_id") REFERENCES "public"."tenants"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "custodial_keys" ADD CONSTRAINT "custodial_keys_tenant_id_tenants_id_fk" FOREIGN KEY ("tenant_id") REFERENCES "public"."tenants"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "trusted_roots" ADD CONSTRAINT "trusted_roots_tenant_id_tenants_id_fk" FOREIGN KEY ("tenant_id") REFERENCES "public"."tenants"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "delegations" ADD CONSTRAINT "delegations_tenant_id_tenants_id_fk" FOREIGN KEY ("tenant_id") REFERENCES "public"."tenants"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "delegations" ADD CONSTRAINT "delegations_parent_fk" FOREIGN KEY ("tenant_id","parent_hash") REFERENCES "public"."delegations"("tenant_id","hash") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "denials" ADD CONSTRAINT "denials_tenant_id_tenants_id_fk" FOREIGN KEY ("tenant_id") REFERENCES "public"."tenants"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "invocations" ADD CONSTRAINT "invocations_tenant_id_tenants_id_fk" FOREIGN KEY ("tenant_id") REFERENCES "public"."tenants"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "invocations" ADD CONSTRAINT "invocations_leaf_fk" FOREIGN KEY ("tenant_id","leaf_hash") REFERENCES "public"."delegations"("tenant_id","hash") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "actuals" ADD CONSTRAINT "actuals_invocation_fk" FOREIGN KEY ("tenant_id","jti") REFERENCES "public"."invocations"("tenant_id","jti") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "receipts" ADD CONSTRAINT "receipts_tenant_id_tenants_id_fk" FOREIGN KEY ("tenant_id") REFERENCES "public"."tenants"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "receipts" ADD CONSTRAINT "receipts_kid_service_keys_kid_fk" FOREIGN KEY ("kid") REFERENCES "public"."service_keys"("kid") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
CREATE UNIQUE INDEX "api_keys_secret_hash_uq" ON "api_keys" USING btree ("secret_hash");--> statement-breakpoint
CREATE INDEX "api_keys_tenant_idx" ON "api_keys" USING btree ("tenant_id");--> statement-breakpoint
CREATE UNIQUE INDEX "service_keys_one_active_uq" ON "service_keys" USING btree ((true)) WHERE "service_keys"."retired_at" is null;--> statement-breakpoint
CREATE INDEX "trusted_roots_did_idx" ON "trusted_roots" USING btree ("did");--> statement-breakpoint
CREATE INDEX "delegations_children_idx" ON "delegations" USING btree ("tenant_id","parent_hash");--> statement-breakpoint
CREATE INDEX "delegations_ancestors_gin" ON "delegations" USING gin ("ancestors");--> statement-breakpoint
CREATE INDEX "denials_tenant_jti_idx" ON "denials" USING btree ("tenant_id","jti");--> statement-breakpoint
CREATE INDEX "denials_dr_chain_gin" ON "denials" USING gin ("dr_chain");--> statement-breakpoint
CREATE INDEX "invocations_leaf_recent_idx" ON "invocations" USING btree ("tenant_id","leaf_hash","created_at" DESC NULLS LAST);--> statement-breakpoint
CREATE INDEX "invocations_dr_chain_gin" ON "invocations" USING gin ("dr_chain");--> statement-breakpoint
CREATE INDEX "receipts_tenant_id_idx" ON "receipts" USING btree ("tenant_id","id");--> statement-breakpoint
CREATE INDEX "receipts_subject_idx" ON "receipts" USING btree ("tenant_id","subject");