/**
 * Explain: for a hypothetical call against a chain (policies root first) and
 * the tenant's catalog and settings, EVERY unmet condition with a remediation,
 * in the verify violations shape plus a `remediation` sentence. Nothing is
 * counted or consumed; runtime state the caller knows (NEAR_LIMIT, cost
 * calibration, the stored trifecta grants) comes in as context and defaults
 * to the fail-closed answer.
 *
 * The policy part is evaluateArgs per delegation, exactly as verify runs it;
 * the catalog part is checkToolRequirements; then the holds of the stored
 * grants (or, for a chain not stored, the trifecta of each delegation) and
 * the tenant's approval rules.
 *
 * Pure: no I/O, no clock.
 */
import { ERROR_TABLE, type Violation } from './errors.js';
import type { GrantStatus } from './lists.js';
import { addMicros, microsToUsd, ZERO_MICROS, type Micros } from './money.js';
import type { TemporalVerdict } from './chain.js';
import { argOf, evaluateArgs, namesByPrefix, type Policy } from './policy.js';
import { evaluateRules, type RuleDecision, type RuleOutcome, type TenantToolSettings } from './approval-rules.js';
import { resolveTool, type Catalog, type ResolvedTool } from './tool-catalog.js';
import { checkToolRequirements, estimateWithFloor } from './tool-requirements.js';
import { describeUndeclared, detectTrifecta, explainTrifecta, type TrifectaReport } from './trifecta.js';

/** What the store holds now of one delegation, as verify reads it: block E's clock, F's status, G's counters. */
export interface DelegationStanding {
  readonly time: TemporalVerdict;
  readonly nbf: number;
  readonly exp: number | null;
  readonly revoked: boolean;
  readonly calls: { readonly used: number; readonly max: number } | null;
  /** Micro-dollars: the subtree's spend so far (metered, else declared) and the ceiling. */
  readonly spend: { readonly reserved: Micros; readonly max: Micros } | null;
}

/** What verify would find standing in the way of any call through the chain, whatever its args. */
export interface ChainStanding {
  /** The clock the time windows were judged by (unix seconds). */
  readonly now: number;
  readonly root_trusted: boolean;
  /** Root first, one per delegation. */
  readonly delegations: readonly DelegationStanding[];
}

export interface ExplainContext {
  /** Calls or budget of the chain have passed 80% of a ceiling. Default false. */
  readonly near_limit?: boolean;
  /** A delegation of the chain is flagged for cost calibration. Default false. */
  readonly cost_calibration?: boolean;
  /**
   * Per delegation (root first), its stored trifecta grant, or null where it has none: these decide
   * which delegations are held, exactly as the verify statement reads them (any grant not approved
   * refuses every call, whatever the current catalog says; a delegation without one is never held).
   * Default: the chain is judged as storing it now would judge it, every reach that is a trifecta
   * under the current catalog held.
   */
  readonly stored_grants?: readonly (StoredGrant | null)[];
  /** The chain's standing now (trust, time, revocation, counters). Default: nothing stands in the way. */
  readonly standing?: ChainStanding;
  /** The declared tool has had its rate_limit_per_minute calls this minute. Default false. */
  readonly tool_rate_limited?: boolean;
}

/** A delegation's trifecta grant as stored when it was held: judged once, under the catalog current then. */
export interface StoredGrant {
  readonly dr_hash: string;
  readonly status: GrantStatus;
  /** Why it was held, as judged when it was stored. */
  readonly explanation: string;
  /** The catalog version it was judged under. */
  readonly catalog_version: number;
}

/** What a tenant's published tool document gives explain. */
export interface ExplainTools {
  readonly catalog: Catalog;
  readonly settings: TenantToolSettings;
}

export interface ExplainInput {
  readonly args: Record<string, unknown>;
  /** The chain's policies, root first. */
  readonly policies: readonly Policy[];
  /**
   * The tenant's tool document; null when it has published none. Verify then applies no tool gate
   * (no declared-tool requirements, trifecta holds or rules), so explain applies none either.
   */
  readonly tools: ExplainTools | null;
  readonly context?: ExplainContext;
}

export interface ExplainedViolation extends Violation {
  /** What to do about it, e.g. "grant write_access in DR #1 (…)". */
  readonly remediation: string;
}

export interface Explanation {
  /** deny if any condition other than approval is unmet; require_approval if only that; else allow. */
  readonly decision: RuleDecision;
  readonly violations: readonly ExplainedViolation[];
  readonly catalog_version: number;
  readonly tool: ResolvedTool;
  /** The estimate verify would count: the args' estimate raised to the tool's cost floor; null when there is none. */
  readonly estimate_usd: number | null;
  readonly estimate_raised: boolean;
  /** The lethal-trifecta judgement of each delegation's reach (its allowed_tools within its ancestors'), root first. */
  readonly grants: readonly TrifectaReport[];
  /** The judgement of the chain's reach (the intersection of every allowed_tools), which rules see. */
  readonly chain_trifecta: TrifectaReport;
  readonly rule: RuleOutcome;
}

function dr(i: number | undefined): string {
  if (i === undefined) return 'the invocation';
  return i === 0 ? 'DR #0 (the root)' : `DR #${i}`;
}

const REISSUE = 're-issue it with the grant; every delegation above it must grant it too';

function remediationForArgs(v: Violation, arg: string): string {
  const at = dr(v.dr_index);
  const missing = v.actual === null;
  switch (arg) {
    case 'tool':
      return missing
        ? 'name the tool in args.tool'
        : `call a tool that allowed_tools of ${at} lists, or add ${JSON.stringify(v.actual)} to allowed_tools in ${at} (${REISSUE})`;
    case 'estimated_cost_usd':
      if (missing) return 'declare args.estimated_cost_usd, the estimated cost in US dollars';
      if (typeof v.actual !== 'number') return 'set args.estimated_cost_usd to a finite, non-negative number of US dollars';
      return `lower args.estimated_cost_usd to at most max_cost_usd of ${at}, or raise max_cost_usd in ${at} (${REISSUE})`;
    case 'pii_access':
    case 'write_access':
      if (missing) return `set args.${arg} to false, or grant ${arg} in ${at} (${REISSUE})`;
      if (typeof v.actual !== 'boolean') return `set args.${arg} to a boolean`;
      return `grant ${arg} in ${at} (${REISSUE}), or set args.${arg} to false if the call does not need it`;
    case 'resource_uri':
    case 'data_class': {
      const list = arg === 'resource_uri' ? 'allowed_resources' : 'allowed_data_classes';
      if (missing) return `declare args.${arg}`;
      return `use a ${arg} that ${list} of ${at} covers, or add it to ${list} in ${at} (${REISSUE})`;
    }
    default:
      return ERROR_TABLE[v.code].suggestion;
  }
}

function remediationFor(v: Violation, tool: ResolvedTool): string {
  const at = dr(v.dr_index);
  switch (v.field) {
    case 'policy.write_access':
    case 'policy.pii_access': {
      const grant = v.field.slice('policy.'.length);
      return `grant ${grant} in ${at} (${REISSUE}); the tool needs it whatever the args say`;
    }
    case 'policy.max_cost_usd':
      return `raise max_cost_usd in ${at} to ${String(v.required)} (${REISSUE}), or call a cheaper tool`;
    case 'args.tool':
      if (v.code === 'TOOL_UNDECLARED') {
        return tool.kind === 'confusable'
          ? `call ${JSON.stringify(tool.declared.name)} by its exact declared name`
          : 'declare the tool in the tenant tool catalog, or call a declared tool';
      }
      return remediationForArgs(v, 'tool');
    default:
      return v.field.startsWith('args.') ? remediationForArgs(v, v.field.slice('args.'.length)) : ERROR_TABLE[v.code].suggestion;
  }
}

const LEAVE_OUT_A_RISK = 'allowed_tools that leave out every source of one of the three risks';

/**
 * The holds verify's statement refuses: every stored grant not approved (pending or rejected), judged
 * when its delegation was stored and standing until an approver decides, whatever the catalog is now.
 */
function storedGrantViolations(stored: readonly (StoredGrant | null)[]): ExplainedViolation[] {
  const out: ExplainedViolation[] = [];
  stored.forEach((grant, i) => {
    if (grant === null || grant.status === 'approved') return;
    const judged = `when it was stored, under tool catalog version ${grant.catalog_version}: ${grant.explanation}`;
    const rejected = grant.status === 'rejected';
    out.push({
      code: 'GRANT_PENDING_APPROVAL',
      dr_index: i,
      dr_hash: grant.dr_hash,
      field: 'status',
      required: 'approved',
      actual: grant.status,
      message: rejected
        ? `An approver rejected ${dr(i)} for good (it was held ${judged}): no call through it will run.`
        : `${dr(i)} is held for a human (judged ${judged}); the hold stands until an approver decides, whatever a newer catalog says.`,
      // A rejection is final: asking an approver again would only meet a 409.
      remediation: rejected
        ? `issue a new delegation in place of ${dr(i)}, with ${LEAVE_OUT_A_RISK}`
        : `have an approver approve ${dr(i)} (GET /v1/grants), or re-issue it with ${LEAVE_OUT_A_RISK}`,
    });
  });
  return out;
}

/** The holds storing the chain now would make: every reach that is a trifecta under the current catalog. */
function grantViolations(grants: readonly TrifectaReport[], policies: readonly Policy[]): ExplainedViolation[] {
  const out: ExplainedViolation[] = [];
  grants.forEach((report, i) => {
    if (!report.detected) return;
    out.push({
      code: 'GRANT_PENDING_APPROVAL',
      dr_index: i,
      field: 'policy.allowed_tools',
      required: 'human approval, or allowed_tools without one of the three risks',
      actual: policies[i]?.allowed_tools ?? null,
      message: `The tools ${dr(i)} allows combine all three risks (${explainTrifecta(report)}).`,
      remediation:
        `have an approver approve ${dr(i)}, or re-issue it with ${LEAVE_OUT_A_RISK}` +
        (describeUndeclared(report) === undefined ? '' : ' (declared tools only, or make the tenant strict)'),
    });
  });
  return out;
}

function approvers(settings: TenantToolSettings): string {
  const dids = settings.approvers.length === 0 ? '' : `, or ${settings.approvers.join(', ')}`;
  return `holders of an API key with the approve scope${dids}`;
}

function ruleViolation(outcome: RuleOutcome, settings: TenantToolSettings): ExplainedViolation | undefined {
  if (outcome.decision === 'allow') return undefined;
  const which = outcome.source === 'rule' ? `rule #${outcome.rule.index} (${outcome.rule.id})` : 'the default decision';
  const field = outcome.source === 'rule' ? `rules[${outcome.rule.index}]` : 'default_decision';
  const description = outcome.source === 'rule' && outcome.rule.description !== undefined ? ` ${outcome.rule.description}` : '';
  const message = `${which} decides ${outcome.decision}: ${outcome.why.join('; ')}.${description}`;
  if (outcome.decision === 'deny') {
    return {
      code: 'RULE_DENIED',
      field,
      required: 'a call no rule denies',
      actual: outcome.decision,
      message,
      remediation: `call a different tool, or ask the tenant admin to change ${which}`,
    };
  }
  return {
    code: 'APPROVAL_REQUIRED',
    field,
    required: 'human approval',
    actual: outcome.decision,
    message,
    remediation: `request approval; approvers: ${approvers(settings)}`,
  };
}

const REISSUE_BELOW = 'issue a new delegation (and the chain below it) from an ancestor that verify still accepts';

/**
 * Block-E, F and G refusals the chain's standing makes certain, in verify's violation shape (the first
 * exhausted counter is what its statement names; every one is listed here).
 */
function standingViolations(standing: ChainStanding | undefined, estimate: Micros | undefined): ExplainedViolation[] {
  if (standing === undefined) return [];
  const out: ExplainedViolation[] = [];
  if (!standing.root_trusted) {
    out.push({
      code: 'UNTRUSTED_ROOT',
      dr_index: 0,
      field: 'iss',
      message: 'The root delegation is issued by a DID this tenant does not trust (it was removed from its trusted roots).',
      remediation: "ask the operator to trust the root's issuer again (baton roots add), or use a chain from a trusted root",
    });
  }
  standing.delegations.forEach((d, i) => {
    const at = dr(i);
    if (d.time === 'RECEIPT_NOT_YET_VALID')
      out.push({
        code: d.time,
        dr_index: i,
        field: 'nbf',
        required: `<= ${standing.now}`,
        actual: d.nbf,
        remediation: `wait until ${at} is valid (nbf ${d.nbf}), or ${REISSUE_BELOW}`,
      });
    if (d.time === 'RECEIPT_EXPIRED')
      out.push({
        code: d.time,
        dr_index: i,
        field: 'exp',
        required: `>= ${standing.now}`,
        actual: d.exp,
        remediation: `${at} has expired: ${REISSUE_BELOW}`,
      });
    if (d.revoked)
      out.push({
        code: 'RECEIPT_REVOKED',
        dr_index: i,
        field: 'status',
        required: 'active',
        actual: 'revoked',
        remediation: `${at} is revoked for good: ${REISSUE_BELOW}`,
      });
    if (d.calls !== null && d.calls.used >= d.calls.max)
      out.push({
        code: 'CALLS_EXHAUSTED',
        dr_index: i,
        field: 'max_calls',
        required: `< ${d.calls.max} calls used`,
        actual: d.calls.used,
        remediation: `${at} has used all ${d.calls.max} of its max_calls, which never come back: ${REISSUE_BELOW}`,
      });
    const wouldReserve = d.spend === null ? undefined : addMicros(d.spend.reserved, estimate ?? ZERO_MICROS);
    if (d.spend !== null && wouldReserve !== undefined && wouldReserve > d.spend.max)
      out.push({
        code: 'BUDGET_EXHAUSTED',
        dr_index: i,
        field: 'max_spend_usd',
        required: `<= ${microsToUsd(d.spend.max)}`,
        actual: microsToUsd(wouldReserve),
        remediation:
          d.spend.reserved >= d.spend.max
            ? `${at} has spent all ${microsToUsd(d.spend.max)} USD of its max_spend_usd: ${REISSUE_BELOW}`
            : `${at} has spent ${microsToUsd(d.spend.reserved)} of its ${microsToUsd(d.spend.max)} USD, and this call's estimate does not fit: lower args.estimated_cost_usd, or ${REISSUE_BELOW}`,
      });
  });
  return out;
}

/** What evaluateArgs finds against each DR's policy, as verify runs it, each with a remediation. */
function argViolations(args: Record<string, unknown>, policies: readonly Policy[], tool: ResolvedTool): ExplainedViolation[] {
  return policies.flatMap((policy, i) =>
    evaluateArgs(policy, args).map((found) => {
      const v = { ...found, dr_index: i };
      return { ...v, remediation: remediationFor(v, tool) };
    }),
  );
}

/** Every unmet condition of a hypothetical call, each with a remediation. */
export function explain(input: ExplainInput): Explanation {
  if (input.tools === null) return explainWithoutToolGate(input.args, input.policies, input.context?.standing);
  const { args, policies } = input;
  const { catalog, settings } = input.tools;
  const context = input.context ?? {};
  const tool = resolveTool(catalog, argOf(args, 'tool'));
  const estimate = estimateWithFloor(argOf(args, 'estimated_cost_usd'), tool);
  const trifectaOpts = { catalog, strict: settings.strict };

  const violations: ExplainedViolation[] = [
    ...standingViolations(context.standing, estimate.micros),
    ...argViolations(args, policies, tool),
  ];
  for (const v of checkToolRequirements(tool, policies, trifectaOpts)) violations.push({ ...v, remediation: remediationFor(v, tool) });

  // A DR's reach is what it and every DR above it allow (attenuation keeps a valid child within its parent).
  const toolsByPrefix = namesByPrefix(policies.map((p) => p.allowed_tools));
  const grants = toolsByPrefix.map((tools) => detectTrifecta(tools, trifectaOpts));
  // Stored grants decide, as in verify: a hold is judged when the delegation is stored and lasts until
  // a human decides, so a newer catalog neither lifts one nor holds a delegation stored without one.
  violations.push(
    ...(context.stored_grants === undefined ? grantViolations(grants, policies) : storedGrantViolations(context.stored_grants)),
  );

  const chainTrifecta = detectTrifecta(toolsByPrefix.at(-1), trifectaOpts);
  const rule = evaluateRules(settings.rules, settings.default_decision, {
    tool,
    trifecta: chainTrifecta.detected,
    near_limit: context.near_limit ?? false,
    cost_calibration: context.cost_calibration ?? false,
    estimate_micros: estimate.micros,
  });
  // The window is the gate's last step: a call a rule denies never meets it, and one a rule holds for
  // a human meets it only once approved (said with the approval, not as a refusal now).
  const rateLimit = tool.kind === 'declared' ? tool.tool.rate_limit_per_minute : undefined;
  const windowFull = context.tool_rate_limited === true && rateLimit !== undefined && tool.kind === 'declared';
  const held = ruleViolation(rule, settings);
  const gate =
    held !== undefined && windowFull && held.code === 'APPROVAL_REQUIRED'
      ? {
          ...held,
          remediation: `${held.remediation}; the tool has had its ${rateLimit} calls this minute, so the approved call is refused TOOL_RATE_LIMITED until the next minute of the database clock`,
        }
      : held;
  if (gate !== undefined) violations.push(gate);
  if (windowFull && tool.kind === 'declared' && rule.decision === 'allow') {
    violations.push({
      code: 'TOOL_RATE_LIMITED',
      field: 'args.tool',
      required: `at most ${rateLimit} calls a minute`,
      actual: tool.tool.name,
      message: `Tool ${JSON.stringify(tool.tool.name)} has had its ${rateLimit} calls this minute.`,
      remediation: `wait for the next minute (of the database clock), or raise rate_limit_per_minute of ${JSON.stringify(tool.tool.name)} in the tool catalog`,
    });
  }

  const blocking = violations.some((v) => v.code !== 'APPROVAL_REQUIRED');
  return {
    decision: blocking ? 'deny' : gate !== undefined ? 'require_approval' : 'allow',
    violations,
    catalog_version: catalog.version,
    tool,
    estimate_usd: estimate.micros === undefined ? null : microsToUsd(estimate.micros),
    estimate_raised: estimate.raised,
    grants,
    chain_trifecta: chainTrifecta,
    rule,
  };
}

/** The catalog of a tenant that has published no tool document: nothing declared. */
export const NOTHING_DECLARED: Catalog = { version: 0, tools: [] };

/**
 * A tenant with no tool document: only the chain's policies judge the call, as in verify. No tool is
 * declared, and no undeclared one is judged a risk (that is the gate's, and there is none), so no
 * reach is a trifecta.
 */
function explainWithoutToolGate(
  args: Record<string, unknown>,
  policies: readonly Policy[],
  standing: ChainStanding | undefined,
): Explanation {
  const tool = resolveTool(NOTHING_DECLARED, argOf(args, 'tool'));
  const estimate = estimateWithFloor(argOf(args, 'estimated_cost_usd'), tool);
  const violations = [...standingViolations(standing, estimate.micros), ...argViolations(args, policies, tool)];
  const unjudged = (tools: readonly string[] | undefined) => detectTrifecta(tools, { catalog: NOTHING_DECLARED, strict: true });
  const toolsByPrefix = namesByPrefix(policies.map((p) => p.allowed_tools));
  return {
    decision: violations.length > 0 ? 'deny' : 'allow',
    violations,
    catalog_version: 0,
    tool,
    estimate_usd: estimate.micros === undefined ? null : microsToUsd(estimate.micros),
    estimate_raised: estimate.raised,
    grants: toolsByPrefix.map(unjudged),
    chain_trifecta: unjudged(toolsByPrefix.at(-1)),
    rule: {
      decision: 'allow',
      source: 'default',
      why: ['the tenant has published no tool document, so verify applies no tool gate: no declared-tool requirement, hold or rule'],
    },
  };
}
