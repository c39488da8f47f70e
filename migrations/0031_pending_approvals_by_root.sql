-- Approvals waiting for a human are capped per chain root (50, APPROVALS_PENDING_LIMIT):
-- each distinct call a rule sends to a human opened one, without limit, so an
-- agent could bury the approvers and the list in calls nobody would approve.
-- Before opening one, the service counts those pending under the chain's root
-- (dr_chain[1]) under a transaction lock on that root; this index finds them.
CREATE INDEX "approvals_pending_by_root" ON "approvals" USING btree ("tenant_id",("dr_chain"[1])) WHERE "approvals"."status" = 'pending';
