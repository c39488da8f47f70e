-- A lone verify naming an approval bounds its wait on it by what is left of its deadline.
--
-- 0036 sets lock_timeout again from what is left of the deadline after a
-- statement's keys and after a batch's chain locks. A lone item locks its chain
-- inside its item, so its wait there was bounded, but its next one was not
-- re-bounded: waiting on its chain's DR (held by an actuals report or a
-- revocation) and then on the approval it names (held by a decision or the
-- expiry sweep), it kept its chain's locks up to twice its deadline before the
-- commit check refused it. Such an item now takes the batch's chain-lock pass
-- first (its own lock pass then finds the rows already held), and the timeout
-- is set again after it. A lone item naming no approval waits on nothing after
-- its chain (its jti and rate window are keyed, and only verify statements take
-- those rows), so the usual 1-in-flight verify is unchanged. The function is
-- 0036's otherwise.
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
  -- lone item locks its own chain in that order itself, so it skips these two queries, unless it
  -- names an approval: its wait on that row comes after its chain's, and must be bounded by what
  -- the chain's wait left (0038).
  IF jsonb_array_length(p_items) > 1
     OR (p_items->0->>'k' = 'a' AND p_items->0->'gate'->>'a' IS NOT NULL
         AND NOT coalesce((p_items->0->'gate'->>'d')::boolean, false)) THEN
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
