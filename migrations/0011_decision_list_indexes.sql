-- GET /v1/invocations lists a tenant's verify decisions (allowed invocations
-- and denials) newest first, filtered by tool, denial code, time and DR
-- subtree. Each list reads its table in (tenant, created_at) order, by tool or
-- by code where given; the subtree filter uses the GIN indexes on dr_chain
-- of 0000.
CREATE INDEX IF NOT EXISTS "invocations_tenant_recent_idx" ON "invocations" USING btree ("tenant_id", "created_at" DESC);--> statement-breakpoint
CREATE INDEX IF NOT EXISTS "invocations_tenant_tool_recent_idx" ON "invocations" USING btree ("tenant_id", "tool", "created_at" DESC);--> statement-breakpoint
CREATE INDEX IF NOT EXISTS "denials_tenant_recent_idx" ON "denials" USING btree ("tenant_id", "created_at" DESC);--> statement-breakpoint
CREATE INDEX IF NOT EXISTS "denials_tenant_code_recent_idx" ON "denials" USING btree ("tenant_id", "code", "created_at" DESC);
