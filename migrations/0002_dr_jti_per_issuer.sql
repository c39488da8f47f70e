-- A DR jti is unique per issuer within a tenant (DRS), no longer per tenant:
-- otherwise a holder who learns an unstored DR's jti could store its own DR
-- under it first and block that DR for good. Existing rows already satisfy
-- the wider key, so the swap cannot fail.
ALTER TABLE "delegations" DROP CONSTRAINT "delegations_tenant_jti_uq";--> statement-breakpoint
ALTER TABLE "delegations" ADD CONSTRAINT "delegations_tenant_iss_jti_uq" UNIQUE("tenant_id","iss","jti");