-- A service receipt's kind is checked by the trigger that already runs for
-- every inserted receipt, not by a CHECK constraint.
--
-- PostgreSQL rebuilds a table's CHECK expressions from their stored text
-- each time a statement that writes the table starts (stringToNode, then
-- ExecPrepareExpr), and the verify statement inserts one receipt per
-- verify, each INSERT a statement of its own. The kind list is a text array
-- constant, stored as one token per byte: in `bench:profile --perf-record`
-- (2-hop chains, 32 in flight) building the check constraints of the
-- statement's writes was 5.8% of PostgreSQL's CPU, and 3.3% with this one
-- gone.
--
-- Receipts are append-only (0001), so a kind can only be written by an
-- INSERT. The trigger raises what the constraint raised: SQLSTATE 23514,
-- constraint "receipts_kind_known", and the insert stores nothing. The list
-- is src/protocol/lists.ts's SERVICE_RECEIPT_KINDS; test/store/lists.test.ts
-- compares the two.
ALTER TABLE "receipts" DROP CONSTRAINT "receipts_kind_known";--> statement-breakpoint
CREATE OR REPLACE FUNCTION "log_queue_receipt"() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF NEW."kind" NOT IN ('delegation.accepted','invocation.allowed','invocation.denied','actual.recorded',
      'delegation.revoked','tools.catalog.published','approval.requested','approval.approved','approval.rejected',
      'grant.pending','grant.approved','grant.rejected') THEN
    RAISE EXCEPTION 'new row for relation "receipts" violates check constraint "receipts_kind_known"'
      USING ERRCODE = 'check_violation', CONSTRAINT = 'receipts_kind_known', TABLE = 'receipts', SCHEMA = TG_TABLE_SCHEMA;
  END IF;
  INSERT INTO "log_pending" ("receipt_id", "tenant_id", "created_at")
  VALUES (NEW."id", NEW."tenant_id", clock_timestamp());
  RETURN NULL;
END;
$$;
