-- Invocations, service receipts and denials stored as they arrive: no
-- compression attempt and no TOAST table for rows up to a page.
-- A row over about 2 KB (an invocation or a receipt through a 16-hop chain:
-- the JWS and the chain's hashes) made PostgreSQL try to compress its largest
-- values with pglz, which fails on base64 and hex (they do not shrink by the
-- 25% it asks), and then move the JWS to the table's TOAST relation: a second
-- heap insert and a second index insert for every verify. The two inserts of
-- a 16-hop allow took 1.15 and 0.81 ms per verify; with the target at a full
-- page, 0.48-0.61 ms (pg_stat_statements, bench:profile --depth 16).
-- Larger rows are still compressed and moved out, as before.
ALTER TABLE "invocations" SET (toast_tuple_target = 8160);--> statement-breakpoint
ALTER TABLE "receipts" SET (toast_tuple_target = 8160);--> statement-breakpoint
ALTER TABLE "denials" SET (toast_tuple_target = 8160);
