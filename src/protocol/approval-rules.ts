/**
 * Tenant approval rules: an ordered list, first match wins, with a configurable
 * default. A rule's `when` is a conjunction of conditions on the tool (type,
 * blast radius, action type, tags, risk flags, declared or not) and on the call
 * (the chain's reach is a lethal trifecta, NEAR_LIMIT reached, the estimate is
 * above an amount, a delegation is flagged for cost calibration); an empty
 * `when` matches every call.
 *
 * Unknown facts fail closed. The properties of an undeclared tool (possible
 * only in a non-strict tenant) are unknown, and so is `estimate_above_usd`
 * when there is no estimate. A condition on an unknown fact is "maybe", and a
 * rule is then only a possible match. The rules are read in order, collecting
 * every possible match up to the first certain one (or the default when none
 * is certain), and the strictest decision among them wins (deny, then
 * require_approval, then allow; the earliest on a tie). So an unknown tool
 * gets at least the decision any declared tool would get in the same call
 * context, and never an allow meant for, say, read-only tools. When every
 * fact is known this is plain first-match-wins.
 *
 * Pure: no I/O, no clock.
 */
import { z } from 'zod';
import { publicKeyFromDidKey } from './did-key.js';
import { isBatonError } from './errors.js';
import { MAX_USD, usdToMicros, type Micros } from './money.js';
import { DidKeySchema, parseWith } from './records.js';
import { NOT_PLAIN, PLAIN_TEXT } from './text.js';
import {
  ACTION_TYPE_PATTERN,
  BLAST_RADII,
  EVEN_WITH_ITEM_ISSUES,
  RISK_FLAGS,
  riskFlagsOf,
  SENSITIVITY_TAGS,
  stringField,
  TOOL_TYPES,
  type ResolvedTool,
  type ToolDeclaration,
} from './tool-catalog.js';

export const RULE_DECISIONS = ['allow', 'deny', 'require_approval'] as const;
export type RuleDecision = (typeof RULE_DECISIONS)[number];

export const MAX_RULES = 256;
const MAX_CONDITION_ITEMS = 64;

/** A non-empty any-of list: an empty one could never match and is surely a mistake. */
function anyOf<T extends string>(item: z.ZodType<T>) {
  return z
    .array(item)
    .min(1)
    .max(MAX_CONDITION_ITEMS)
    .refine((xs) => new Set(xs).size === xs.length, { message: 'must not list an entry twice' });
}

const ActionTypePatternSchema = z
  .string()
  .max(129)
  .regex(ACTION_TYPE_PATTERN, 'must be category:action or category:* in lower case letters, digits, "_", "." or "-"');

export const RuleConditionsSchema = z.strictObject({
  type: anyOf(z.enum(TOOL_TYPES)).optional(),
  blast_radius: anyOf(z.enum(BLAST_RADII)).optional(),
  /** Exact `category:action`, or `category:*` for every action of a category. */
  action_type: anyOf(ActionTypePatternSchema).optional(),
  /** The tool carries at least one of these sensitivity tags. */
  tags: anyOf(z.enum(SENSITIVITY_TAGS)).optional(),
  /** The tool carries at least one of these risk flags (declared or implied). */
  flags: anyOf(z.enum(RISK_FLAGS)).optional(),
  /** true: the tool is not in the catalog; false: it is. */
  undeclared: z.boolean().optional(),
  /** The chain's reach combines all three trifecta flags (or, when false, does not). */
  trifecta: z.boolean().optional(),
  /** Calls or budget of the chain have passed 80% of a ceiling. */
  near_limit: z.boolean().optional(),
  /** The estimate (after the catalog's cost floor) is above this many US dollars. */
  estimate_above_usd: z.number().nonnegative().max(MAX_USD).optional(),
  /** A delegation in the chain is flagged for cost calibration. */
  cost_calibration: z.boolean().optional(),
});

export type RuleConditions = z.infer<typeof RuleConditionsSchema>;

export const RuleIdSchema = z
  .string()
  .min(1)
  .max(64)
  .regex(/^[a-z0-9][a-z0-9_.-]*$/, 'must be lower case letters, digits, "_", "." or "-"');

export const ApprovalRuleSchema = z.strictObject({
  id: RuleIdSchema,
  when: RuleConditionsSchema,
  decision: z.enum(RULE_DECISIONS),
  /**
   * Shown to the caller when the rule matches, and copied into the approval's
   * explanation an approver reads: plain text, as approval reasons are.
   */
  description: z.string().max(500).regex(PLAIN_TEXT, NOT_PLAIN).optional(),
});

export type ApprovalRule = z.infer<typeof ApprovalRuleSchema>;

/** A rule list names each rule id once (run with EVEN_WITH_ITEM_ISSUES, so items that failed their own schema count too). */
export function noRepeatedRuleIds(rules: readonly unknown[], ctx: z.RefinementCtx): void {
  const seen = new Set<string>();
  rules.forEach((rule, i) => {
    const id = stringField(rule, 'id');
    if (id === undefined) return;
    if (seen.has(id)) ctx.addIssue({ code: 'custom', path: [i, 'id'], message: `repeats the rule id ${JSON.stringify(id)}` });
    seen.add(id);
  });
}

export const ApprovalRulesSchema = z.array(ApprovalRuleSchema).max(MAX_RULES).superRefine(noRepeatedRuleIds, EVEN_WITH_ITEM_ISSUES);

/**
 * Each approver a canonical Ed25519 did:key, listed once (run with
 * EVEN_WITH_ITEM_ISSUES, so items that failed the shape count too). A DID no
 * key can sign for (a typo) would publish a version nobody could approve
 * with, and the operator would not be told; the trusted roots are checked
 * the same way.
 */
export function approversCanSign(approvers: readonly unknown[], ctx: z.RefinementCtx): void {
  const seen = new Map<string, number>();
  approvers.forEach((did, i) => {
    if (typeof did !== 'string') return;
    const earlier = seen.get(did);
    if (earlier !== undefined) {
      ctx.addIssue({ code: 'custom', path: [i], message: `repeats the approver ${JSON.stringify(did)} of approvers.${earlier}` });
      return;
    }
    seen.set(did, i);
    // The shape is DidKeySchema's to report; this is about the key inside it.
    if (!DidKeySchema.safeParse(did).success) return;
    try {
      publicKeyFromDidKey(did);
    } catch (e) {
      if (!isBatonError(e)) throw e;
      ctx.addIssue({ code: 'custom', path: [i], message: `is not an Ed25519 did:key any key can sign for (${e.code}): ${e.message}` });
    }
  });
}

export const ApproversSchema = z.array(DidKeySchema).max(MAX_CONDITION_ITEMS).superRefine(approversCanSign, EVEN_WITH_ITEM_ISSUES);

/** Longest webhook URL a tenant may configure. */
export const MAX_WEBHOOK_URL_LENGTH = 2048;

/** An absolute http(s) URL without credentials (a secret in a URL would be served back to every reader). */
export const WebhookUrlSchema = z
  .string()
  .max(MAX_WEBHOOK_URL_LENGTH)
  .refine((s) => {
    let u: URL;
    try {
      u = new URL(s);
    } catch {
      return false;
    }
    return (u.protocol === 'http:' || u.protocol === 'https:') && u.username === '' && u.password === '' && u.href === s;
  }, 'must be an absolute http or https URL in normal form, without user or password');

/**
 * When a delegation counts as flagged for cost calibration: over every
 * invocation through it that a tool server metered (at least
 * `min_metered_invocations` of them), the metered cost is above `ratio_above`
 * times what the agents declared for those invocations.
 */
export const CostCalibrationSettingsSchema = z.strictObject({
  ratio_above: z.number().min(1).max(1000),
  min_metered_invocations: z.int().min(1).max(1_000_000),
});

export type CostCalibrationSettings = z.infer<typeof CostCalibrationSettingsSchema>;

/** A fifth over what was declared, once there are a few metered calls: a pattern, not one noisy call. */
export const DEFAULT_COST_CALIBRATION: CostCalibrationSettings = { ratio_above: 1.2, min_metered_invocations: 3 };

/** The tenant's tool-governance settings. */
export const TenantToolSettingsSchema = z.strictObject({
  /** Undeclared tools are denied (TOOL_UNDECLARED). */
  strict: z.boolean(),
  rules: ApprovalRulesSchema,
  /** The decision when no rule matches. */
  default_decision: z.enum(RULE_DECISIONS),
  /** DIDs whose signed approvals the tenant accepts, besides keys with the approve scope. */
  approvers: ApproversSchema,
  /** Where each new pending approval is POSTed (best effort); absent: nobody is pushed. */
  webhook_url: WebhookUrlSchema.optional(),
  /** When a delegation is flagged for cost calibration; absent: DEFAULT_COST_CALIBRATION. */
  cost_calibration: CostCalibrationSettingsSchema.optional(),
});

export type TenantToolSettings = z.infer<typeof TenantToolSettingsSchema>;

/**
 * Settings as a stored version holds them. A version was judged when it was published; checks added
 * since (approvers that can sign, each listed once; plain-text rule descriptions) apply to the next
 * publish, not to reading what is stored, so an upgrade never makes a tenant's current version
 * unreadable (and every verify of the tenant fail) until an operator republishes.
 */
export const StoredToolSettingsSchema = TenantToolSettingsSchema.extend({
  rules: z
    .array(ApprovalRuleSchema.extend({ description: z.string().max(500).optional() }))
    .max(MAX_RULES)
    .superRefine(noRepeatedRuleIds, EVEN_WITH_ITEM_ISSUES),
  approvers: z.array(DidKeySchema).max(MAX_CONDITION_ITEMS),
});

/** Reads a stored version's settings (StoredToolSettingsSchema); throws INVALID_FIELD as parseTenantToolSettings. */
export function parseStoredToolSettings(raw: unknown): TenantToolSettings {
  return parseWith(StoredToolSettingsSchema, raw, 'stored tool settings');
}

/** Validates tool settings; throws INVALID_FIELD listing every issue under details.issues. */
export function parseTenantToolSettings(raw: unknown): TenantToolSettings {
  return parseWith(TenantToolSettingsSchema, raw, 'tool settings');
}

/**
 * The default rules, first match wins, then allow:
 * 1. in a chain whose reach is a lethal trifecta, any call that can send data
 *    out needs a human (the exfiltration leg is the one to gate);
 * 2. tools with an organisation-wide blast radius need a human;
 * 3. past 80% of a calls or budget ceiling (NEAR_LIMIT), calls need a human;
 * 4. chains flagged for cost calibration need a human.
 * A tenant adds its own top tier in front, e.g.
 * `{id: 'top-tier', when: {action_type: ['payments:*', 'iam:delete']}, decision: 'require_approval'}`.
 */
export const DEFAULT_APPROVAL_RULES: readonly ApprovalRule[] = [
  {
    id: 'trifecta-external',
    when: { trifecta: true, flags: ['external_communication'] },
    decision: 'require_approval',
    description: 'The chain can read untrusted content and private data, and this tool communicates externally.',
  },
  {
    id: 'organizational-blast-radius',
    when: { blast_radius: ['organizational'] },
    decision: 'require_approval',
    description: 'The tool acts on the whole organisation.',
  },
  {
    id: 'near-limit',
    when: { near_limit: true },
    decision: 'require_approval',
    description:
      'This call would take the chain past 80% of one of its calls or budget ceilings (NEAR_LIMIT): a human confirms it. A chain with a small ceiling meets this early: under max_calls 1, every call does.',
  },
  {
    id: 'cost-calibration',
    when: { cost_calibration: true },
    decision: 'require_approval',
    description: 'A delegation in the chain is flagged for cost calibration.',
  },
];

export const DEFAULT_TOOL_SETTINGS: TenantToolSettings = {
  strict: false,
  rules: [...DEFAULT_APPROVAL_RULES],
  default_decision: 'allow',
  approvers: [],
};

/** Everything a rule can look at for one call. */
export interface RuleSubject {
  readonly tool: ResolvedTool;
  /** The chain's reach is a lethal trifecta (see detectTrifecta). */
  readonly trifecta: boolean;
  readonly near_limit: boolean;
  readonly cost_calibration: boolean;
  /** The estimate after the cost floor; undefined when neither the args nor the catalog give one. */
  readonly estimate_micros: Micros | undefined;
}

/** One condition's verdict, with a phrase saying what was found. */
interface ConditionResult {
  readonly truth: Truth;
  readonly why: string;
}

export function actionTypeMatches(pattern: string, actionType: string): boolean {
  if (pattern.endsWith(':*')) return actionType.startsWith(pattern.slice(0, -1));
  return pattern === actionType;
}

/** The tool a rule may judge: a look-alike is judged as unknown, like any undeclared tool. */
function knownTool(tool: ResolvedTool): ToolDeclaration | undefined {
  return tool.kind === 'declared' ? tool.tool : undefined;
}

function toolCondition(subject: RuleSubject, what: string, test: (tool: ToolDeclaration) => boolean): ConditionResult {
  const tool = knownTool(subject.tool);
  if (tool === undefined) return { truth: 'maybe', why: `${what}: unknown for an undeclared tool` };
  const truth = test(tool);
  return { truth, why: `${what}: ${truth ? 'yes' : 'no'}` };
}

function flagCondition(name: string, expected: boolean, actual: boolean): ConditionResult {
  return { truth: expected === actual, why: `${name} is ${actual}` };
}

function evaluateConditions(when: RuleConditions, subject: RuleSubject): ConditionResult[] {
  const out: ConditionResult[] = [];
  const { type, blast_radius, action_type, tags, flags, undeclared, trifecta, near_limit, estimate_above_usd, cost_calibration } = when;
  if (type) out.push(toolCondition(subject, `type in ${type.join('|')}`, (t) => type.includes(t.type)));
  if (blast_radius) {
    out.push(toolCondition(subject, `blast radius in ${blast_radius.join('|')}`, (t) => blast_radius.includes(t.blast_radius)));
  }
  if (action_type) {
    out.push(
      toolCondition(subject, `action type matches ${action_type.join('|')}`, (t) =>
        action_type.some((p) => actionTypeMatches(p, t.action_type)),
      ),
    );
  }
  if (tags) out.push(toolCondition(subject, `tagged ${tags.join('|')}`, (t) => t.tags.some((tag) => tags.includes(tag))));
  if (flags) {
    out.push(
      toolCondition(subject, `carries ${flags.join('|')}`, (t) => {
        const carried = riskFlagsOf(t);
        return flags.some((f) => carried.has(f));
      }),
    );
  }
  if (undeclared !== undefined) out.push(flagCondition('undeclared', undeclared, subject.tool.kind !== 'declared'));
  if (trifecta !== undefined) out.push(flagCondition('trifecta', trifecta, subject.trifecta));
  if (near_limit !== undefined) out.push(flagCondition('near_limit', near_limit, subject.near_limit));
  if (cost_calibration !== undefined) out.push(flagCondition('cost_calibration', cost_calibration, subject.cost_calibration));
  if (estimate_above_usd !== undefined) {
    const estimate = subject.estimate_micros;
    out.push(
      estimate === undefined
        ? { truth: 'maybe', why: `estimate above ${estimate_above_usd} USD: unknown, no estimate` }
        : { truth: estimate > usdToMicros(estimate_above_usd, 'floor'), why: `estimate above ${estimate_above_usd} USD` },
    );
  }
  return out;
}

export type Truth = true | false | 'maybe';

export interface RuleMatch {
  /** true: all conditions hold; false: one does not; maybe: none fails but some fact is unknown. */
  readonly truth: Truth;
  /** What each condition found, in the order of the rule's fields. */
  readonly why: readonly string[];
}

/** Whether one rule matches a call, in three-valued logic. */
export function ruleMatches(rule: ApprovalRule, subject: RuleSubject): RuleMatch {
  const results = evaluateConditions(rule.when, subject);
  const truth: Truth = results.some((r) => r.truth === false) ? false : results.some((r) => r.truth === 'maybe') ? 'maybe' : true;
  return { truth, why: results.length === 0 ? ['matches every call'] : results.map((r) => r.why) };
}

export type RuleOutcome =
  | {
      readonly decision: RuleDecision;
      readonly source: 'rule';
      readonly rule: { readonly index: number; readonly id: string; readonly description?: string };
      /** false when the rule won as a possible match on unknown facts. */
      readonly certain: boolean;
      readonly why: readonly string[];
    }
  | { readonly decision: RuleDecision; readonly source: 'default'; readonly why: readonly string[] };

const STRICTNESS: Record<RuleDecision, number> = { allow: 0, require_approval: 1, deny: 2 };

/** The stricter of two decisions: deny, then require_approval, then allow. */
export function stricter(a: RuleDecision, b: RuleDecision): RuleDecision {
  return STRICTNESS[b] > STRICTNESS[a] ? b : a;
}

/**
 * First match wins; no match gives the default. With unknown facts, the
 * strictest of the possible matches before the first certain one (or the
 * default) wins, the earliest on a tie.
 */
export function evaluateRules(rules: readonly ApprovalRule[], defaultDecision: RuleDecision, subject: RuleSubject): RuleOutcome {
  const possible: RuleOutcome[] = [];
  for (const [index, rule] of rules.entries()) {
    const match = ruleMatches(rule, subject);
    if (match.truth === false) continue;
    const described = rule.description === undefined ? {} : { description: rule.description };
    possible.push({
      decision: rule.decision,
      source: 'rule',
      rule: { index, id: rule.id, ...described },
      certain: match.truth === true,
      why: match.why,
    });
    if (match.truth === true) break;
  }
  const last = possible[possible.length - 1];
  if (last === undefined || (last.source === 'rule' && !last.certain)) {
    possible.push({ decision: defaultDecision, source: 'default', why: [`no rule certainly matched; the default is ${defaultDecision}`] });
  }
  return possible.reduce((best, next) => (STRICTNESS[next.decision] > STRICTNESS[best.decision] ? next : best));
}
