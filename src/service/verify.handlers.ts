/**
 * POST /v1/verify and DRS-compatible POST /verify: the hot path a tool
 * server calls before every tool execution.
 *
 * Blocks A-F run in the pure protocol (verifyChain) over the bundle, with
 * DRs resolved from the store (through an in-process cache) when sent by
 * reference; block G runs in ONE statement (countCallsAtomically), which
 * also re-checks every fact the caches may hold stale: the API key, the
 * root's trust, revocation. A refusal is stored with its service receipt by one
 * statement too (recordDenial), which re-checks the chain's revocation and root's
 * trust it was decided on: stale in the cache, the verify is decided again on fresh
 * reads (verifyInvocation). Every verify has a deadline: past it the
 * answer is 503 and the statements refuse to commit. A storage failure
 * surfaces as 503 from the error mapper: never an allow.
 */
import type { z } from 'zod';
import { BATON_ONLY_OPTIONS, type VerifyRequestBody } from '../api/verify.js';
import {
  denialClaimsVerified,
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
import { isApiKeyActive } from '../store/api-keys.js';
import { delegationsByHash, runtimeLimits, trustedRootsOf } from '../store/delegations.js';
import {
  countCallsAtomically,
  predictCount,
  predictToolGate,
  recordDenial,
  type ChainLimits,
  type DenialToRecord,
  type PredictedDenial,
  type ChainRuntimeState,
  type CountOutcome,
  type InvocationToCount,
} from '../store/runtime.js';
import { deadKeyRefused, evictApiKey } from './auth.js';
import { DENIAL_STATUS, SubmissionRefusal } from './error-status.js';
import { hotPathCacheOf, type HotPathCache, type StoredDelegation } from './hot-cache.js';
import type { Db } from '../store/db.js';
import type { AuthContext, ServiceDeps } from './types.js';
import { findApproval, findGrant } from '../store/approvals.js';
import { findInvocation } from '../store/invocations.js';
import { parseStrictJson } from './body.js';
import { withinDeadline } from './deadline.js';
import { isDeadlineRefusal } from '../store/errors.js';
import { metrics } from './metrics.js';
import { parseRequest } from './validate.js';
import { checkSubmission, submitDelegations } from './delegation-submission.js';
import { signServiceReceipt, type SignedServiceReceipt } from './service-receipts.js';
import { CATALOG_CHANGED, INVOCATION_STORED } from './approvals.js';
import { askForApproval, decideToolGate, mustRedecide, toolGateViolation, type ToolGate } from './tool-gate.js';
import { predictTrifectaHold } from './tool-grants.js';
import { forgetToolDocument } from './tools.js';
import { newerCatalogExists } from '../store/tools.js';
import type { Policy } from '../protocol/policy.js';
import type { ApprovalJson } from './approvals.js';

export type VerifyRequest = z.output<typeof VerifyRequestBody> & {
  /** From the path (POST /v1/verify/dry-run), never the body: see VerifyQuery. */
  readonly dry_run: boolean;
  /**
   * Answer the same key's re-send of an allowed invocation REPLAY_DETECTED, not with its original
   * allow (`retry: true`): set on the DRS-compatible route, whose clients read only `valid` and would
   * run the tool again.
   */
  readonly retryAsReplay?: boolean;
};

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
        /** True when this answers a re-send of an invocation already allowed for this key: nothing was counted now. */
        retry: boolean;
        context: ChainContext;
        invocation_id: string;
        binding: ChainContext['binding'];
        counters: Counter[];
        warnings: Warning[];
        service_receipt: { id: number; kid: string; jws: string } | null;
      };
    }
  | {
      readonly status: typeof DENIAL_STATUS;
      readonly body: { valid: false; error: DecisionError; violations: readonly Violation[]; approval?: ApprovalJson };
    };

/** Fraction of a ceiling past which NEAR_LIMIT is reported. */
const NEAR_LIMIT = 0.8;

const BUNDLE_MEMBERS = ['bundle_version', 'invocation', 'receipts'] as const;

/**
 * The bundle comes in the body, or (DRS) base64url JSON in the X-DRS-Bundle header, or the same one
 * in both, as DRS's VerifyClient sends it. A header that is there (`drsHeader`, undefined when
 * absent or empty) is read strictly, whatever the body holds.
 */
export function bundleFrom(req: VerifyRequest, drsHeader: string | undefined): unknown {
  const inBody = { bundle_version: req.bundle_version, invocation: req.invocation, receipts: req.receipts };
  if (drsHeader === undefined) return inBody;
  const inHeader = headerBundleAsBody(bundleOfHeader(drsHeader), req.retryAsReplay === true);
  if (BUNDLE_MEMBERS.every((k) => inBody[k] === undefined)) return inHeader;
  // Two different ones (or parts of one in the body, the rest in the header) leave a reader to
  // guess which was judged: refused rather than guessed at.
  if (!sameBundle(inBody, inHeader)) {
    throw new BatonError('INVALID_REQUEST', {
      message: 'The body and the X-DRS-Bundle header carry different bundles; Baton cannot tell which one the call is.',
      suggestion: 'Send one bundle: in the body, or in X-DRS-Bundle, or the same one in both.',
    });
  }
  return inBody;
}

/**
 * The bundle in the header, held to the rules of a body on the same path, whether the body carries
 * a copy or not: on /v1/verify a member that is not the bundle's is a 400; on /verify (DRS) Baton's
 * options and `body` are a 400 and other members are ignored. Either way nothing is stored for them
 * (judged by the verifier instead, they were a stored block-A denial).
 */
function headerBundleAsBody(inHeader: Record<string, unknown>, drs: boolean): Record<string, unknown> {
  const extra = Object.keys(inHeader).filter((k) => !(BUNDLE_MEMBERS as readonly string[]).includes(k));
  // `body` too: in the header it is the agent's, and binding would compare the body it chose.
  const refused = drs ? extra.filter((k) => (BATON_ONLY_OPTIONS as readonly string[]).includes(k) || k === 'body') : extra;
  if (refused.length > 0) {
    throw new BatonError('INVALID_REQUEST', {
      message: `The X-DRS-Bundle header holds ${refused.map((k) => JSON.stringify(k)).join(', ')}, which ${refused.length === 1 ? 'is' : 'are'} not a bundle's: a bundle is {bundle_version, invocation, receipts}${drs ? ", and Baton takes no option from it (it may be the agent's)" : ''}.`,
      suggestion: drs
        ? 'Send the bundle alone in X-DRS-Bundle; Baton options belong to POST /v1/verify, in its body (a dry run is POST /v1/verify/dry-run).'
        : 'Send the bundle alone in X-DRS-Bundle, and options in the JSON body (a dry run is POST /v1/verify/dry-run).',
      details: { members: refused },
    });
  }
  return { bundle_version: inHeader['bundle_version'], invocation: inHeader['invocation'], receipts: inHeader['receipts'] };
}

/** The same invocation and records (a version one side leaves out is no difference). */
function sameBundle(inBody: Record<(typeof BUNDLE_MEMBERS)[number], unknown>, inHeader: Record<string, unknown>): boolean {
  const same = (k: (typeof BUNDLE_MEMBERS)[number]) => JSON.stringify(inBody[k]) === JSON.stringify(inHeader[k]);
  return (
    same('invocation') &&
    same('receipts') &&
    (inBody.bundle_version === undefined || inHeader['bundle_version'] === undefined || same('bundle_version'))
  );
}

function bundleOfHeader(drsHeader: string): Record<string, unknown> {
  let text: string;
  try {
    text = utf8Decode(decodeBase64url(drsHeader, 'X-DRS-Bundle header'));
  } catch {
    throw new BatonError('INVALID_REQUEST', {
      message: 'The X-DRS-Bundle header is not base64url-encoded UTF-8.',
      suggestion: 'Send the bundle in the JSON body, or base64url(JSON bundle) in X-DRS-Bundle.',
    });
  }
  // As strict as a body: a bundle refused in the body must not become a stored denial from the header.
  const bundle = parseStrictJson(text, 'The X-DRS-Bundle header');
  if (bundle === null || typeof bundle !== 'object' || Array.isArray(bundle))
    throw new BatonError('INVALID_REQUEST', {
      message: 'The X-DRS-Bundle header holds JSON that is not an object; a bundle is {bundle_version, invocation, receipts}.',
      suggestion: 'Send base64url(JSON bundle object) in X-DRS-Bundle, or the bundle in the JSON body.',
    });
  return bundle as Record<string, unknown>;
}

/**
 * verifyInvocation within the request's deadline (set when it arrived, see deadline.ts): past it
 * the caller gets 503 STORAGE_UNAVAILABLE, and the statements, given a deadline earlier by
 * commitMarginMs, refuse to commit if the database runs them later. At the deadline the answers
 * that already arrived are read first (lastLook). One window is left: a commit the database had
 * begun before the statements' deadline (a stalled disk or synchronous replica, say) that ends after
 * the request's. So the answer does not
 * claim nothing was counted, and says how to learn it on the path it was asked on: on /v1/verify the
 * same invocation re-sent by the same key tells (retry: true); on the DRS path /verify a re-send is
 * never answered with its original allow (REPLAY_DETECTED if it was counted), so it points to /v1/verify.
 */
export async function verifyWithinDeadline(
  deps: ServiceDeps,
  auth: AuthContext,
  tenantId: string,
  req: VerifyRequest,
  bundle: unknown,
  deadline: Date,
  path: '/v1/verify' | '/v1/verify/dry-run' | '/verify',
): Promise<VerifyResponse> {
  const refused = `Baton had no decision from the database for this verify within the ${deps.config.verifyDeadlineMs} ms deadline, so it refuses it: do not run the call on this answer. `;
  const message =
    path === '/v1/verify/dry-run'
      ? refused + 'A dry run counts nothing: send it again.'
      : path === '/v1/verify'
        ? refused +
          'Re-send the same invocation with the same key to learn whether the database counted it anyway (retry: true), or sign a new one.'
        : refused +
          'On this path a re-send is never answered with its original allow: the same invocation sent here again is refused REPLAY_DETECTED if the database counted it anyway, and decided afresh if not. ' +
          'Sent by the same key to POST /v1/verify instead, it answers its original allow (retry: true) if it was counted. Or sign a new one.';
  const statementsBy = new Date(deadline.getTime() - commitMarginMs(deps.config.verifyDeadlineMs));
  // A statement the database refused for its deadline (a lock wait that ended, a late start) is the
  // same answer as the deadline passing here, with the same advice.
  const decided = verifyInvocation(deps, auth, tenantId, req, bundle, statementsBy).catch((err: unknown) => {
    throw isDeadlineRefusal(err) ? new BatonError('STORAGE_UNAVAILABLE', { message }) : err;
  });
  return withinDeadline(decided, deadline, message, undefined, { lastLook: true });
}

/**
 * How long before the request's deadline the verify's statements stop deciding (their last check
 * before commit, on the database's clock). A statement that passes it still commits, and its
 * answer crosses the socket and waits for this node's event loop: given the deadline itself, one
 * that passed its check at the last moment was counted and answered 503 (an outside probe: 11 of
 * 221 503s counted at a 100 ms deadline under load). A fifth of the deadline, at most 250 ms; only
 * a commit that stalls longer than that (a disk or a synchronous replica) is still left open.
 */
export function commitMarginMs(verifyDeadlineMs: number): number {
  return Math.min(250, Math.floor(verifyDeadlineMs / 5));
}

/**
 * What the earlier rounds of a verify decided again learned (see verifyInvocation), and how many
 * there were.
 */
interface Redecided {
  readonly chainFlagged: boolean;
  readonly nearLimitReached?: boolean;
  readonly rounds?: number;
  /** The catalog changed under an earlier decision: read it fresh, not through the node's cache. */
  readonly catalogChanged?: boolean;
  /** A round was decided again after this node's cache proved stale (forgetStaleFacts): never twice. */
  readonly staleForgotten?: boolean;
}

export async function verifyInvocation(
  deps: ServiceDeps,
  auth: AuthContext,
  tenantId: string,
  req: VerifyRequest,
  bundle: unknown,
  deadline: Date = new Date(Date.now() + deps.config.verifyDeadlineMs),
  /**
   * When the tool catalog changed under a decision, or the chain turned out flagged for cost
   * calibration or near its limit, the decision is made again, at most twice; when storing the chain
   * or its refusal found a cached fact stale, once more (`redecided`: what the earlier rounds
   * learned, and how many there were).
   */
  redecided?: Redecided,
): Promise<VerifyResponse> {
  try {
    return await decideInvocation(deps, auth, tenantId, req, bundle, deadline, redecided);
  } catch (e) {
    // A round decided again (decideAgain) is nested in this one: what it threw, it judged already.
    if (judgedByRound.has(e as object)) throw e;
    if (typeof e === 'object' && e !== null) judgedByRound.add(e);
    // Storing the chain, or the refusal (0041), reads the chain's stored facts fresh. When it finds
    // one this node's cache held stale (a DR revoked, a root no longer trusted, since it was cached),
    // the verify decides again on fresh facts, once: the chain is then refused as such (403 with its
    // denial receipt), as a dry run or another node answers, not for the reason the stale facts let
    // the node reach (the tool gate's, say) nor as a refused submission (422). A dry run stores
    // nothing and reads every fact fresh.
    // What was found stale is forgotten in every round, the last included, so a resend needs no extra round.
    const stale = req.dry_run !== true && forgetStaleFacts(hotPathCacheOf(deps), tenantId, e);
    if (stale && redecided?.staleForgotten !== true)
      return verifyInvocation(deps, auth, tenantId, req, bundle, deadline, {
        ...redecided,
        chainFlagged: redecided?.chainFlagged === true,
        staleForgotten: true,
      });
    // Stale again in the round decided on fresh facts: a 503 to send it again, as a stale refusal
    // is, rather than a refused submission's 422 for a chain that changed during this verify.
    if (stale && e instanceof SubmissionRefusal) {
      const again = new StaleCachedChain([], false);
      judgedByRound.add(again);
      throw again;
    }
    throw e;
  }
}

/** Errors a round of verifyInvocation has judged (decided again on, or passed on): the rounds it is nested in pass them on. */
const judgedByRound = new WeakSet<object>();

/** One round of verifyInvocation's decision. */
async function decideInvocation(
  deps: ServiceDeps,
  auth: AuthContext,
  tenantId: string,
  req: VerifyRequest,
  bundle: unknown,
  deadline: Date,
  redecided: Redecided | undefined,
): Promise<VerifyResponse> {
  const started = performance.now();
  const db = deps.store.db;
  const now = deps.now();
  const dryRun = req.dry_run === true;
  const cache = hotPathCacheOf(deps);
  /** The tool gate's facts changed under this decision: made again with what the statement reported. */
  const decideAgain = (redecide: 'catalog' | 'flagged' | 'near'): Promise<VerifyResponse> => {
    // Each fact the statement reports is kept for the next decision, so they add up: a flagged
    // chain that also crossed 80% is decided again twice at most, never in a loop.
    const rounds = (redecided?.rounds ?? (redecided ? 1 : 0)) + 1;
    if (rounds > 2)
      throw new BatonError('STORAGE_UNAVAILABLE', { message: 'The tool gate changed three times during this verify; retry.' });
    const next = {
      chainFlagged: redecided?.chainFlagged === true || redecide === 'flagged',
      nearLimitReached: redecided?.nearLimitReached === true || redecide === 'near',
      // A request on this node that read the catalog before the publish may put the old one back in
      // its cache after it was forgotten: the decision made again reads it from the database.
      catalogChanged: redecided?.catalogChanged === true || redecide === 'catalog',
      staleForgotten: redecided?.staleForgotten === true,
      rounds,
    };
    return verifyInvocation(deps, auth, tenantId, req, bundle, deadline, next);
  };

  // A dry run reads every fact fresh (it runs no statement that re-checks them).
  if (dryRun) await assertKeyActive(deps, auth);
  const hashes = referencedHashes(bundle);
  const stored = dryRun ? await freshDelegations(db, tenantId, hashes) : await cache.delegations(db, tenantId, hashes);
  const roots = dryRun
    ? await trustedRootsOf(db, tenantId)
    : await cache.trustedRoots(db, tenantId, hashes[0] === undefined ? undefined : stored.get(hashes[0])?.iss);
  const decision = verifyChain(bundle, {
    now,
    trustedRoots: roots,
    maxDepth: deps.config.maxChainDepth,
    invocationMaxAgeSeconds: deps.config.invocationMaxAgeSeconds,
    clockSkewSeconds: deps.config.clockSkewSeconds,
    resolveDelegation: (h) => stored.get(h)?.jws,
    isRevoked: (h) => stored.get(h)?.revoked === true,
    cache: deps.drCache,
    ...(req.body !== undefined ? { body: req.body } : {}),
    ...(req.require_binding ? { requireBinding: true } : {}),
  });
  if (!decision.valid) {
    // The one refusal whose invocation may be anyone's words: the chain was not verified through.
    const claims = denialClaimsVerified(decision) ? 'verified' : 'unverified';
    return refuse(deps, auth, tenantId, decision, dryRun, deadline, started, {}, claims);
  }

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
      deadline,
      started,
    );
  }

  // DRS clients never pre-register: a verified chain with unknown DRs is stored now
  // (by a key that is still active: this write happens before the statement re-checks it).
  // A dry run stores nothing but makes the same checks, so it refuses what storing would.
  // A dry run: the record storing would hold for a human (a trifecta grant), refused as the real call's gate refuses it.
  let wouldHold: string | null = null;
  if (decision.delegations.some((d) => !stored.has(d.hash))) {
    const jwsList = decision.delegations.map((d) => d.jws);
    if (dryRun) {
      const checked = await checkSubmission(deps, tenantId, jwsList);
      const ancestorPolicies = checked.ancestors.map((a) => a.policy as Policy);
      wouldHold = await predictTrifectaHold(deps, tenantId, ancestorPolicies, checked.submitted, stored);
    } else {
      await assertKeyActive(deps, auth);
      // A refusal that proves a cached fact stale is decided again (verifyInvocation).
      await submitDelegations(deps, tenantId, jwsList, auth.keyId);
    }
  }

  const limits = chainLimits(decision.delegations);
  const refusal = (outcome: Parameters<typeof runtimeViolation>[0]) =>
    deny([runtimeViolation(outcome, decision)], { invocation: decision.invocation, dr_chain: inv.dr_chain });
  const invocationToCount = (estimate: number): InvocationToCount => ({
    tenantId,
    jti: inv.jti,
    hash: decision.invocation.hash,
    jws: decision.invocation.jws,
    drChain: inv.dr_chain,
    tool: decision.context.tool,
    estimatedMicros: estimate,
    callerKeyId: auth.keyId,
  });
  /** An allow the statement counted, or the original allow a retry gets back. */
  const answerAllowed = (
    outcome: Extract<CountOutcome, { ok: true }>,
    signed: SignedServiceReceipt | undefined,
    estimate: number,
  ): VerifyResponse | Promise<VerifyResponse> => {
    const retry = outcome.retry !== undefined;
    if (retry && req.retryAsReplay === true)
      return refuse(deps, auth, tenantId, refusal({ ok: false, reason: 'REPLAY_DETECTED' }), dryRun, deadline, started);
    if (dryRun) {
      logDecision(deps, auth, tenantId, decision, { dryRun, codes: [retry ? 'RETRY' : 'ALLOWED'], serviceReceiptId: null, started });
      return allow(decision, outcome.state, null, true, retry, estimate);
    }
    // A retry answers with the original allow's service receipt, also when this verify signed none
    // (a refusal was predicted for its chain, or the gate was about to ask for an approval, and the
    // jti turned out already allowed).
    const answered =
      typeof outcome.retry === 'object'
        ? { id: outcome.retry.serviceReceiptId, kid: outcome.retry.kid, jws: outcome.retry.jws }
        : outcome.serviceReceiptId !== undefined && signed
          ? { id: outcome.serviceReceiptId, kid: signed.kid, jws: signed.jws }
          : undefined;
    if (!answered) throw new BatonError('INTERNAL', { message: 'A counted invocation came back without its serviceReceipt.' });
    metrics.observeDecision('allow', retry ? 'RETRY' : 'ALLOWED');
    logDecision(deps, auth, tenantId, decision, { dryRun, codes: [retry ? 'RETRY' : 'ALLOWED'], serviceReceiptId: answered.id, started });
    return allow(decision, outcome.state, answered, false, retry, estimate);
  };

  // The tool gate: catalog-derived requirements and approval rules (tool-gate.ts).
  let gate: ToolGate = await decideToolGate(deps, tenantId, decision, {
    dryRun,
    approvalId: req.approval_id,
    chainFlagged: redecided?.chainFlagged,
    nearLimitReached: redecided?.nearLimitReached,
    freshCatalog: redecided?.catalogChanged === true,
    callerKey: auth.keyId,
    wouldHold,
  });
  const gated = gate.kind === 'none' ? {} : { catalog_version: gate.catalogVersion };
  // Before the gate refuses or asks: an invocation already allowed is answered as the statement
  // answers it (the same key's retry gets its original allow, anyone else REPLAY_DETECTED), not as a
  // new call a catalog published since would refuse. Nor must the gate ask a human to approve a call
  // that already ran (its approval was spent by that call): such an approval, once approved, let a
  // second call with the same arguments through. Sent with no allow receipt, the statement writes
  // nothing unless it finds the jti used (then as it would anyway); a dry run reads the same. A chain
  // the statement finds revoked, untrusted or incomplete (this node's cache was stale) is refused as
  // such, and asks no human. So is a call that would ask, through a chain with a ceiling reached
  // (max_calls used up, or this estimate past max_spend): no approver could let it run, and the
  // statement refuses the ceiling before it looks at any approval, so a human would approve a call
  // that cannot run and its approval would hold a place under the root's cap. A refusing gate's
  // own refusal (a rule's deny, the catalog's requirements) stands.
  const answerPriorUse = async (ceilingsRefuse: boolean): Promise<VerifyResponse | undefined> => {
    // At the estimate the call would be counted at: the tool's declared cost floor raises the agent's.
    const probe = invocationToCount(
      gate.kind === 'ask' && gate.estimatedMicros !== undefined ? gate.estimatedMicros : estimatedMicros(inv.args),
    );
    const prior = dryRun
      ? await predictCount(db, probe, unstoredState(decision.delegations, stored))
      : await countCallsAtomically(deps.store.query, probe, null, limits, decision.delegations[0]!.payload.iss, deadline);
    if (prior.ok && prior.retry !== undefined) return answerAllowed(prior, undefined, probe.estimatedMicros);
    if (prior.ok && !dryRun) throw new BatonError('INTERNAL', { message: 'A verify sent with no allow receipt was allowed.' });
    if (prior.ok) return undefined;
    if (prior.reason === 'KEY_REVOKED') throw keyRevoked(deps, auth);
    if (
      prior.reason === 'REPLAY_DETECTED' ||
      prior.reason === 'UNTRUSTED_ROOT' ||
      prior.reason === 'RECEIPT_REVOKED' ||
      prior.reason === 'BUNDLE_INCOMPLETE' ||
      (ceilingsRefuse && (prior.reason === 'CALLS_EXHAUSTED' || prior.reason === 'BUDGET_EXHAUSTED'))
    ) {
      learnFromRefusal(cache, tenantId, prior, dryRun);
      return refuse(deps, auth, tenantId, refusal(prior), dryRun, deadline, started, gated);
    }
    return undefined;
  };
  // A refusing gate asks the statement only when the jti is stored already (a read that locks
  // nothing): most refused calls are new, and the probe locks the chain's counted rows, which every
  // allow through the chain updates, so a flood of refused calls would slow the allows.
  const priorUseMatters = gate.kind === 'ask' || (gate.kind === 'refuse' && (await findInvocation(db, tenantId, inv.jti)) !== undefined);
  if (priorUseMatters) {
    const answered = await answerPriorUse(gate.kind === 'ask');
    if (answered) return answered;
  }
  let catalogChecked = false;
  if (gate.kind === 'ask') {
    if (dryRun) {
      const refused = gate.dryRunRefusal;
      gate = {
        kind: 'refuse',
        catalogVersion: gate.catalogVersion,
        violations: [refused?.violation ?? gate.required],
        ...(refused?.approval === undefined ? {} : { approval: refused.approval }),
        // APPROVAL_REQUIRED's own advice waits for the approval the answer names: a dry run opens none.
        ...(refused === undefined
          ? {
              suggestion:
                'A dry run opens no approval. Send the call to POST /v1/verify, not its dry run: its answer names the approval of the call (`approval`: its id and expiry), opening one when none waits; once an approver approves it, send the same call once more.',
            }
          : {}),
      };
    } else {
      const asked = await askForApproval(deps, gate, auth.keyId);
      catalogChecked = true; // requestApproval read whether a newer catalog exists
      // The gate decided under a catalog a newer one replaced (its cached copy): no approval was
      // opened under the old one; the call is decided again under the current one.
      if (asked === CATALOG_CHANGED) {
        forgetToolDocument(deps, tenantId);
        return decideAgain('catalog');
      }
      if (asked === INVOCATION_STORED) {
        // A duplicate of this call was allowed between the probe and the approval's insert (it spent
        // the approval this one would have used): answered as that allow, never with a new approval.
        const answeredNow = await answerPriorUse(false);
        if (answeredNow) return answeredNow;
        throw new BatonError('INTERNAL', { message: 'The invocation was stored, yet the statement found no prior use of it.' });
      }
      gate = asked;
    }
  }
  if (gate.kind === 'refuse') {
    // Refused under the node's cached catalog: one published since (on another node, within the
    // cache's 2 s) may allow the call, so the refusal is made again under it. A dry run and a
    // decision made again after a catalog change read the catalog fresh already, and a refusal
    // from asking for an approval was checked while asking.
    if (!dryRun && !catalogChecked && redecided?.catalogChanged !== true && (await newerCatalogExists(db, tenantId, gate.catalogVersion))) {
      forgetToolDocument(deps, tenantId);
      return decideAgain('catalog');
    }
    const denied = deny(gate.violations, { invocation: decision.invocation, dr_chain: inv.dr_chain });
    const refusedByGate = gate.suggestion === undefined ? denied : { ...denied, error: { ...denied.error, suggestion: gate.suggestion } };
    return refuse(deps, auth, tenantId, refusedByGate, dryRun, deadline, started, { ...gated, approval: gate.approval });
  }

  const toCount = invocationToCount(
    gate.kind === 'go' && gate.estimatedMicros !== undefined ? gate.estimatedMicros : estimatedMicros(inv.args),
  );
  const signAllow = () =>
    signServiceReceipt(deps.signer, {
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
        ...gated,
        ...(gate.kind === 'go' && gate.approvalId !== null ? { approval_id: gate.approvalId } : {}),
      },
    });
  // A chain through a DR whose max_calls this node saw used up (calls_used never goes down):
  // sign the refusal's service receipt instead of an allow's, so the statement stores the refusal
  // itself. The statement still decides; an allow then costs a second statement.
  const exhausted = dryRun ? undefined : limits.find((l) => l.maxCalls !== null && cache.isExhausted(tenantId, l.hash));
  const predicted = exhausted && predictedDenial(deps, auth, tenantId, refusal(exhaustedAt(exhausted)), exhausted.hash, gated);
  let serviceReceipt = dryRun || predicted ? undefined : signAllow();
  // A dry run asks the statement's own tool gate (read-only) once the counters would allow, so it
  // never says allow where the real call's gate refuses.
  const predictDryRun = async (): Promise<CountOutcome> => {
    const predicted = await predictCount(db, toCount, unstoredState(decision.delegations, stored));
    if (!predicted.ok || predicted.retry !== undefined || gate.kind !== 'go' || gate.params === null) return predicted;
    const refusal = await predictToolGate(db, toCount, gate.params);
    return refusal === null ? predicted : { ok: false, reason: 'TOOL_GATE', refusal };
  };
  const count = () =>
    countCallsAtomically(
      deps.store.query,
      toCount,
      serviceReceipt ?? null,
      limits,
      decision.delegations[0]!.payload.iss,
      deadline,
      predicted,
      gate.kind === 'go' ? gate.params : null,
    );
  let outcome = dryRun ? await predictDryRun() : await count();
  if (!outcome.ok && outcome.reason === 'UNPREDICTED') {
    serviceReceipt = signAllow();
    outcome = await count();
  }
  if (!outcome.ok) {
    if (outcome.reason === 'KEY_REVOKED') throw keyRevoked(deps, auth);
    if (outcome.reason === 'UNPREDICTED')
      throw new BatonError('INTERNAL', { message: 'A verify signed for its allow was refused as unpredicted.' });
    learnFromRefusal(cache, tenantId, outcome, dryRun);
    const redecide = outcome.reason === 'TOOL_GATE' ? mustRedecide(deps, tenantId, outcome.refusal) : false;
    if (redecide) return decideAgain(redecide);
    // The statement names the held grant, not its status: read it, so a rejected grant is not called pending.
    const heldGrant =
      outcome.reason === 'TOOL_GATE' && outcome.refusal.o === 'GRANT_PENDING_APPROVAL' && outcome.refusal.h !== undefined
        ? await findGrant(db, tenantId, outcome.refusal.h)
        : undefined;
    // Likewise the approval a mismatch names (it exists: the gate refused a missing one itself), to say what differs.
    const mismatched =
      outcome.reason === 'TOOL_GATE' && outcome.refusal.o === 'APPROVAL_MISMATCH' && outcome.refusal.a !== undefined && gate.kind === 'go'
        ? { approval: await findApproval(db, tenantId, outcome.refusal.a), catalogVersion: gate.catalogVersion }
        : undefined;
    const denial =
      outcome.reason === 'TOOL_GATE'
        ? deny([toolGateViolation(outcome.refusal, decision, heldGrant, mismatched)], {
            invocation: decision.invocation,
            dr_chain: inv.dr_chain,
          })
        : refusal(outcome);
    if ('deniedServiceReceiptId' in outcome && outcome.deniedServiceReceiptId !== undefined) {
      return refused(deps, auth, tenantId, denial, { dryRun, serviceReceiptId: outcome.deniedServiceReceiptId, started }, gated);
    }
    return refuse(deps, auth, tenantId, denial, dryRun, deadline, started, gated);
  }
  return answerAllowed(outcome, serviceReceipt, toCount.estimatedMicros);
}

/**
 * The decision log: one structured event per verify decision on the log
 * stream (info level), for operators and log pipelines. Built from what the
 * decision already holds; no extra work on the hot path beyond one line.
 */
function logDecision(
  deps: ServiceDeps,
  auth: AuthContext,
  tenantId: string,
  decision: ChainDecision,
  d: { dryRun: boolean; codes: readonly string[]; serviceReceiptId: number | null; started: number; claims?: Claims },
): void {
  const inv = decision.invocation?.payload;
  const tool = inv?.args['tool'];
  const drChain = (decision.valid ? decision.context.dr_chain : decision.dr_chain) ?? inv?.dr_chain ?? [];
  const invoker = inv?.iss ?? null;
  const toolName = typeof tool === 'string' ? tool : null;
  // Everything read from an unverified invocation is logged as its claims, not as fact (see Claims):
  // anyone holding a verify key could otherwise have the log name any DID as the invoker of any tool.
  const said =
    d.claims === 'unverified'
      ? {
          invoker: null,
          tool: null,
          jti: null,
          dr_chain: [],
          claimed_invoker: invoker,
          claimed_tool: toolName,
          claimed_jti: inv?.jti ?? null,
          claimed_dr_chain: drChain,
        }
      : { invoker, tool: toolName, jti: inv?.jti ?? null, dr_chain: drChain };
  deps.log.info('verify decision', {
    // The request's line (its status) is found by this id: a decision logged after the deadline was
    // answered 503 (unless it arrived just in time), though the database counted it.
    request_id: auth.requestId ?? null,
    tenant_id: tenantId,
    key_id: auth.keyId,
    ...said,
    outcome: decision.valid ? 'allow' : 'deny',
    codes: d.codes,
    dry_run: d.dryRun,
    service_receipt_id: d.serviceReceiptId,
    ms: Math.round((performance.now() - d.started) * 10) / 10,
  });
}

/** 401 for a key revoked since this node cached it; forgets it here too. */
function keyRevoked(deps: ServiceDeps, auth: AuthContext): BatonError {
  evictApiKey(deps, auth.keyId);
  return deadKeyRefused(deps, auth.keyId, 'revoked or expired', auth.requestId);
}

/** Re-reads the caller's key (the auth cache may be stale) before work no statement re-checks. */
async function assertKeyActive(deps: ServiceDeps, auth: AuthContext): Promise<void> {
  if (!(await isApiKeyActive(deps.store.db, auth.keyId))) throw keyRevoked(deps, auth);
}

async function freshDelegations(db: Db, tenantId: string, hashes: readonly string[]): Promise<Map<string, StoredDelegation>> {
  const rows = await delegationsByHash(db, tenantId, hashes);
  return new Map([...rows].map(([hash, r]) => [hash, { hash, jws: r.jws, iss: r.iss, revoked: r.revokedAt !== null }]));
}

/**
 * A refusal the denial statement did not store: the chain it was decided on, as this node cached
 * it, has records revoked or a root no longer trusted (0041). Caught by verifyInvocation, which
 * decides again once on fresh facts; should they change again during that round, a 503 to retry.
 */
class StaleCachedChain extends BatonError {
  constructor(
    readonly revoked: readonly string[],
    readonly untrusted: boolean,
  ) {
    super('STORAGE_UNAVAILABLE', {
      message:
        "The delegation chain's revocation or its root's trust changed while this verify was decided, twice; nothing was recorded. Do not run the call on this answer.",
      suggestion: 'Send the same invocation again: it is decided afresh.',
    });
  }
}

/**
 * Forgets what a refused submission, or a refusal the denial statement did not store
 * (StaleCachedChain), proved stale in this node's cache: the DRs found revoked, or the tenant's
 * trusted roots. False when the refusal was about anything else (nothing cached was wrong, so
 * deciding again would not change the answer).
 */
function forgetStaleFacts(cache: HotPathCache, tenantId: string, refusal: unknown): boolean {
  if (refusal instanceof StaleCachedChain) {
    if (refusal.untrusted) cache.forgetRoots(tenantId);
    for (const hash of refusal.revoked) cache.forgetDelegation(tenantId, hash);
    return refusal.untrusted || refusal.revoked.length > 0;
  }
  if (!(refusal instanceof SubmissionRefusal)) return false;
  if (refusal.code === 'UNTRUSTED_ROOT') {
    cache.forgetRoots(tenantId);
    return true;
  }
  if (refusal.code !== 'RECEIPT_REVOKED') return false;
  const revoked = refusal.violations.flatMap((v) => (v.code === 'RECEIPT_REVOKED' && typeof v.dr_hash === 'string' ? [v.dr_hash] : []));
  for (const hash of revoked) cache.forgetDelegation(tenantId, hash);
  return revoked.length > 0;
}

/**
 * What the statement's refusal teaches this node's cache: a root no longer trusted and a DR revoked
 * are forgotten; a DR whose max_calls a real call found used up is remembered (calls_used never goes
 * down), so the next refusal through it is signed in advance.
 */
function learnFromRefusal(cache: HotPathCache, tenantId: string, outcome: Extract<CountOutcome, { ok: false }>, dryRun: boolean): void {
  if (outcome.reason === 'UNTRUSTED_ROOT') cache.forgetRoots(tenantId);
  if (outcome.reason === 'RECEIPT_REVOKED') cache.forgetDelegation(tenantId, outcome.hash);
  if (outcome.reason === 'CALLS_EXHAUSTED' && !dryRun) cache.markExhausted(tenantId, outcome.state.hash);
}

/** Depth and ceilings of each DR as stored (see insertDelegation): from the verified payloads, no read needed. */
function chainLimits(drs: readonly VerifiedDelegation[]): ChainLimits[] {
  return drs.map((d, depth) => {
    const { maxCalls, maxSpendMicros } = runtimeLimits(d.payload.policy);
    return { hash: d.hash, depth, maxCalls, maxSpendMicros };
  });
}

/** Counters as they would start for verified DRs the store does not hold yet. */
function unstoredState(drs: readonly VerifiedDelegation[], stored: ReadonlyMap<string, unknown>): ChainRuntimeState[] {
  return chainLimits(drs)
    .filter((l) => !stored.has(l.hash))
    .map((l) => ({ ...l, revoked: false, callsUsed: 0, spendReservedMicros: 0 }));
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

function runtimeViolation(
  outcome: Exclude<CountOutcome, { ok: true } | { reason: 'KEY_REVOKED' | 'UNPREDICTED' | 'TOOL_GATE' }>,
  decision: Extract<ChainDecision, { valid: true }>,
): Violation {
  const indexOf = (hash: string) => decision.delegations.findIndex((d) => d.hash === hash);
  switch (outcome.reason) {
    case 'UNTRUSTED_ROOT': {
      // As verifyChain words it: the root was trusted when read, and is no longer.
      const root = decision.delegations[0]!;
      return {
        code: 'UNTRUSTED_ROOT',
        dr_index: 0,
        dr_hash: root.hash,
        field: 'iss',
        actual: root.payload.iss,
        message: `The root delegation is issued by ${root.payload.iss}, which is not a trusted root here.`,
      };
    }
    case 'REPLAY_DETECTED':
      return {
        code: 'REPLAY_DETECTED',
        field: 'invocation.jti',
        actual: decision.invocation.payload.jti,
        message: `Invocation ${decision.invocation.payload.jti} has already been used.`,
      };
    case 'RECEIPT_REVOKED':
      return {
        code: 'RECEIPT_REVOKED',
        dr_index: indexOf(outcome.hash),
        dr_hash: outcome.hash,
        field: 'status',
        required: 'active',
        actual: 'revoked',
      };
    case 'BUNDLE_INCOMPLETE':
      return { code: 'BUNDLE_INCOMPLETE', dr_index: indexOf(outcome.hash), dr_hash: outcome.hash, field: 'status', actual: 'missing' };
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
  serviceReceipt: { id: number; kid: string; jws: string } | null,
  dryRun: boolean,
  retry: boolean,
  estimate: number,
): VerifyResponse {
  const counters: Counter[] = state
    .filter((s) => s.maxCalls !== null)
    .map((s) => ({ dr: s.hash, calls_used: s.callsUsed, max_calls: s.maxCalls! }));
  const warnings: Warning[] = [];
  for (const s of state) {
    // A dry run reports what the call would use, without using it (a retry would use nothing).
    const uses = dryRun && !retry;
    const calls = uses ? s.callsUsed + 1 : s.callsUsed;
    if (s.maxCalls !== null && s.maxCalls > 0 && calls / s.maxCalls > NEAR_LIMIT) {
      warnings.push({
        code: 'NEAR_LIMIT',
        dr: s.hash,
        field: 'max_calls',
        used: calls,
        limit: s.maxCalls,
        message: `${calls} of ${s.maxCalls} calls used under ${s.hash}${uses ? ', counting this call' : ''}.`,
      });
    }
    const spend = uses ? s.spendReservedMicros + estimate : s.spendReservedMicros;
    if (s.maxSpendMicros !== null && s.maxSpendMicros > 0 && spend / s.maxSpendMicros > NEAR_LIMIT) {
      warnings.push({
        code: 'NEAR_LIMIT',
        dr: s.hash,
        field: 'max_spend_usd',
        used: microsToUsd(spend as Micros),
        limit: microsToUsd(s.maxSpendMicros as Micros),
        message: `Spend of ${microsToUsd(spend as Micros)} USD (metered plus pending estimates${uses ? ', with this call' : ''}) is past 80% of the ${microsToUsd(s.maxSpendMicros as Micros)} USD budget under ${s.hash}.`,
      });
    }
  }
  return {
    status: 200,
    body: {
      valid: true,
      dry_run: dryRun,
      retry,
      context: decision.context,
      invocation_id: decision.invocation.payload.jti,
      binding: decision.context.binding,
      counters,
      warnings,
      service_receipt: serviceReceipt,
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
  deadline: Date,
  started: number,
  gated: ToolGateFacts = {},
  claims: Claims = 'verified',
): Promise<VerifyResponse> {
  let serviceReceiptId: number | null = null;
  if (!dryRun) {
    const recorded = await recordDenial(deps.store.query, denialToRecord(deps, auth, tenantId, decision, gated, claims), deadline);
    if (recorded.o === 'KEY_REVOKED') throw keyRevoked(deps, auth);
    // Decided on a chain this node cached as live and trusted, which no longer is: nothing was
    // stored, and the verify is decided again on fresh facts (verifyInvocation).
    if (recorded.o === 'STALE') throw new StaleCachedChain(recorded.revoked, recorded.untrusted);
    serviceReceiptId = recorded.serviceReceiptId;
  }
  return refused(deps, auth, tenantId, decision, { dryRun, serviceReceiptId, started, claims }, gated);
}

/**
 * Whether a denial's invocation claims (jti, dr_chain) are its signers' word: 'unverified' only for
 * a chain refused before block D (see denialClaimsVerified). Every denial made after the chain
 * verified is 'verified', whatever its code's block (the statement's BUNDLE_INCOMPLETE, say).
 */
type Claims = 'verified' | 'unverified';

/** Tool gate facts of a decision: the catalog version decided with (recorded in the service receipt), the approval asked for. */
interface ToolGateFacts {
  readonly catalog_version?: number;
  readonly approval?: ApprovalJson | undefined;
}

/** The answer to a deny already recorded (or a dry run's). */
function refused(
  deps: ServiceDeps,
  auth: AuthContext,
  tenantId: string,
  decision: Extract<ChainDecision, { valid: false }>,
  d: { dryRun: boolean; serviceReceiptId: number | null; started: number; claims?: Claims },
  gated: ToolGateFacts = {},
): VerifyResponse {
  // A dry run decides nothing (its allows are not counted either): counted, polling dry runs would
  // inflate the denials an operator alerts on. baton_http_requests_total shows them by route.
  if (!d.dryRun) metrics.observeDecision('deny', decision.error.code);
  const codes = [...new Set([decision.error.code, ...decision.violations.map((v) => v.code)])];
  logDecision(deps, auth, tenantId, decision, { ...d, codes });
  const approval = gated.approval === undefined ? {} : { approval: gated.approval };
  return { status: DENIAL_STATUS, body: { valid: false, error: decision.error, violations: decision.violations, ...approval } };
}

/** A deny as stored: the denial row and its signed service receipt. */
function denialToRecord(
  deps: ServiceDeps,
  auth: AuthContext,
  tenantId: string,
  decision: Extract<ChainDecision, { valid: false }>,
  gated: ToolGateFacts = {},
  claims: Claims = 'verified',
): DenialToRecord {
  const inv = decision.invocation;
  // Unverified claims are not recorded as the invocation's: kept, they would list a forged
  // invocation under any jti and any DR it named (GET /v1/invocations?dr=, /v1/invocations/{jti}).
  const verified = claims === 'verified';
  const jti = verified ? (inv?.payload.jti ?? null) : null;
  const drChain = verified ? (decision.dr_chain ?? []) : [];
  const subject = jti ?? inv?.hash ?? 'unreadable-invocation';
  const serviceReceipt = signServiceReceipt(deps.signer, {
    tenantId,
    kind: 'invocation.denied',
    subject,
    now: deps.now(),
    data: {
      code: decision.error.code,
      block: decision.error.block,
      dr_chain: drChain,
      caller_key_id: auth.keyId,
      catalog_version: gated.catalog_version,
      approval_id: gated.approval?.id,
    },
  });
  return {
    tenantId,
    callerKeyId: auth.keyId,
    jti,
    invocationHash: inv?.hash ?? null,
    code: decision.error.code,
    block: blockOf(decision.error.code as ErrorCode) ?? null,
    drChain,
    violations: storableJson(decision.violations),
    serviceReceipt: { subject, jws: serviceReceipt.jws, kid: serviceReceipt.kid },
  };
}

/** CALLS_EXHAUSTED of `limits` as predicted; the statement supplies the calls_used it finds. */
function exhaustedAt(limits: ChainLimits): Extract<CountOutcome, { reason: 'CALLS_EXHAUSTED' | 'BUDGET_EXHAUSTED' }> {
  return {
    ok: false,
    reason: 'CALLS_EXHAUSTED',
    state: { ...limits, revoked: false, callsUsed: limits.maxCalls ?? 0, spendReservedMicros: 0 },
  };
}

/** The predicted refusal, signed now, for the statement to store if it refuses so. */
function predictedDenial(
  deps: ServiceDeps,
  auth: AuthContext,
  tenantId: string,
  decision: Extract<ChainDecision, { valid: false }>,
  hash: string,
  gated: ToolGateFacts,
): PredictedDenial {
  const record = denialToRecord(deps, auth, tenantId, decision, gated);
  return { code: 'CALLS_EXHAUSTED', hash, violations: record.violations, serviceReceipt: record.serviceReceipt };
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
