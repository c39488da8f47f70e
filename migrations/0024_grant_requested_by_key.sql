-- The API key that submitted a delegation held for the lethal trifecta, so that
-- key cannot decide its grant (SELF_APPROVAL), as call approvals already refuse
-- the key whose verify asked (0021_approval_requested_by_key). Until now one
-- key with both the issue and the approve scope could issue a trifecta
-- delegation and approve its own hold. NULL when the record came without an API
-- key (a keyless sub-delegation submission, signed by an agent), and on grants
-- held before this migration: those keep today's behaviour, any approver key.
ALTER TABLE "grant_approvals" ADD COLUMN "requested_by_key" text;
