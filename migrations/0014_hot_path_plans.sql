-- Plans the verify statement can keep. baton_verify_batch runs with generic
-- plans (0013), made once per connection, usually while the tables are
-- still small: then every index whose first column is tenant_id costs the
-- same as the primary key, and PostgreSQL took one of them. The replay
-- check (tenant_id, jti) read invocations through (tenant_id, tool,
-- created_at) and filtered every invocation of the tenant by jti; the
-- chain's DR lookups (tenant_id, hash) read delegations through (tenant_id,
-- iss, jti); the batch's lock query joined by scanning all of delegations.
-- Each verify then cost time proportional to what the tenant had stored, and
-- the plan stayed until an ANALYZE happened to replace it.
--
-- Two changes make the primary keys the only candidates:
--   * indexes serving other lookups lead with the column those lookups
--     filter on, or are partial, so none of them matches a condition on
--     tenant_id alone. The same rows stay covered: every query that used them
--     states equality on the leading columns (or the partial predicate);
--   * the batch (and everything it calls) runs with enable_seqscan off: its
--     queries look rows up by key, and a sequential scan is never the right
--     plan once a table has grown, whatever its size when the plan was made.
DROP INDEX IF EXISTS "invocations_tenant_tool_recent_idx";--> statement-breakpoint
CREATE INDEX "invocations_tool_recent_idx" ON "invocations" USING btree ("tool", "tenant_id", "created_at" DESC);--> statement-breakpoint
DROP INDEX IF EXISTS "invocations_leaf_recent_idx";--> statement-breakpoint
CREATE INDEX "invocations_leaf_recent_idx" ON "invocations" USING btree ("leaf_hash", "tenant_id", "created_at" DESC NULLS LAST);--> statement-breakpoint
-- The unfiltered decision list states "created_at IS NOT NULL" (always true)
-- to use this index; the replay check does not, so it cannot.
DROP INDEX IF EXISTS "invocations_tenant_recent_idx";--> statement-breakpoint
CREATE INDEX "invocations_tenant_recent_idx" ON "invocations" USING btree ("tenant_id", "created_at" DESC) WHERE "created_at" IS NOT NULL;--> statement-breakpoint
-- Same uniqueness (a set of columns), same name (errors report it), issuer first.
ALTER TABLE "delegations" DROP CONSTRAINT "delegations_tenant_iss_jti_uq";--> statement-breakpoint
ALTER TABLE "delegations" ADD CONSTRAINT "delegations_tenant_iss_jti_uq" UNIQUE ("iss", "jti", "tenant_id");--> statement-breakpoint
DROP INDEX IF EXISTS "delegations_children_idx";--> statement-breakpoint
CREATE INDEX "delegations_children_idx" ON "delegations" USING btree ("parent_hash", "tenant_id");--> statement-breakpoint
ALTER FUNCTION "baton_verify_batch"(timestamptz, jsonb) SET enable_seqscan = off;
