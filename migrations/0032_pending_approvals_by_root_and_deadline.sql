-- The cap's count (0031) reads only approvals still inside their deadline, but
-- rows past it stay 'pending' until someone retries that call or lists the
-- approvals. An agent could leave 50 such rows every 15 minutes under one root,
-- and every later ask would read them all while holding the root's lock. With
-- the deadline in the index, the count reads only the live ones.
DROP INDEX IF EXISTS "approvals_pending_by_root";
--> statement-breakpoint
CREATE INDEX "approvals_pending_by_root" ON "approvals" USING btree ("tenant_id",("dr_chain"[1]),"expires_at") WHERE "approvals"."status" = 'pending';
