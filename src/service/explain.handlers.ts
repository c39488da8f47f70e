/**
 * POST /v1/explain: the pure explain() over the tenant's stored chain, its
 * current tool catalog and rules (read fresh, as a dry run reads them), and the
 * runtime facts it would see (stored grants, NEAR_LIMIT, cost calibration). Reads only: nothing is counted, consumed or recorded.
 */
import type { OpenAPIHono } from '@hono/zod-openapi';
import { explainRoute, ExplainBody } from '../api/explain.js';
import { DEFAULT_COST_CALIBRATION } from '../protocol/approval-rules.js';
import { BatonError } from '../protocol/errors.js';
import { argOf, parsePolicy } from '../protocol/policy.js';
import { explain, NOTHING_DECLARED, type ChainStanding } from '../protocol/explain.js';
import { READ_SCOPES, TOOL_READ_SCOPES } from '../protocol/lists.js';
import { resolveTool } from '../protocol/tool-catalog.js';
import { estimateWithFloor } from '../protocol/tool-requirements.js';
import { findGrant } from '../store/approvals.js';
import { delegationsByHash, trustedRootsOf } from '../store/delegations.js';
import type { Delegation } from '../store/schema/index.js';
import { temporalStatus } from '../protocol/chain.js';
import { asMicros } from '../protocol/money.js';
import { boundToolServerOf, requireScope, tenantOf } from './auth.js';
import { newRouter, serve } from './router.js';
import { flaggedDelegation, nearLimit } from './tool-gate.js';
import { toolDocumentOf } from './tools.js';
import { toolCallsThisMinute } from '../store/tools.js';
import { parseJsonBody } from './validate.js';
import type { AppEnv, ServiceDeps } from './types.js';

/**
 * An explanation is of a call through a real chain: the root first, then each DR's own child. Any
 * list of stored hashes would otherwise be judged as one (reversed, unrelated, repeated), and its
 * answer would describe no call that could ever be made.
 */
function assertLinkedFromRoot(chain: readonly string[], parentOf: (hash: string) => string | null): void {
  chain.forEach((hash, i) => {
    const parent = parentOf(hash);
    const expected = i === 0 ? null : chain[i - 1]!;
    if (parent === expected) return;
    throw new BatonError('INVALID_REQUEST', {
      message:
        i === 0
          ? `dr_chain[0] (${hash}) is not a root: its parent is ${parent}. dr_chain lists a chain root first.`
          : `dr_chain[${i}] (${hash}) is not the child of dr_chain[${i - 1}]: its parent is ${parent ?? 'none (it is a root)'}.`,
      suggestion: 'Send the chain root to leaf, as GET /v1/delegations/{hash}/chain lists it.',
      details: { field: `dr_chain.${i}` },
    });
  });
}

/**
 * What verify would find in the way of any call through the chain now: the root's trust, each DR's
 * time window (by the service's clock), revocation and counters, read as its statement reads them.
 */
async function standingOf(deps: ServiceDeps, tenantId: string, chain: readonly Delegation[]): Promise<ChainStanding> {
  const now = deps.now();
  const roots = await trustedRootsOf(deps.store.db, tenantId);
  return {
    now,
    root_trusted: roots.has(chain[0]!.iss),
    delegations: chain.map((d) => ({
      time: temporalStatus(d.nbf, d.exp, now),
      nbf: d.nbf,
      exp: d.exp,
      revoked: d.revokedAt !== null,
      calls: d.maxCalls === null ? null : { used: d.callsUsed, max: d.maxCalls },
      spend: d.maxSpendMicros === null ? null : { reserved: asMicros(d.spendReservedMicros), max: asMicros(d.maxSpendMicros) },
    })),
  };
}

export function explainRoutes(deps: ServiceDeps): OpenAPIHono<AppEnv> {
  const app = newRouter();
  serve(app, explainRoute, requireScope(deps, ...TOOL_READ_SCOPES), async (c) => {
    const body = await parseJsonBody(c, deps.config.maxBodyBytes, ExplainBody);
    const tenantId = tenantOf(c.get('auth'));
    const db = deps.store.db;
    const stored = await delegationsByHash(db, tenantId, body.dr_chain);
    const missing = body.dr_chain.find((h) => !stored.has(h));
    if (missing !== undefined) throw new BatonError('NOT_FOUND', { message: `Delegation ${missing} is not stored for this tenant.` });
    assertLinkedFromRoot(body.dr_chain, (h) => stored.get(h)!.parentHash);
    const policies = body.dr_chain.map((h) => parsePolicy(stored.get(h)!.policy));
    // Fresh, as a dry run reads it: a node's cached copy may be a version behind (no statement re-checks it here).
    const doc = await toolDocumentOf(deps, tenantId, true);
    const grants = await Promise.all(body.dr_chain.map((h) => findGrant(db, tenantId, h)));
    // NEAR_LIMIT as verify reads it: with the call's estimate, raised to the tool's cost floor.
    const tool = resolveTool(doc?.catalog ?? NOTHING_DECLARED, argOf(body.args, 'tool'));
    const estimate = estimateWithFloor(argOf(body.args, 'estimated_cost_usd'), tool).micros ?? 0;
    // Usage, revocation, trust and tool activity are the tenant's records: shown to keys that read
    // them, which a key confined to one tool server does not (it reads no delegation).
    const auth = c.get('auth');
    const readsRecords =
      boundToolServerOf(auth) === null && auth.scopes.some((scope) => (READ_SCOPES as readonly string[]).includes(scope));
    const explanation = explain({
      args: body.args,
      policies,
      tools: doc,
      context: {
        // The chain's use and spend are the tenant's records too: a key that does not read them gets
        // both flags false unless it says otherwise (an estimate of its choosing would otherwise
        // bisect where NEAR_LIMIT turns, reading the spend of every server's calls to the micro-dollar).
        near_limit:
          body.context?.near_limit ?? (readsRecords && doc !== null && (await nearLimit(deps, tenantId, body.dr_chain, estimate))),
        // The same flag verify evaluates, with the same thresholds.
        cost_calibration:
          body.context?.cost_calibration ??
          (readsRecords &&
            doc !== null &&
            (await flaggedDelegation(deps, tenantId, body.dr_chain, doc.settings.cost_calibration ?? DEFAULT_COST_CALIBRATION)) !== null),
        // The tool's window this minute, as the statement counts it: the tenant's tool activity, so
        // only for keys that read the tenant's records (not an approve-only key), as the standing.
        tool_rate_limited:
          readsRecords &&
          tool.kind === 'declared' &&
          tool.tool.rate_limit_per_minute !== undefined &&
          (await toolCallsThisMinute(db, tenantId, tool.tool.name)) >= tool.tool.rate_limit_per_minute,
        // The stored grants decide, as the verify statement reads them: any not approved holds the
        // chain whatever the current catalog says, and a DR stored without one is never held.
        stored_grants: grants.map((g) =>
          g === undefined ? null : { dr_hash: g.drHash, status: g.status, explanation: g.explanation, catalog_version: g.catalogVersion },
        ),
        // An approve-only key cannot read a delegation: explain then judges the call alone.
        ...(readsRecords
          ? {
              standing: await standingOf(
                deps,
                tenantId,
                body.dr_chain.map((h) => stored.get(h)!),
              ),
            }
          : {}),
      },
    });
    return c.json(explanation, 200);
  });
  return app;
}
