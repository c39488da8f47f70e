-- The API key whose verify asked for an approval, so that key cannot decide it
-- (SELF_APPROVAL). Until now only the invoking agent's DID was kept
-- (requested_by), which a decision by API key never equals: one key with both
-- the verify and the approve scope could approve the calls it asked about
-- itself, though the route's contract says it may not. Approvals requested
-- before this migration have no key recorded (NULL) and keep the DID check only.
ALTER TABLE "approvals" ADD COLUMN "requested_by_key" text;
