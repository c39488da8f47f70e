-- Approval lists are read a page at a time, oldest first, by (created_at, id)
-- after a cursor (stop 34). Without an index in that order, each page of an
-- unfiltered list sorted every approval the tenant ever had, and a status
-- filter still sorted its matches by id: an agent that opens many approvals
-- made every page slower. Both orders now have an index, so a page reads its
-- own rows and stops.
DROP INDEX IF EXISTS "approvals_tenant_status_idx";
--> statement-breakpoint
CREATE INDEX "approvals_tenant_status_idx" ON "approvals" USING btree ("tenant_id","status","created_at","id");
--> statement-breakpoint
CREATE INDEX "approvals_tenant_created_idx" ON "approvals" USING btree ("tenant_id","created_at","id");
