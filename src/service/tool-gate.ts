/**
 * The tool gate of /v1/verify: what a call needs because of what its tool IS
 * (from the tenant's catalog, never from the agent's args), the tenant's
 * approval rules, and the inputs of the in-statement half (baton_tool_gate,
 * migration 0005_tool_gate) that re-checks everything mutable: the catalog
 * version, pending grants, the approval being spent, the tool's rate.
 *
 * A tenant that has never published a catalog has no gate: verify behaves as
 * before. Once it has one, every decision records the version it used.
 */
import type { ChainDecision } from '../protocol/chain.js';
import { ERROR_TABLE, type Violation } from '../protocol/errors.js';
import { approvalBinding } from '../protocol/approval.js';
import { canonicalJson, type JsonValue } from '../protocol/jcs.js';
import {
  DEFAULT_COST_CALIBRATION,
  evaluateRules,
  type CostCalibrationSettings,
  type RuleOutcome,
  type TenantToolSettings,
} from '../protocol/approval-rules.js';
import { argOf, effectiveAllowedTools } from '../protocol/policy.js';
import { resolveTool } from '../protocol/tool-catalog.js';
import { checkToolRequirements, estimateWithFloor } from '../protocol/tool-requirements.js';
import { detectTrifecta, explainTrifecta } from '../protocol/trifecta.js';
import { findApproval, findLiveApproval, findStandingRejection, recordAskingKey, unapprovedGrantInChain } from '../store/approvals.js';
import { readChainState, type ToolGateParams, type ToolGateRefusal } from '../store/runtime.js';
import { costCalibrationFlagged } from '../store/tools.js';
import {
  approvalJson,
  CATALOG_CHANGED,
  INVOCATION_STORED,
  MAX_PENDING_APPROVALS_PER_ROOT,
  pendingLimitFor,
  requestApproval,
  type ChainEnded,
  type PendingLimit,
  type ApprovalJson,
  type ApprovalRequest,
} from './approvals.js';
import type { ApprovalRow } from '../store/schema/index.js';
import { hotPathCacheOf } from './hot-cache.js';
import { forgetToolDocument, toolDocumentOf } from './tools.js';
import type { ServiceDeps } from './types.js';

type Verified = Extract<ChainDecision, { valid: true }>;

export type ToolGate =
  /** The tenant has no catalog (the statement checks that is still so: 0027): nothing to add. */
  | { readonly kind: 'none' }
  | {
      readonly kind: 'refuse';
      readonly catalogVersion: number;
      readonly violations: readonly Violation[];
      readonly approval?: ApprovalJson;
      /** What to do, where the first violation's own advice would mislead (see the held grant below). */
      readonly suggestion?: string;
    }
  | GoGate
  /**
   * A rule requires a human and no approval was named (nor, in a dry run, one approved): the caller
   * asks for one (askForApproval, which writes a pending approval; a dry run refuses with
   * `required`) after it has made sure the call is not a retry or replay of an invocation already
   * allowed (verify.handlers.ts): those are answered as such and ask no human.
   */
  | {
      readonly kind: 'ask';
      readonly catalogVersion: number;
      /** The estimate the call would be counted at (raised to the tool's declared cost floor). */
      readonly estimatedMicros: number | undefined;
      /** What to ask, but for the API key asking (askForApproval adds it). */
      readonly request: Omit<ApprovalRequest, 'requestedByKey'>;
      /** The APPROVAL_REQUIRED violation, before an approval id is known. */
      readonly required: Violation;
      /** The gate to run the call through once an approval of it is approved. */
      readonly goWith: (approvalId: string) => GoGate;
      /**
       * A dry run's answer when the call is not a retry: a standing rejection of it (as the real call
       * would meet in requestApproval), else `required`. Unset in a real run.
       */
      readonly dryRunRefusal?: { readonly violation: Violation; readonly approval?: ApprovalJson };
    };

export interface GoGate {
  readonly kind: 'go';
  readonly catalogVersion: number;
  /** The estimate to count: the args' estimate raised to the tool's declared cost. */
  readonly estimatedMicros: number | undefined;
  readonly approvalId: string | null;
  readonly params: ToolGateParams;
}

/** Fraction of a ceiling past which the near_limit rule condition holds (as the NEAR_LIMIT warning). */
const NEAR_LIMIT = 0.8;

/** Whether this call would take some calls or budget ceiling of the chain past 80%. */
export async function nearLimit(deps: ServiceDeps, tenantId: string, chain: readonly string[], estimate: number): Promise<boolean> {
  const state = await readChainState(deps.store.db, tenantId, chain);
  return state.some(
    (s) =>
      (s.maxCalls !== null && s.maxCalls > 0 && (s.callsUsed + 1) / s.maxCalls > NEAR_LIMIT) ||
      (s.maxSpendMicros !== null && s.maxSpendMicros > 0 && (s.spendReservedMicros + estimate) / s.maxSpendMicros > NEAR_LIMIT),
  );
}

function ruleViolation(rule: Extract<RuleOutcome, { decision: 'deny' | 'require_approval' }> | RuleOutcome, field: string): Violation {
  const which = rule.source === 'rule' ? `rule #${rule.rule.index} (${rule.rule.id})` : 'the default decision';
  const description = rule.source === 'rule' && rule.rule.description !== undefined ? ` ${rule.rule.description}` : '';
  return {
    code: rule.decision === 'deny' ? 'RULE_DENIED' : 'APPROVAL_REQUIRED',
    field,
    required: rule.decision === 'deny' ? 'a call no rule denies' : 'human approval',
    actual: rule.decision,
    message: `${which} decides ${rule.decision}: ${rule.why.join('; ')}.${description}`,
  };
}

export async function decideToolGate(
  deps: ServiceDeps,
  tenantId: string,
  decision: Verified,
  opts: {
    dryRun: boolean;
    approvalId?: string | undefined;
    /** The statement refused this very request's earlier decision as COST_CALIBRATION_FLAGGED. */
    chainFlagged?: boolean | undefined;
    /** The statement refused this very request's earlier decision as NEAR_LIMIT_REACHED. */
    nearLimitReached?: boolean | undefined;
    /** The catalog changed under this request's earlier decision: read it from the database. */
    freshCatalog?: boolean | undefined;
    /**
     * The API key whose verify this is. Naming a waiting approval of this call asks for it too
     * (SELF_APPROVAL); the statement refuses it an approval it decided itself (APPROVAL_DECIDED_BY_CALLER).
     */
    callerKey?: string | undefined;
    /** A dry run: the chain's record that storing it would hold for a human (predictTrifectaHold), if any. */
    wouldHold?: string | null | undefined;
  },
): Promise<ToolGate> {
  // A dry run reads the catalog fresh (no statement re-checks its version); a real verify's
  // statement refuses CATALOG_CHANGED when the cached version, or "none", is stale (0005, 0027).
  const doc = await toolDocumentOf(deps, tenantId, opts.dryRun || opts.freshCatalog === true);
  if (doc === null) return { kind: 'none' };
  const { catalog, settings } = doc;
  const inv = decision.invocation.payload;
  const policies = decision.delegations.map((d) => d.payload.policy);
  const tool = resolveTool(catalog, argOf(inv.args, 'tool'));
  const opts2 = { catalog, strict: settings.strict };
  const catalogVersion = doc.version;

  const violations: Violation[] = checkToolRequirements(tool, policies, opts2).map((v) =>
    v.dr_index === undefined ? v : { ...v, dr_hash: decision.delegations[v.dr_index]!.hash },
  );
  const estimate = estimateWithFloor(argOf(inv.args, 'estimated_cost_usd'), tool);
  const chainTrifecta = detectTrifecta(effectiveAllowedTools(policies), opts2);
  const usesNearLimit = settings.rules.some((r) => r.when.near_limit !== undefined);
  const near = opts.nearLimitReached === true || (usesNearLimit && (await nearLimit(deps, tenantId, inv.dr_chain, estimate.micros ?? 0)));
  const subject = { tool, trifecta: chainTrifecta.detected, estimate_micros: estimate.micros };
  const calibration = costCalibrationOf(settings);
  const decideWith = (flagged: boolean, nearLimitNow = near) =>
    evaluateRules(settings.rules, settings.default_decision, { ...subject, near_limit: nearLimitNow, cost_calibration: flagged });
  // Cost calibration without a round trip on the hot path: decide as unflagged, and when being flagged
  // would turn that allow into something else, let the statement check the flag (cc) and refuse
  // COST_CALIBRATION_FLAGGED, after which this node decides again knowing it. Only when the flag matters
  // to a decision other than allow (or in a dry run, which runs no statement) is it read here first.
  let flagged = opts.chainFlagged === true;
  let rule = decideWith(flagged);
  let checkInStatement = false;
  if (!flagged) {
    const ifFlagged = decideWith(true);
    if (!sameOutcome(rule, ifFlagged)) {
      if (rule.decision === 'allow' && !opts.dryRun) checkInStatement = true;
      else {
        flagged = (await flaggedDelegation(deps, tenantId, inv.dr_chain, calibration)) !== null;
        rule = decideWith(flagged);
      }
    }
  }
  // The counters read above may be stale by the time the statement counts (verifies arriving together
  // all read the chain below 80%): when near_limit would decide otherwise, the statement checks the
  // counters it locks and refuses NEAR_LIMIT_REACHED, and this node decides again (nl).
  const checkNearInStatement = usesNearLimit && !near && !opts.dryRun && !sameOutcome(rule, decideWith(flagged, true));
  const ruleField = rule.source === 'rule' ? `rules[${rule.rule.index}]` : 'default_decision';
  if (rule.decision === 'deny') violations.push(ruleViolation(rule, ruleField));
  if (violations.length > 0) return { kind: 'refuse', catalogVersion, violations };

  const declared = tool.kind === 'declared' ? tool.tool : undefined;
  const params = (approvalId: string | null, binding: string | null): GoGate => ({
    kind: 'go',
    catalogVersion,
    estimatedMicros: estimate.micros,
    approvalId,
    params: {
      v: catalogVersion,
      n: deps.now(),
      t: declared?.name ?? null,
      rl: declared?.rate_limit_per_minute ?? null,
      a: approvalId,
      b: binding,
      // Who is spending it: its decider may not (0033).
      ...(approvalId !== null && opts.callerKey !== undefined ? { k: opts.callerKey } : {}),
      cc: checkInStatement ? { r: calibration.ratio_above, m: calibration.min_metered_invocations } : null,
      ...(checkNearInStatement ? { nl: true } : {}),
    },
  });
  // A dry run of a chain not yet stored: the record storing it would hold refuses the call as the
  // held grant refuses the real one (the statement's GRANT_PENDING_APPROVAL, or below when asking),
  // unless a stored record above it is held already, which the real call names first.
  const wouldHold = opts.dryRun && opts.wouldHold ? opts.wouldHold : null;
  const heldGrant = async () =>
    (await unapprovedGrantInChain(deps.store.db, tenantId, inv.dr_chain)) ??
    (wouldHold === null ? undefined : { drHash: wouldHold, status: 'pending' as const, catalogVersion });
  // What the statement answers first when the chain holds a grant, before any approval check.
  const refusedAsHeld = async (): Promise<ToolGate | undefined> => {
    const held = wouldHold === null ? undefined : await heldGrant();
    return held && { kind: 'refuse', catalogVersion, violations: [grantViolation(held, decision)] };
  };
  if (rule.decision === 'allow') return (await refusedAsHeld()) ?? params(null, null);

  // require_approval: spend an approved approval of this very call, or ask for one.
  const binding = approvalBinding({
    dr_chain: inv.dr_chain,
    cmd: inv.cmd,
    tool_server: inv.tool_server,
    args: inv.args,
    catalog_version: catalogVersion,
  });
  const now = deps.now();
  if (opts.approvalId !== undefined) {
    const named = await findApproval(deps.store.db, tenantId, opts.approvalId);
    // Sending this call again with its waiting approval's id is asking for it as well: that key may
    // not decide it either. A dry run writes nothing; a different call asked for nothing.
    if (named?.status === 'pending' && named.binding === binding && !opts.dryRun && opts.callerKey !== undefined) {
      await recordAskingKey(deps.store.db, tenantId, named.id, opts.callerKey);
    }
    // The statement judges its status, deadline and binding, after any held grant of the chain.
    if (named) return (await refusedAsHeld()) ?? params(named.id, binding);
    return {
      kind: 'refuse',
      catalogVersion,
      violations: [
        {
          code: 'APPROVAL_MISMATCH',
          field: 'approval_id',
          actual: opts.approvalId,
          message: `No approval ${opts.approvalId} exists for this tenant.`,
        },
      ],
    };
  }
  let required = ruleViolation(rule, ruleField);
  // A grant of the chain still held refuses the call whatever an approver decides (the statement
  // checks it too): say so, and ask no human to approve a call that cannot run.
  const held = await heldGrant();
  if (held) {
    const notAsked = `${required.message ?? ''} No approval is requested while grant ${held.drHash} is ${held.status}: an approver decides the grant first (POST /v1/grants/{hash}/approve).`;
    const grant = grantViolation(held, decision);
    return {
      kind: 'refuse',
      catalogVersion,
      violations: [{ ...required, message: notAsked }, grant],
      // APPROVAL_REQUIRED's own advice is to wait for the approval this answer names: it names none.
      suggestion: ERROR_TABLE[grant.code].suggestion,
    };
  }
  let dryRunRefusal: { violation: Violation; approval?: ApprovalJson } | undefined;
  if (opts.dryRun) {
    // A dry run answers what the real call would now: the real call spends an approved approval of
    // this very call (requestApproval finds it), so the dry run allows on it too. It writes nothing.
    // One past its deadline but not yet marked expired is no approval: the real call expires it
    // first (expireApprovals), then finds a rejection or the cap as if it were not there.
    const found = await findLiveApproval(deps.store.db, tenantId, binding);
    const live = found && now < found.expiresAt ? found : undefined;
    if (live?.status === 'approved') return params(live.id, binding);
    const rejected = live ? undefined : await findStandingRejection(deps.store.db, tenantId, binding, now);
    // Not refused here: a retry of a call already allowed is answered as such first, as in a real run.
    if (rejected) dryRunRefusal = { violation: rejectedViolation(rejected), approval: approvalJson(rejected, now) };
    // A new approval past the root's cap, or past a delegation's calls left, would not be opened: the real call says so, and so does this.
    else if (!live) {
      const limit = await pendingLimitFor(deps.store.db, tenantId, inv.dr_chain, now, false, catalogVersion);
      if (limit) dryRunRefusal = { violation: pendingLimitViolation(required, limit) };
    }
    const waiting = live?.status === 'pending' ? ` Approval ${live.id} waits for an approver.` : '';
    required = { ...required, message: `${required.message ?? ''}${waiting}` };
  }
  return {
    kind: 'ask',
    catalogVersion,
    estimatedMicros: estimate.micros,
    required,
    goWith: (approvalId) => params(approvalId, binding),
    ...(dryRunRefusal === undefined ? {} : { dryRunRefusal }),
    request: {
      tenantId,
      binding,
      requestedBy: inv.iss,
      invocationJti: inv.jti,
      drChain: inv.dr_chain,
      tool: typeof argOf(inv.args, 'tool') === 'string' ? (argOf(inv.args, 'tool') as string) : null,
      toolServer: inv.tool_server,
      cmd: inv.cmd,
      args: inv.args,
      catalogVersion,
      rule: rule.source === 'rule' ? rule.rule.id : 'default_decision',
      explanation: `${required.message ?? ''}${chainTrifecta.detected ? ` Chain reach: ${explainTrifecta(chainTrifecta)}.` : ''}`,
    },
  };
}

/**
 * The live approval of the call `ask` describes (requestApproval): an approved one runs the call
 * through the gate on it, anything else refuses it, naming the approval that waits.
 * INVOCATION_STORED: the call itself was allowed meanwhile, so no approval was opened.
 * CATALOG_CHANGED: the gate decided under a catalog a newer one replaced; nothing was opened.
 */
export async function askForApproval(
  deps: ServiceDeps,
  ask: Extract<ToolGate, { kind: 'ask' }>,
  /** The API key whose verify asks: recorded, so it cannot decide the approval (SELF_APPROVAL). */
  requestedByKey: string,
): Promise<GoGate | Extract<ToolGate, { kind: 'refuse' }> | typeof INVOCATION_STORED | typeof CATALOG_CHANGED> {
  const now = deps.now();
  const approval = await requestApproval(deps, { ...ask.request, requestedByKey });
  if (approval === INVOCATION_STORED || approval === CATALOG_CHANGED) return approval;
  if ('kind' in approval && approval.kind === 'chain-ended') {
    // The chain ended after this verify checked it: refused as its next verify will be, and no
    // approval is opened that would outlive it. A revocation another node made is forgotten here.
    if (approval.code === 'RECEIPT_REVOKED') hotPathCacheOf(deps).forgetDelegation(ask.request.tenantId, approval.dr);
    return { kind: 'refuse', catalogVersion: ask.catalogVersion, violations: [chainEndedViolation(ask.request.drChain, approval)] };
  }
  if ('kind' in approval) {
    return { kind: 'refuse', catalogVersion: ask.catalogVersion, violations: [pendingLimitViolation(ask.required, approval)] };
  }
  if (approval.status === 'approved' && now < approval.expiresAt) return ask.goWith(approval.id);
  if (approval.status === 'rejected') {
    return {
      kind: 'refuse',
      catalogVersion: ask.catalogVersion,
      violations: [rejectedViolation(approval)],
      approval: approvalJson(approval, now),
    };
  }
  const { required } = ask;
  return {
    kind: 'refuse',
    catalogVersion: ask.catalogVersion,
    violations: [{ ...required, actual: approval.id, message: `${required.message ?? ''} Approval ${approval.id} waits for an approver.` }],
    approval: approvalJson(approval, now),
  };
}

/** A call a rule sends to a human while no other approval may wait (the root's cap, or a delegation's calls left). */
function pendingLimitViolation(required: Violation, limit: PendingLimit): Violation {
  if (limit.kind === 'root') {
    return {
      code: 'APPROVALS_PENDING_LIMIT',
      field: 'approval_id',
      required: `fewer than ${MAX_PENDING_APPROVALS_PER_ROOT} approvals waiting under the chain root`,
      actual: MAX_PENDING_APPROVALS_PER_ROOT,
      message: `${required.message ?? ''} No approval was opened: ${MAX_PENDING_APPROVALS_PER_ROOT} approvals already wait for a human under the chain root ${limit.root}.`,
    };
  }
  const calls = `${limit.callsLeft} call${limit.callsLeft === 1 ? '' : 's'} left`;
  return {
    code: 'APPROVALS_PENDING_LIMIT',
    field: 'approval_id',
    dr_hash: limit.dr,
    required: `fewer approvals waiting through delegation ${limit.dr} than its ${calls}`,
    actual: limit.waiting,
    message: `${required.message ?? ''} No approval was opened: delegation ${limit.dr} has ${calls} and ${limit.waiting} approval${limit.waiting === 1 ? '' : 's'} already wait${limit.waiting === 1 ? 's' : ''} for a human through it, so no more of its calls could run. Wait for those to be decided (or to expire).`,
  };
}

/**
 * A call whose chain ended while its approval was being asked: the violation verify's block E
 * (checkDelegationTimes) or F (checkStatus) gives, in the same shape, so the refusal reads as the
 * call's next verify will answer.
 */
function chainEndedViolation(chain: readonly string[], ended: ChainEnded): Violation {
  const at = { dr_index: chain.indexOf(ended.dr), dr_hash: ended.dr };
  return ended.code === 'RECEIPT_REVOKED'
    ? { code: 'RECEIPT_REVOKED', ...at, field: 'status', required: 'active', actual: 'revoked' }
    : { code: 'RECEIPT_EXPIRED', ...at, field: 'exp', required: `>= ${ended.now}`, actual: ended.exp };
}

/** A call a human rejected, answered with that rejection until the approval's deadline. */
function rejectedViolation(rejection: ApprovalRow): Violation {
  const why = rejection.reason === null ? '' : ` (${JSON.stringify(rejection.reason)})`;
  return {
    code: 'APPROVAL_REJECTED',
    field: 'approval_id',
    required: 'an approval not rejected',
    actual: rejection.id,
    message: `An approver rejected this call${why} in approval ${rejection.id}; the same call is not asked again before ${new Date(rejection.expiresAt * 1000).toISOString()}.`,
  };
}

/** Whether two rule outcomes decide the same, by the same rule (an allow is an allow, whichever rule gave it). */
function sameOutcome(a: RuleOutcome, b: RuleOutcome): boolean {
  if (a.decision !== b.decision) return false;
  if (a.decision === 'allow') return true;
  return a.source === b.source && (a.source === 'default' || (b.source === 'rule' && a.rule.index === b.rule.index));
}

/** The tenant's cost-calibration thresholds as the gate applies them: its tool document's, else the default. */
export function costCalibrationOf(settings: TenantToolSettings | undefined): CostCalibrationSettings {
  return settings?.cost_calibration ?? DEFAULT_COST_CALIBRATION;
}

/**
 * Whether one delegation is flagged for cost calibration (the `cost_calibration` rule condition) under
 * the tenant's current thresholds: the predicate the gate evaluates for every delegation of a chain
 * (flaggedDelegation here, the same test inside the verify statement), for the usage view's
 * `calibration_flag`. Before a tool document is published, the default thresholds.
 */
export async function delegationCalibrationFlagged(deps: ServiceDeps, tenantId: string, hash: string): Promise<boolean> {
  // The cached document, as the gate reads it (at most 2 s old): a GET per delegation must not re-read and parse the catalog.
  const doc = await toolDocumentOf(deps, tenantId);
  return (await flaggedDelegation(deps, tenantId, [hash], costCalibrationOf(doc?.settings))) !== null;
}

/** The first delegation of the chain flagged for cost calibration under the tenant's thresholds, or null. */
export async function flaggedDelegation(
  deps: ServiceDeps,
  tenantId: string,
  chain: readonly string[],
  calibration: CostCalibrationSettings,
): Promise<string | null> {
  return costCalibrationFlagged(deps.store.db, tenantId, chain, {
    ratioAbove: calibration.ratio_above,
    minMetered: calibration.min_metered_invocations,
  });
}

/**
 * For the verify handler: whether the statement's refusal means "decide again", and what the next
 * decision must know. The catalog changed: the cached tool document is dropped. The chain turned out
 * flagged for cost calibration: the retry of this request decides as flagged. That fact is the
 * statement's answer to this request; it is not kept for other requests.
 */
export function mustRedecide(deps: ServiceDeps, tenantId: string, refusal: ToolGateRefusal): 'catalog' | 'flagged' | 'near' | false {
  if (refusal.o === 'CATALOG_CHANGED') {
    forgetToolDocument(deps, tenantId);
    return 'catalog';
  }
  if (refusal.o === 'NEAR_LIMIT_REACHED') return 'near';
  return refusal.o === 'COST_CALIBRATION_FLAGGED' ? 'flagged' : false;
}

/** A grant of the chain not approved: every call through it is refused. */
/**
 * A held grant of the chain, as verify and dry-run say it: the hold was judged when the record was
 * stored, under the catalog version then current (`judgedUnder`, when known), and stands until an
 * approver decides, whatever a newer catalog says of its tools.
 */
function grantViolation(
  held: { readonly drHash: string; readonly status: string; readonly catalogVersion?: number },
  decision: Verified,
): Violation {
  const when = `held when it was stored${held.catalogVersion === undefined ? '' : `, under tool catalog version ${held.catalogVersion}`}, as its tools together then combined all three risks`;
  return {
    code: 'GRANT_PENDING_APPROVAL',
    dr_index: decision.delegations.findIndex((d) => d.hash === held.drHash),
    dr_hash: held.drHash,
    field: 'status',
    required: 'approved',
    actual: held.status,
    // Rejected is final: asking an approver again would only meet a 409.
    message:
      held.status === 'rejected'
        ? `An approver rejected delegation ${held.drHash} for good (${when}): no call through it will run. Issue a delegation whose allowed_tools leave out one of the three risks.`
        : `Delegation ${held.drHash} waits for a human approver (${when}); the hold stands until an approver decides, whatever a newer catalog says.`,
  };
}

/**
 * What differs between the call approval `named` was granted for and this one, for APPROVAL_MISMATCH:
 * the error's own text leaves the caller to guess, and a catalog published since (even one with the
 * same content) is the difference a caller sending the very same call cannot see. Said only to a
 * call through the approval's own chain (its agent's): to any other, which part differs would tell
 * whether a guess of the approved call's command, tool server or arguments was right. Names no part
 * of the approved call either way.
 */
export function approvalMismatchMessage(named: ApprovalRow, decision: Verified, catalogVersion: number): string {
  const inv = decision.invocation.payload;
  if (named.drChain.join(' ') !== inv.dr_chain.join(' '))
    return `Approval ${named.id} does not cover this call: it was granted for another call.`;
  const differs: string[] = [];
  if (named.catalogVersion !== catalogVersion)
    differs.push(
      `it was granted under tool catalog version ${named.catalogVersion}, and the catalog is now version ${catalogVersion}: an approval covers only the catalog it was granted under, so send the call without approval_id to ask again`,
    );
  if (named.cmd !== null && named.cmd !== inv.cmd) differs.push('it was granted for another command');
  if (named.toolServer !== inv.tool_server) differs.push('it was granted for another tool server');
  if (named.args !== null && canonicalJson(named.args as JsonValue) !== canonicalJson(inv.args as JsonValue))
    differs.push('it was granted for other arguments');
  return `Approval ${named.id} does not cover this call: ${differs.length > 0 ? differs.join('; ') : 'it was granted for another call'}.`;
}

/** The violation for a refusal of the in-statement gate (CATALOG_CHANGED, COST_CALIBRATION_FLAGGED and NEAR_LIMIT_REACHED are decided again, never answered). */
export function toolGateViolation(
  refusal: ToolGateRefusal,
  decision: Verified,
  /** For GRANT_PENDING_APPROVAL: the held grant the statement named, read (its status and the version it was judged under). */
  heldGrant?: { readonly status: string; readonly catalogVersion: number },
  /** For APPROVAL_MISMATCH: the approval the call named, and the catalog version it was decided under. */
  mismatched?: { readonly approval: ApprovalRow | undefined; readonly catalogVersion: number },
): Violation {
  switch (refusal.o) {
    case 'GRANT_PENDING_APPROVAL':
      return grantViolation(
        {
          drHash: refusal.h ?? '',
          status: heldGrant?.status ?? 'pending',
          ...(heldGrant ? { catalogVersion: heldGrant.catalogVersion } : {}),
        },
        decision,
      );
    case 'TOOL_RATE_LIMITED':
      return {
        code: 'TOOL_RATE_LIMITED',
        field: 'args.tool',
        required: `at most ${refusal.rl} calls a minute`,
        actual: refusal.t,
        message: `Tool ${JSON.stringify(refusal.t)} has had its ${refusal.rl} calls this minute.`,
      };
    case 'CATALOG_CHANGED':
      return { code: 'STORAGE_UNAVAILABLE', field: 'catalog_version', actual: refusal.v ?? null };
    case 'COST_CALIBRATION_FLAGGED':
      return { code: 'STORAGE_UNAVAILABLE', field: 'cost_calibration', actual: refusal.h ?? null };
    case 'NEAR_LIMIT_REACHED':
      return { code: 'STORAGE_UNAVAILABLE', field: 'near_limit', actual: true };
    default:
      return {
        code: refusal.o,
        field: 'approval_id',
        actual: refusal.a ?? null,
        ...(refusal.o === 'APPROVAL_MISMATCH' && mismatched?.approval !== undefined
          ? { message: approvalMismatchMessage(mismatched.approval, decision, mismatched.catalogVersion) }
          : {}),
      };
  }
}
