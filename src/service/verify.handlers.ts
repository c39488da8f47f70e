/**
 * POST /v1/verify and DRS-compatible POST /verify: the hot path a tool
 * server calls before every tool execution.
 *
 * Blocks A-F run in the pure protocol (verifyChain) over the bundle, with
 * DRs resolved from the store when sent by reference; block G (revocation
 * re-checked, replay, call counters, budgets) runs in one transaction. A
 * storage failure surfaces as 503 from the error mapper: never an allow.
 */
import { z } from 'zod';
import {
  deny,
  verifyChain,
  type ChainContext,
  type ChainDecision,
  type DecisionError,
  type VerifiedDelegation,
} from '../protocol/chain.js';
import { decodeBase64url } from '../protocol/base64url.js';
import { BatonError, blockOf, type ErrorCode, type Violation } from '../protocol/errors.js';
import { utf8Decode } from '../protocol/jcs.js';
import { invocationAmountProblem, microsToUsd, saturatingMicros, usdToMicros, type Micros } from '../protocol/money.js';
import { delegationsByHash, runtimeLimits, trustedRootsOf } from '../store/delegations.js';
import { countCallsAtomically, predictCount, type ChainRuntimeState, type CountOutcome } from '../store/runtime.js';
import { denials, type Delegation } from '../store/schema/index.js';
import type { AuthContext, ServiceDeps } from './types.js';
import { parseStrictJson } from './body.js';
import { metrics } from './metrics.js';
import { parseRequest } from './validate.js';
import { checkSubmission, submitDelegations } from './delegations.handlers.js';
import { recordReceipt, signReceipt } from './receipts.js';

export const VerifyRequestSchema = z.looseObject({
  bundle_version: z.unknown().optional(),
  invocation: z.unknown().optional(),
  receipts: z.unknown().optional(),
  dry_run: z.boolean().optional(),
  body: z.unknown().optional(),
  require_binding: z.boolean().optional(),
});

export type VerifyRequest = z.infer<typeof VerifyRequestSchema>;

export interface Counter {
  readonly dr: string;
  readonly calls_used: number;
  readonly max_calls: number;
}

export interface Warning {
  readonly code: 'NEAR_LIMIT';
  readonly dr: string;
  readonly field: 'max_calls' | 'max_spend_usd';
  readonly used: number;
  readonly limit: number;
  readonly message: string;
}

export type VerifyResponse =
  | {
      readonly status: 200;
      readonly body: {
        valid: true;
        dry_run: boolean;
        context: ChainContext;
        invocation_id: string;
        binding: ChainContext['binding'];
        counters: Counter[];
        warnings: Warning[];
        receipt: { id: number; kid: string; jws: string } | null;
      };
    }
  | { readonly status: 403; readonly body: { valid: false; error: DecisionError; violations: readonly Violation[] } };

/** Fraction of a ceiling past which NEAR_LIMIT is reported. */
const NEAR_LIMIT = 0.8;

/** The bundle comes in the body, or (DRS) base64url JSON in the X-DRS-Bundle header. */
export function bundleFrom(req: VerifyRequest, drsHeader: string | undefined): unknown {
  if (req.invocation !== undefined || drsHeader === undefined) {
    return { bundle_version: req.bundle_version, invocation: req.invocation, receipts: req.receipts };
  }
  try {
    return parseStrictJson(utf8Decode(decodeBase64url(drsHeader.trim(), 'X-DRS-Bundle header')));
  } catch {
    throw new BatonError('INVALID_REQUEST', {
      message: 'The X-DRS-Bundle header is not base64url-encoded bundle JSON.',
      suggestion: 'Send the bundle in the JSON body, or base64url(JSON bundle) in X-DRS-Bundle.',
    });
  }
}

export async function verifyInvocation(
  deps: ServiceDeps,
  auth: AuthContext,
  tenantId: string,
  req: VerifyRequest,
  bundle: unknown,
): Promise<VerifyResponse> {
  const db = deps.store.db;
  const now = deps.now();
  const dryRun = req.dry_run === true;

  const hashes = referencedHashes(bundle);
  const [stored, roots] = await Promise.all([delegationsByHash(db, tenantId, hashes), trustedRootsOf(db, tenantId)]);
  const decision = verifyChain(bundle, {
    now,
    trustedRoots: roots,
    maxDepth: deps.config.maxChainDepth,
    invocationMaxAgeSeconds: deps.config.invocationMaxAgeSeconds,
    clockSkewSeconds: deps.config.clockSkewSeconds,
    resolveReceipt: (h) => stored.get(h)?.jws,
    isRevoked: (h) => stored.get(h)?.revokedAt != null,
    cache: deps.drCache,
    ...(req.body !== undefined ? { body: req.body } : {}),
    ...(req.require_binding ? { requireBinding: true } : {}),
  });
  if (!decision.valid) return refuse(deps, auth, tenantId, decision, dryRun);

  const inv = decision.invocation.payload;
  if (auth.toolServer !== null && inv.tool_server !== auth.toolServer) {
    return refuse(
      deps,
      auth,
      tenantId,
      deny(
        [
          {
            code: 'TOOL_SERVER_MISMATCH',
            field: 'invocation.tool_server',
            required: auth.toolServer,
            actual: inv.tool_server,
            message: `This API key verifies only for tool server ${auth.toolServer}; the invocation names ${inv.tool_server}.`,
          },
        ],
        { invocation: decision.invocation, dr_chain: inv.dr_chain },
      ),
      dryRun,
    );
  }

  // DRS clients never pre-register: a verified chain with unknown DRs is stored now.
  // A dry run stores nothing but makes the same checks, so it refuses what storing would.
  if (decision.delegations.some((d) => !stored.has(d.hash))) {
    const jwsList = decision.delegations.map((d) => d.jws);
    await (dryRun ? checkSubmission(deps, tenantId, jwsList) : submitDelegations(deps, tenantId, jwsList));
  }

  const toCount = {
    tenantId,
    jti: inv.jti,
    hash: decision.invocation.hash,
    jws: decision.invocation.jws,
    drChain: inv.dr_chain,
    tool: decision.context.tool,
    estimatedMicros: estimatedMicros(inv.args),
    callerKeyId: auth.keyId,
  };
  const receipt = dryRun
    ? undefined
    : signReceipt(deps.signer, {
        tenantId,
        kind: 'invocation.allowed',
        subject: inv.jti,
        now,
        data: {
          invocation_hash: decision.invocation.hash,
          dr_chain: inv.dr_chain,
          tool: decision.context.tool,
          tool_server: inv.tool_server,
          caller_key_id: auth.keyId,
          estimated_micros: toCount.estimatedMicros,
        },
      });
  const outcome = receipt
    ? await countCallsAtomically(db, toCount, receipt, storedState(inv.dr_chain, stored))
    : await predictCount(db, toCount, unstoredState(decision.delegations, stored));
  if (!outcome.ok) {
    return refuse(
      deps,
      auth,
      tenantId,
      deny([runtimeViolation(outcome, decision)], { invocation: decision.invocation, dr_chain: inv.dr_chain }),
      dryRun,
    );
  }
  if (!receipt) return allow(decision, outcome.state, null, true, toCount.estimatedMicros);
  if (outcome.receiptId === undefined) throw new BatonError('INTERNAL', { message: 'A counted invocation came back without its receipt.' });
  metrics.observeDecision('allow', 'ALLOWED');
  return allow(decision, outcome.state, { id: outcome.receiptId, kid: receipt.kid, jws: receipt.jws }, false, toCount.estimatedMicros);
}

/** The chain's runtime rows from the pre-read, or undefined when some were not stored then. */
function storedState(chain: readonly string[], stored: ReadonlyMap<string, Delegation>): ChainRuntimeState[] | undefined {
  const out: ChainRuntimeState[] = [];
  for (const hash of chain) {
    const row = stored.get(hash);
    if (!row) return undefined;
    out.push({
      hash,
      depth: row.depth,
      revoked: row.revokedAt !== null,
      callsUsed: row.callsUsed,
      maxCalls: row.maxCalls,
      spendReservedMicros: row.spendReservedMicros,
      maxSpendMicros: row.maxSpendMicros,
    });
  }
  return out;
}

/** Counters as they would start for verified DRs the store does not hold yet. */
function unstoredState(drs: readonly VerifiedDelegation[], stored: ReadonlyMap<string, unknown>): ChainRuntimeState[] {
  return drs.flatMap((d, depth) =>
    stored.has(d.hash)
      ? []
      : [
          {
            hash: d.hash,
            depth,
            revoked: false,
            callsUsed: 0,
            spendReservedMicros: 0,
            ...runtimeLimits(d.payload.policy),
          },
        ],
  );
}

/** Hashes the bundle's invocation names, read leniently: verifyChain judges the shape. */
function referencedHashes(bundle: unknown): string[] {
  const invocation = (bundle as { invocation?: unknown } | null)?.invocation;
  if (typeof invocation !== 'string') return [];
  try {
    const payload = JSON.parse(Buffer.from(invocation.split('.')[1] ?? '', 'base64url').toString('utf8')) as { dr_chain?: unknown };
    return Array.isArray(payload.dr_chain) ? payload.dr_chain.filter((h): h is string => typeof h === 'string').slice(0, 64) : [];
  } catch {
    return [];
  }
}

/**
 * Declared estimate in micro-dollars, rounded up. Policy evaluation has
 * already denied every unusable estimate (and a missing one under any cost
 * ceiling or budget), so absent means 0 only where nothing is budgeted; an
 * unusable value reaching here is a bug and must never count as free.
 */
function estimatedMicros(args: Record<string, unknown>): number {
  const v = Object.hasOwn(args, 'estimated_cost_usd') ? args['estimated_cost_usd'] : undefined;
  if (v === undefined) return 0;
  if (invocationAmountProblem(v) !== undefined) {
    throw new BatonError('INTERNAL', { message: 'An unusable args.estimated_cost_usd passed policy evaluation.' });
  }
  return usdToMicros(v as number, 'ceil');
}

function runtimeViolation(outcome: Exclude<CountOutcome, { ok: true }>, decision: Extract<ChainDecision, { valid: true }>): Violation {
  const indexOf = (hash: string) => decision.delegations.findIndex((d) => d.hash === hash);
  switch (outcome.reason) {
    case 'REPLAY_DETECTED':
      return {
        code: 'REPLAY_DETECTED',
        field: 'invocation.jti',
        actual: decision.invocation.payload.jti,
        message: `Invocation ${decision.invocation.payload.jti} has already been used.`,
      };
    case 'RECEIPT_REVOKED':
    case 'BUNDLE_INCOMPLETE':
      return {
        code: outcome.reason,
        dr_index: indexOf(outcome.hash),
        dr_hash: outcome.hash,
        field: 'status',
        actual: outcome.reason === 'RECEIPT_REVOKED' ? 'revoked' : 'missing',
      };
    case 'CALLS_EXHAUSTED':
      return {
        code: 'CALLS_EXHAUSTED',
        dr_index: indexOf(outcome.state.hash),
        dr_hash: outcome.state.hash,
        field: 'policy.max_calls',
        required: `< ${outcome.state.maxCalls}`,
        actual: outcome.state.callsUsed,
        message: `Delegation record ${outcome.state.hash} has used all ${outcome.state.maxCalls} of its max_calls.`,
      };
    case 'BUDGET_EXHAUSTED': {
      const s = outcome.state;
      return {
        code: 'BUDGET_EXHAUSTED',
        dr_index: indexOf(s.hash),
        dr_hash: s.hash,
        field: 'policy.max_spend_usd',
        required: microsToUsd((s.maxSpendMicros ?? 0) as Micros),
        actual: microsToUsd(saturatingMicros(s.spendReservedMicros).micros),
        message: `Metered spend plus pending estimates under ${s.hash} would pass its max_spend_usd of ${microsToUsd((s.maxSpendMicros ?? 0) as Micros)}.`,
      };
    }
  }
}

function allow(
  decision: Extract<ChainDecision, { valid: true }>,
  state: readonly ChainRuntimeState[],
  receipt: { id: number; kid: string; jws: string } | null,
  dryRun: boolean,
  estimate: number,
): VerifyResponse {
  const counters: Counter[] = state
    .filter((s) => s.maxCalls !== null)
    .map((s) => ({ dr: s.hash, calls_used: s.callsUsed, max_calls: s.maxCalls! }));
  const warnings: Warning[] = [];
  for (const s of state) {
    // A dry run reports what the call would use, without using it.
    const calls = dryRun ? s.callsUsed + 1 : s.callsUsed;
    if (s.maxCalls !== null && s.maxCalls > 0 && calls / s.maxCalls > NEAR_LIMIT) {
      warnings.push({
        code: 'NEAR_LIMIT',
        dr: s.hash,
        field: 'max_calls',
        used: calls,
        limit: s.maxCalls,
        message: `${calls} of ${s.maxCalls} calls used under ${s.hash}.`,
      });
    }
    const spend = dryRun ? s.spendReservedMicros + estimate : s.spendReservedMicros;
    if (s.maxSpendMicros !== null && s.maxSpendMicros > 0 && spend / s.maxSpendMicros > NEAR_LIMIT) {
      warnings.push({
        code: 'NEAR_LIMIT',
        dr: s.hash,
        field: 'max_spend_usd',
        used: microsToUsd(spend as Micros),
        limit: microsToUsd(s.maxSpendMicros as Micros),
        message: `Spend of ${microsToUsd(spend as Micros)} USD (metered plus pending estimates) is past 80% of the ${microsToUsd(s.maxSpendMicros as Micros)} USD budget under ${s.hash}.`,
      });
    }
  }
  return {
    status: 200,
    body: {
      valid: true,
      dry_run: dryRun,
      context: decision.context,
      invocation_id: decision.invocation.payload.jti,
      binding: decision.context.binding,
      counters,
      warnings,
      receipt,
    },
  };
}

/** A deny: recorded for auditors (never consuming the jti), unless it was a dry run. */
async function refuse(
  deps: ServiceDeps,
  auth: AuthContext,
  tenantId: string,
  decision: Extract<ChainDecision, { valid: false }>,
  dryRun: boolean,
): Promise<VerifyResponse> {
  metrics.observeDecision('deny', decision.error.code);
  if (!dryRun) {
    const db = deps.store.db;
    const inv = decision.invocation;
    await db.transaction(async (tx) => {
      await tx.insert(denials).values({
        tenantId,
        jti: inv?.payload.jti ?? null,
        invocationHash: inv?.hash ?? null,
        code: decision.error.code,
        block: blockOf(decision.error.code as ErrorCode) ?? null,
        drChain: [...(decision.dr_chain ?? [])],
        callerKeyId: auth.keyId,
        violations: storableJson(decision.violations) as Record<string, unknown>[],
      });
      await recordReceipt(tx, deps.signer, {
        tenantId,
        kind: 'invocation.denied',
        subject: inv?.payload.jti ?? inv?.hash ?? 'unreadable-invocation',
        now: deps.now(),
        data: { code: decision.error.code, block: decision.error.block, dr_chain: decision.dr_chain ?? [], caller_key_id: auth.keyId },
      });
    });
  }
  return { status: 403, body: { valid: false, error: decision.error, violations: decision.violations } };
}

const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g;

/**
 * Violations echo what the caller sent; jsonb cannot hold U+0000 or unpaired
 * surrogates, and a denial must be recorded whatever it echoes, so replace
 * those (defence in depth: the strict JSON readers refuse them earlier).
 */
function storableJson(value: unknown, depth = 0): unknown {
  if (typeof value === 'string') return value.replace(LONE_SURROGATE, '\ufffd').replaceAll('\u0000', '\ufffd');
  if (depth > 32 || value === null || typeof value !== 'object') return value;
  if (Array.isArray(value)) return value.map((v) => storableJson(v, depth + 1));
  return Object.fromEntries(Object.entries(value).map(([k, v]) => [storableJson(k, depth + 1) as string, storableJson(v, depth + 1)]));
}

export { parseRequest };
