-- Receipts are evidence of what the service did, so the database itself keeps
-- them append-only. A statement-level trigger refuses every UPDATE, DELETE and
-- TRUNCATE on receipts, even one that would touch no rows, so a misuse fails
-- loudly in tests instead of only when a matching row exists.
CREATE FUNCTION "receipts_refuse_change"() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'receipts are append-only: % refused', TG_OP
    USING ERRCODE = 'raise_exception',
          HINT = 'insert a new receipt instead of changing or removing one';
END;
$$;
--> statement-breakpoint
CREATE TRIGGER "receipts_append_only"
BEFORE UPDATE OR DELETE OR TRUNCATE ON "receipts"
FOR EACH STATEMENT EXECUTE FUNCTION "receipts_refuse_change"();
