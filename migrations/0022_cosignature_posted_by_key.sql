-- The API key that posted each witness cosignature. A checkpoint serves at
-- most 32 cosignatures, and any audit key can mint witness keys: one key could
-- fill every slot before the real witnesses post, and a client requiring them
-- could then get no cosigned proof for that checkpoint. With the poster
-- recorded, each key may post only a few cosignatures per checkpoint
-- (src/service/log.handlers.ts). Rows stored before this migration have none
-- (NULL) and count against no key.
ALTER TABLE "log_cosignatures" ADD COLUMN "posted_by_key" text;
