-- Every lock a verify statement may wait on, in one global order.
--
-- 0004 and 0020 lock the DRs of a batch's chains in one order, so batches never
-- deadlock on them. Three more waits stayed in item order, found by an outside
-- probe of group commit: a rate-limited tool's window row (its upsert), a named
-- approval (FOR UPDATE), and an invocation's jti (its insert waits on another
-- transaction's uncommitted insert of the same jti). Two batches holding items
-- for tools A and B (or jtis X and Y) in opposite orders deadlocked: honest
-- traffic on two rate-limited tools lost most of its throughput to 1 s
-- deadlock_timeout stalls, and a tenant sending one set of invocations to two
-- nodes in opposite orders held every co-batched honest verify for a second.
--
-- The statement now takes a transaction-level advisory lock per jti, named
-- approval and rate-limited tool of its allow items, sorted by key, before any
-- row lock (a lone item too, which locks its own chain inside its item). A
-- batch then waits only where it holds no row; inside its items it meets none
-- of these rows held by another batch. Keys are 64-bit hashes: a collision
-- makes two batches take turns, never deadlock. Dry runs lock nothing (0028).
-- lock_timeout is set again from what is left of the deadline after the keys
-- and after the chains' locks (it bounds each wait, not their sum: a statement
-- held its locks well past its deadline before its commit check refused it).
-- baton_lock_waits_until does the deadline check and the setting, for all three.
-- The function is 0020's otherwise, with 0033's jit = off kept.
-- Refuses a statement past its deadline (57014) and bounds its next lock waits by what is left.
CREATE OR REPLACE FUNCTION "baton_lock_waits_until"("p_deadline" timestamptz, "p_where" text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM set_config('lock_timeout',
    greatest(1, ceil(extract(epoch FROM baton_deadline_check(p_deadline, p_where)) * 1000))::bigint::text, true);
END;
$$;
--> statement-breakpoint
CREATE OR REPLACE FUNCTION "baton_verify_batch"("p_deadline" timestamptz, "p_items" jsonb) RETURNS jsonb
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET jit = off
AS $$
DECLARE
  item jsonb;
  answer jsonb;
  answers jsonb := '[]';
BEGIN
  -- Lock waits end at the deadline too (55P03, also a 503).
  PERFORM baton_lock_waits_until(p_deadline, 'before the statement ran');

  -- The rows an item may wait on besides its chain's DRs, keyed and locked first, in one order
  -- (sorted keys), by every statement, a lone item's too: its jti (the invocation's insert waits
  -- on another's uncommitted insert of it), a named approval (locked FOR UPDATE) and a
  -- rate-limited tool's windows (the upsert). Held to the commit, a key another statement holds
  -- makes this one wait here, before it holds any row: no statement then waits inside its items
  -- on a row another holds while that one waits on a row it holds.
  --
  -- A lone item with no gate has one key: taken as it is (the usual 1-in-flight verify).
  IF jsonb_array_length(p_items) = 1 AND p_items->0->'gate'->>'a' IS NULL AND p_items->0->'gate'->>'rl' IS NULL THEN
    IF p_items->0->>'k' = 'a' THEN
      PERFORM pg_advisory_xact_lock(hashtextextended('baton:verify:jti:' || (p_items->0->>'t') || ':' || (p_items->0->>'jti'), 0));
    END IF;
  ELSE
    PERFORM pg_advisory_xact_lock(k) FROM unnest(ARRAY(
      SELECT DISTINCT hashtextextended(x, 0)
        FROM jsonb_array_elements(p_items) i
       CROSS JOIN LATERAL (VALUES
         ('baton:verify:jti:' || (i->>'t') || ':' || (i->>'jti')),
         (CASE WHEN i->'gate'->>'a' IS NOT NULL AND NOT coalesce((i->'gate'->>'d')::boolean, false)
               THEN 'baton:verify:approval:' || (i->>'t') || ':' || (i->'gate'->>'a') END),
         (CASE WHEN i->'gate'->>'rl' IS NOT NULL AND NOT coalesce((i->'gate'->>'d')::boolean, false)
               THEN 'baton:verify:rate:' || (i->>'t') || ':' || (i->'gate'->>'t') END)) v(x)
       WHERE i->>'k' = 'a' AND x IS NOT NULL
       ORDER BY 1)) AS k;
  END IF;
  -- lock_timeout bounds each wait, not their sum: what is left of the deadline bounds the next.
  PERFORM baton_lock_waits_until(p_deadline, 'while its keys were taken');

  -- Every DR any allow of the batch names, locked in the one global order (0004, 0020), one key
  -- probe each in that order: a DR's depth is its place in its chain (the items check it). A
  -- lone item locks its own chain in that order itself, so it skips these two queries.
  IF jsonb_array_length(p_items) > 1 THEN
    -- A pass no allow of the batch needs is skipped: it would lock nothing (0017's hint).
    IF EXISTS (SELECT 1 FROM jsonb_array_elements(p_items) i WHERE i->>'k' = 'a' AND i->>'mt' IS DISTINCT FROM 'all') THEN
      PERFORM 1 FROM (SELECT DISTINCT c.pos - 1 AS depth, c.hash, i->>'t' AS tenant
                        FROM jsonb_array_elements(p_items) i, jsonb_array_elements_text(i->'chain') WITH ORDINALITY c(hash, pos)
                       WHERE i->>'k' = 'a'
                       ORDER BY 1, 2, 3) w
       CROSS JOIN LATERAL (SELECT 1 FROM delegations d
                            WHERE d.tenant_id = w.tenant AND d.hash = w.hash AND (d.max_calls IS NULL AND d.max_spend_micros IS NULL)
                              FOR SHARE) l;
    END IF;
    IF EXISTS (SELECT 1 FROM jsonb_array_elements(p_items) i WHERE i->>'k' = 'a' AND i->>'mt' IS DISTINCT FROM 'none') THEN
      PERFORM 1 FROM (SELECT DISTINCT c.pos - 1 AS depth, c.hash, i->>'t' AS tenant
                        FROM jsonb_array_elements(p_items) i, jsonb_array_elements_text(i->'chain') WITH ORDINALITY c(hash, pos)
                       WHERE i->>'k' = 'a'
                       ORDER BY 1, 2, 3) w
       CROSS JOIN LATERAL (SELECT 1 FROM delegations d
                            WHERE d.tenant_id = w.tenant AND d.hash = w.hash AND (d.max_calls IS NOT NULL OR d.max_spend_micros IS NOT NULL)
                              FOR NO KEY UPDATE) l;
    END IF;
    PERFORM baton_lock_waits_until(p_deadline, 'while its chains were locked');
  END IF;

  FOR item IN SELECT value FROM jsonb_array_elements(p_items)
  LOOP
    IF item->>'k' = 'a' THEN
      answer := baton_verify_item(item->>'t', item->>'key', item->>'root',
        ARRAY(SELECT jsonb_array_elements_text(item->'chain')), item->>'jti', item->>'hash', item->>'jws',
        item->>'tool', (item->>'est')::bigint, item->>'rjws', item->>'rkid', item->'gate', item->>'mt');
      IF item ? 'deny' AND answer->>'o' = item->'deny'->>'code' AND answer->>'h' = item->'deny'->>'h' THEN
        answer := answer || jsonb_build_object('denied', baton_denial_item(item->>'t', item->>'key', item->>'jti', item->>'hash',
          answer->>'o', 'G', ARRAY(SELECT jsonb_array_elements_text(item->'chain')),
          jsonb_set(item->'deny'->'v', '{0,actual}', answer->'c'), item->>'jti', item->'deny'->>'rjws', item->'deny'->>'rkid'));
      END IF;
    ELSE
      answer := baton_denial_item(item->>'t', item->>'key', item->>'jti', item->>'ih', item->>'code', item->>'block',
        ARRAY(SELECT jsonb_array_elements_text(item->'chain')), item->'v', item->>'subj', item->>'rjws', item->>'rkid');
    END IF;
    answers := answers || jsonb_build_array(answer);
  END LOOP;

  PERFORM baton_deadline_check(p_deadline, 'before commit');
  RETURN answers;
END;
$$;
