-- Counter updates in place. Every allowed verify updates calls_used (and
-- spend_reserved_micros) on each metered DR of its chain: one row per link.
-- With full pages (fillfactor 100) the new row version rarely fits beside the
-- old one, so most updates went to another page and added entries to every
-- index of the table, up to 15 of them in delegations_ancestors_gin for a
-- deep chain. Free space on each page lets PostgreSQL keep the new version on
-- the same page (a HOT update: no index entries at all). It applies to pages
-- written from now on; an existing table gets it as its pages are rewritten.
ALTER TABLE "delegations" SET (fillfactor = 70);
--> statement-breakpoint
-- Generic plans inside the verify statement. Its queries look rows up by key
-- (api key id, trusted root, DR hashes of a chain, invocation jti), so a plan
-- made for one set of values is the plan for any other. With the default
-- plan_cache_mode PostgreSQL kept re-planning several of them for every call
-- (a custom plan costed for the exact array of chain hashes looks cheaper
-- than the generic one): about a fifth of its CPU per verify. The setting
-- applies to everything the batch calls (baton_verify_item, baton_denial_item,
-- baton_tool_gate, foreign-key checks) and ends with it. A CREATE OR REPLACE
-- of baton_verify_batch must keep this SET clause.
ALTER FUNCTION "baton_verify_batch"(timestamptz, jsonb) SET plan_cache_mode = force_generic_plan;
