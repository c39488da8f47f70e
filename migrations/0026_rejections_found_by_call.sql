-- A call that needs approval looks for a standing rejection of itself (the same
-- binding, rejected, its deadline not passed) before it opens a new approval,
-- on every such verify and dry run. The only index on binding covers live
-- approvals (pending, approved), so the lookup filtered every rejection the
-- tenant ever had, and rejected rows are kept for auditors. This partial index
-- finds the call's rejections by key.
CREATE INDEX "approvals_rejected_by_call" ON "approvals" ("tenant_id", "binding", "expires_at") WHERE "status" = 'rejected';
