CREATE TABLE "log_checkpoints" (
	"tenant_id" text NOT NULL,
	"tree_size" bigint NOT NULL,
	"root_hash" "bytea" NOT NULL,
	"note" text NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "log_checkpoints_tenant_id_tree_size_pk" PRIMARY KEY("tenant_id","tree_size"),
	CONSTRAINT "log_checkpoints_shape" CHECK (octet_length("log_checkpoints"."root_hash") = 32 and "log_checkpoints"."tree_size" > 0)
);
--> statement-breakpoint
CREATE TABLE "log_cosignatures" (
	"tenant_id" text NOT NULL,
	"tree_size" bigint NOT NULL,
	"witness_key" text NOT NULL,
	"line" text NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "log_cosignatures_tenant_id_tree_size_witness_key_pk" PRIMARY KEY("tenant_id","tree_size","witness_key")
);
--> statement-breakpoint
CREATE TABLE "log_hashes" (
	"tenant_id" text NOT NULL,
	"level" integer NOT NULL,
	"hash_index" bigint NOT NULL,
	"hash" "bytea" NOT NULL,
	CONSTRAINT "log_hashes_tenant_id_level_hash_index_pk" PRIMARY KEY("tenant_id","level","hash_index"),
	CONSTRAINT "log_hashes_shape" CHECK (octet_length("log_hashes"."hash") = 32 and "log_hashes"."level" >= 1 and "log_hashes"."hash_index" >= 0)
);
--> statement-breakpoint
CREATE TABLE "log_leaves" (
	"tenant_id" text NOT NULL,
	"leaf_index" bigint NOT NULL,
	"receipt_id" bigint NOT NULL,
	"leaf_hash" "bytea" NOT NULL,
	"queued_at" timestamp with time zone NOT NULL,
	"integrated_at" timestamp with time zone NOT NULL,
	CONSTRAINT "log_leaves_tenant_id_leaf_index_pk" PRIMARY KEY("tenant_id","leaf_index"),
	CONSTRAINT "log_leaves_receipt_uq" UNIQUE("receipt_id"),
	CONSTRAINT "log_leaves_hash_size" CHECK (octet_length("log_leaves"."leaf_hash") = 32 and "log_leaves"."leaf_index" >= 0)
);
--> statement-breakpoint
CREATE TABLE "log_pending" (
	"receipt_id" bigint PRIMARY KEY NOT NULL,
	"tenant_id" text NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
ALTER TABLE "log_checkpoints" ADD CONSTRAINT "log_checkpoints_tenant_id_tenants_id_fk" FOREIGN KEY ("tenant_id") REFERENCES "public"."tenants"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "log_cosignatures" ADD CONSTRAINT "log_cosignatures_tenant_id_tenants_id_fk" FOREIGN KEY ("tenant_id") REFERENCES "public"."tenants"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "log_hashes" ADD CONSTRAINT "log_hashes_tenant_id_tenants_id_fk" FOREIGN KEY ("tenant_id") REFERENCES "public"."tenants"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "log_leaves" ADD CONSTRAINT "log_leaves_tenant_id_tenants_id_fk" FOREIGN KEY ("tenant_id") REFERENCES "public"."tenants"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
-- Every receipt joins its tenant's log: the pending row is written by the
-- receipt's own INSERT, in its transaction, so a decision that commits is
-- always queued and one that rolls back never is, with no extra round trip
-- for the caller (this covers the verify statement too). clock_timestamp(),
-- not now(): the lag to inclusion is measured from the insert, not from the
-- start of a long transaction.
CREATE FUNCTION "log_queue_receipt"() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO "log_pending" ("receipt_id", "tenant_id", "created_at")
  VALUES (NEW."id", NEW."tenant_id", clock_timestamp());
  RETURN NULL;
END;
$$;
--> statement-breakpoint
CREATE TRIGGER "receipts_queue_for_log"
AFTER INSERT ON "receipts"
FOR EACH ROW EXECUTE FUNCTION "log_queue_receipt"();
--> statement-breakpoint
-- The log itself is evidence, kept append-only like receipts (0001): every
-- UPDATE, DELETE and TRUNCATE is refused, even one touching no rows.
CREATE FUNCTION "log_refuse_change"() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION '% is append-only: % refused', TG_TABLE_NAME, TG_OP
    USING ERRCODE = 'raise_exception',
          HINT = 'the transparency log only grows; never change or remove its rows';
END;
$$;
--> statement-breakpoint
CREATE TRIGGER "log_leaves_append_only" BEFORE UPDATE OR DELETE OR TRUNCATE ON "log_leaves"
FOR EACH STATEMENT EXECUTE FUNCTION "log_refuse_change"();
--> statement-breakpoint
CREATE TRIGGER "log_hashes_append_only" BEFORE UPDATE OR DELETE OR TRUNCATE ON "log_hashes"
FOR EACH STATEMENT EXECUTE FUNCTION "log_refuse_change"();
--> statement-breakpoint
CREATE TRIGGER "log_checkpoints_append_only" BEFORE UPDATE OR DELETE OR TRUNCATE ON "log_checkpoints"
FOR EACH STATEMENT EXECUTE FUNCTION "log_refuse_change"();
--> statement-breakpoint
CREATE TRIGGER "log_cosignatures_append_only" BEFORE UPDATE OR DELETE OR TRUNCATE ON "log_cosignatures"
FOR EACH STATEMENT EXECUTE FUNCTION "log_refuse_change"();
--> statement-breakpoint
-- Receipts written before this migration join the log too, oldest first.
INSERT INTO "log_pending" ("receipt_id", "tenant_id", "created_at")
SELECT "id", "tenant_id", "created_at" FROM "receipts" ORDER BY "id";
