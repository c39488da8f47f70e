/**
 * DRS 4.0 policy: schema, attenuation (child against parent), evaluation of
 * invocation args, and the effective limits of a chain (docs/design.md, Policy).
 *
 * Everything fails closed:
 * - unknown policy keys are refused, since an ignored constraint widens authority;
 * - absent `pii_access` / `write_access` mean false; absent `allowed_*` lists and
 *   a list that is exactly ["*"] mean unrestricted; absent ceilings mean unlimited;
 * - an argument a policy constrains must be present and of the right type.
 *
 * Pure: no I/O, no clock. Violations come back without dr_index / dr_hash;
 * the chain verifier adds those.
 */

import { z } from 'zod';
import { BatonError, type Violation } from './errors.js';
import { clipText } from './jcs.js';
import { compareUsd, invocationAmountProblem, MAX_INVOCATION_USD, MAX_USD, microsToUsd, usdToMicros, type Micros } from './money.js';
import {
  formatResourcePattern,
  isValidResourcePattern,
  normalizeResourceUri,
  parseResourcePattern,
  indexResourceList,
  listGrants,
  ResourcePatternIndex,
  type ResourcePattern,
} from './resource.js';
import { PLAIN_NAME } from './text.js';

export const MAX_LIST_ITEMS = 256;
export const MAX_NAME_LENGTH = 256;
export const MAX_POLICY_DEPTH = 16;
export const WILDCARD = '*';

/** A name in allowed_tools or allowed_data_classes: "*" alone, or an exact name. The tool catalog reuses it. */
export const PolicyNameSchema = z
  .string()
  .min(1)
  .max(MAX_NAME_LENGTH)
  .regex(PLAIN_NAME, {
    message: 'Names cannot contain control, format or invisible characters (such as a soft hyphen or a zero-width space).',
  })
  // "web_*" is not a glob here; refuse it rather than let it read like one.
  .refine((s) => s === WILDCARD || !s.includes(WILDCARD), { message: 'Only the whole entry "*" may contain *; globs are not supported.' });

/** "*" means unrestricted only on its own; mixed with names it is ambiguous, so refused. */
function list(item: z.ZodType<string>) {
  return z
    .array(item)
    .max(MAX_LIST_ITEMS)
    .refine((xs) => !xs.includes(WILDCARD) || xs.length === 1, { message: 'A list containing "*" must contain nothing else.' });
}

const money = z.number().nonnegative().max(MAX_USD);

const resourcePattern = z.string().refine(isValidResourcePattern, {
  message:
    'Not a valid resource pattern: use *, an exact URI, or a prefix ending in /*, in RFC 3986 form without dot segments or encoded slashes or dots.',
});

export const PolicySchema = z.strictObject({
  allowed_tools: list(PolicyNameSchema).optional(),
  max_cost_usd: money.optional(),
  pii_access: z.boolean().optional(),
  write_access: z.boolean().optional(),
  max_calls: z.int().nonnegative().optional(), // z.int() is bounded to safe integers
  allowed_resources: list(resourcePattern).optional(),
  allowed_data_classes: list(PolicyNameSchema).optional(),
  max_spend_usd: money.optional(),
  max_depth: z.int().min(0).max(MAX_POLICY_DEPTH).optional(),
});

export type Policy = z.infer<typeof PolicySchema>;

export interface PolicyIssue {
  readonly path: string;
  readonly code: string;
  readonly message: string;
}

/** Validates a policy; throws INVALID_FIELD listing every issue under details.issues. */
export function parsePolicy(raw: unknown, field = 'policy'): Policy {
  const result = PolicySchema.safeParse(raw);
  if (result.success) return result.data;
  const issues: PolicyIssue[] = result.error.issues.map((issue) => ({
    path: [field, ...issue.path.map(String)].join('.'),
    code: issue.code,
    message: issue.message, // names unknown keys too
  }));
  const first = issues[0];
  throw new BatonError('INVALID_FIELD', {
    // zod's messages end with or without a period: one, not two.
    message: `The ${field} is not a valid DRS 4.0 policy${first ? `: ${first.path}: ${first.message.replace(/\.$/, '')}` : ''}.`,
    suggestion:
      'Use only the fields allowed_tools, max_cost_usd, pii_access, write_access, max_calls, allowed_resources, allowed_data_classes, max_spend_usd and max_depth, within the limits listed for the Policy schema at GET /docs.',
    details: { field, issues },
  });
}

// ---------------------------------------------------------------------------
// Shared helpers

type ListField = 'allowed_tools' | 'allowed_resources' | 'allowed_data_classes';
type MoneyField = 'max_cost_usd' | 'max_spend_usd';
type FlagField = 'pii_access' | 'write_access';

/** The entries a list restricts to, or undefined when it does not restrict. */
export function restriction(list: readonly string[] | undefined): readonly string[] | undefined {
  if (list === undefined || list.includes(WILDCARD)) return undefined;
  return list;
}

/** Short JSON rendering of a value for messages (arguments can be large). */
function show(value: unknown): string {
  if (value === undefined) return 'nothing';
  if (typeof value === 'string') return JSON.stringify(clipText(value, 120));
  let text: string;
  try {
    text = typeof value === 'number' ? String(value) : (JSON.stringify(value) ?? String(value));
  } catch {
    text = String(value);
  }
  return clipText(text, 120);
}

/** A value safe and small enough to echo back in a violation. */
function echo(value: unknown): unknown {
  if (value === undefined) return null;
  if (typeof value === 'number' && !Number.isFinite(value)) return String(value);
  if (value === null || typeof value === 'boolean' || typeof value === 'number') return value;
  if (typeof value === 'string') return clipText(value, 256);
  return show(value);
}

function typeName(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  if (typeof value === 'object') return 'an object';
  if (typeof value === 'number' && Number.isNaN(value)) return 'NaN';
  return `a ${typeof value}`;
}

/** A ceiling in micros, rounded down; undefined if the number is not a valid amount. */
function ceilingMicros(usd: number): Micros | undefined {
  try {
    return usdToMicros(usd, 'floor');
  } catch {
    return undefined;
  }
}

// ---------------------------------------------------------------------------
// Attenuation: the child must not grant anything the parent does not.

function escalation(field: string, required: unknown, actual: unknown, message: string): Violation {
  return { code: 'POLICY_ESCALATION', field: `policy.${field}`, required, actual, message };
}

function checkList(
  field: ListField,
  parent: Policy,
  child: Policy,
  /** For the parent's list (`allowed`, restricting): whether it grants everything an entry does. */
  coverage: (allowed: readonly string[]) => (entry: string) => boolean,
): Violation[] {
  const allowed = restriction(parent[field]);
  if (allowed === undefined) return [];
  const granted = child[field];
  if (granted === undefined) {
    return [
      escalation(
        field,
        allowed,
        null,
        `The parent restricts ${field} to ${show(allowed)}, so the child must list ${field} too; leaving it out would allow everything.`,
      ),
    ];
  }
  if (granted.includes(WILDCARD)) {
    return [
      escalation(field, allowed, granted, `The child sets ${field} to "*" (everything), but the parent restricts it to ${show(allowed)}.`),
    ];
  }
  const covers = coverage(allowed);
  const extra = granted.filter((entry) => !covers(entry));
  if (extra.length === 0) return [];
  return [
    escalation(
      field,
      allowed,
      extra,
      `The child's ${field} grants ${show(extra)}, which the parent's ${field} ${show(allowed)} does not cover.`,
    ),
  ];
}

/** A ceiling the child must set too, at most the parent's: money as exact decimals, max_calls as a count. */
function checkCeiling(field: MoneyField | 'max_calls', parent: Policy, child: Policy): Violation[] {
  const cap = parent[field];
  if (cap === undefined) return [];
  const unit = field === 'max_calls' ? '' : ' USD';
  const set = child[field];
  if (set === undefined) {
    return [
      escalation(
        field,
        cap,
        null,
        `The parent sets ${field} to ${cap}${unit}, so the child must set ${field} to at most ${cap}; leaving it out would mean unlimited.`,
      ),
    ];
  }
  // Money exactly as signed, not after rounding: 0.3000001 floors to the same
  // micros as 0.3 but still claims more than its parent.
  if (field === 'max_calls' ? set <= cap : notAbove(set, cap)) return [];
  return [escalation(field, cap, set, `The child sets ${field} to ${show(set)}${unit}, above the parent's ${cap}${unit}.`)];
}

/** Whether the amount `set` is at most `cap` as exact decimals; false if either is not a valid amount. */
function notAbove(set: number, cap: number): boolean {
  try {
    return compareUsd(set, cap) <= 0;
  } catch {
    return false;
  }
}

/** max_depth counts further hops, so it must drop by at least one at each hop. */
function checkDepth(parent: Policy, child: Policy): Violation[] {
  const cap = parent.max_depth;
  if (cap === undefined) return [];
  const set = child.max_depth;
  if (cap === 0) {
    return [
      escalation('max_depth', 'no further delegation', set ?? null, 'The parent sets max_depth to 0, which allows no further delegation.'),
    ];
  }
  const limit = cap - 1;
  if (set === undefined) {
    return [
      escalation(
        'max_depth',
        limit,
        null,
        `The parent sets max_depth to ${cap}, so the child must set max_depth to at most ${limit}; leaving it out would mean unlimited.`,
      ),
    ];
  }
  if (set <= limit) return [];
  return [
    escalation(
      'max_depth',
      limit,
      set,
      `The child sets max_depth to ${set}, but max_depth must drop by at least one per hop: at most ${limit} under the parent's ${cap}.`,
    ),
  ];
}

function checkFlag(field: FlagField, parent: Policy, child: Policy): Violation[] {
  if (parent[field] === true || child[field] !== true) return [];
  return [escalation(field, false, true, `The child grants ${field}, which the parent does not grant (absent means false).`)];
}

/** Whether a restricting list of patterns grants everything an entry does: one index of the list per check. */
function patternCoverage(allowed: readonly string[]): (entry: string) => boolean {
  const index = indexResourceList(allowed);
  return (entry) => {
    let pattern;
    try {
      pattern = parseResourcePattern(entry);
    } catch {
      return false; // an entry that does not parse is granted nothing
    }
    return index.ownersCovering(pattern).size > 0;
  };
}

/** Every way the child policy grants more than the parent; [] when it only narrows. */
export function checkAttenuation(parent: Policy, child: Policy): Violation[] {
  const exact = (allowed: readonly string[]) => {
    const names = new Set(allowed);
    return (entry: string) => names.has(entry);
  };
  return [
    ...checkList('allowed_tools', parent, child, exact),
    ...checkCeiling('max_cost_usd', parent, child),
    ...checkFlag('pii_access', parent, child),
    ...checkFlag('write_access', parent, child),
    ...checkCeiling('max_calls', parent, child),
    ...checkList('allowed_resources', parent, child, patternCoverage),
    ...checkList('allowed_data_classes', parent, child, exact),
    ...checkCeiling('max_spend_usd', parent, child),
    ...checkDepth(parent, child),
  ];
}

// ---------------------------------------------------------------------------
// Evaluation: do the invocation args fit this one policy?

function violation(arg: string, required: unknown, actual: unknown, message: string): Violation {
  return { code: 'POLICY_VIOLATION', field: `args.${arg}`, required, actual: echo(actual), message };
}

/** Own properties only: an inherited `tool` must never count as declared. */
export function argOf(args: Record<string, unknown>, key: string): unknown {
  return typeof args === 'object' && args !== null && Object.hasOwn(args, key) ? args[key] : undefined;
}

const ESTIMATE = 'estimated_cost_usd';
const ESTIMATE_RANGE = `a number of US dollars from 0 to ${MAX_INVOCATION_USD}`;

/** A violation when args.estimated_cost_usd is present but not a usable amount; [] otherwise. */
export function evaluateEstimate(args: Record<string, unknown>, required: unknown = ESTIMATE_RANGE): Violation[] {
  const estimate = argOf(args, ESTIMATE);
  if (estimate === undefined) return [];
  const problem = invocationAmountProblem(estimate);
  if (problem === undefined) return [];
  const shown = typeof estimate === 'number' ? show(estimate) : typeName(estimate);
  return [
    violation(
      ESTIMATE,
      required,
      estimate,
      `args.${ESTIMATE} must be a finite, non-negative number of US dollars no larger than ${MAX_INVOCATION_USD}, but it ${problem} (${shown}).`,
    ),
  ];
}

/**
 * A cost ceiling or a budget needs a usable estimate: without one the call
 * would count as free, so a missing or unusable estimate is a violation
 * whenever the policy sets max_cost_usd or max_spend_usd (fail closed).
 */
function evalCost(policy: Policy, args: Record<string, unknown>): Violation[] {
  const cap = policy.max_cost_usd;
  const budget = policy.max_spend_usd;
  if (cap === undefined && budget === undefined) return [];
  const limits = [
    cap === undefined ? '' : `caps each call at max_cost_usd ${cap}`,
    budget === undefined ? '' : `has a max_spend_usd budget of ${budget}`,
  ]
    .filter((t) => t !== '')
    .join(' and ');
  const required = cap === undefined ? ESTIMATE_RANGE : `at most ${cap}`;
  const estimate = argOf(args, ESTIMATE);
  if (estimate === undefined) {
    return [
      violation(
        ESTIMATE,
        required,
        estimate,
        `The invocation does not declare args.${ESTIMATE}, but this delegation ${limits}; declare the estimated cost in US dollars.`,
      ),
    ];
  }
  const unusable = evaluateEstimate(args, required);
  if (unusable.length > 0 || cap === undefined) return unusable;
  const capMicros = ceilingMicros(cap);
  if (capMicros !== undefined && usdToMicros(estimate as number, 'ceil') <= capMicros) return [];
  return [
    violation(ESTIMATE, required, estimate, `The estimated cost of ${show(estimate)} USD is above max_cost_usd ${cap} of this delegation.`),
  ];
}

function evalFlag(field: FlagField, policy: Policy, args: Record<string, unknown>): Violation[] {
  const granted = policy[field] === true;
  const value = argOf(args, field);
  const what = field === 'pii_access' ? 'PII access' : 'write access';
  if (value === undefined) {
    if (granted) return [];
    return [
      violation(
        field,
        false,
        value,
        `The invocation does not declare args.${field}, and this delegation does not grant ${what}; set args.${field} to false.`,
      ),
    ];
  }
  if (typeof value !== 'boolean') {
    return [violation(field, granted ? 'a boolean' : false, value, `args.${field} must be a boolean, but it is ${typeName(value)}.`)];
  }
  if (granted || value === false) return [];
  return [violation(field, false, value, `The invocation asks for ${what} (args.${field} is true), which this delegation does not grant.`)];
}

/** How one restricted argument is checked against its allow-list. */
interface AllowListCheck {
  readonly arg: 'tool' | 'resource_uri' | 'data_class';
  readonly list: 'allowed_tools' | 'allowed_resources' | 'allowed_data_classes';
  /** Completes "The invocation …" when the argument is absent. */
  readonly missing: string;
  /** Completes "args.X must be …" when it is not a string. */
  readonly kind: string;
  /** "Tool", "Resource", …: the start of the not-allowed message. */
  readonly noun: string;
  readonly verb: 'is not in' | 'is not covered by';
  /** Why the value cannot be matched at all, or undefined. */
  readonly unusable?: (value: string) => string | undefined;
  readonly allows: (allowed: readonly string[], value: string) => boolean;
}

const TOOL_CHECK: AllowListCheck = {
  arg: 'tool',
  list: 'allowed_tools',
  missing: 'does not name its tool in args.tool',
  kind: 'a string naming the tool',
  noun: 'Tool',
  verb: 'is not in',
  allows: (allowed, v) => allowed.includes(v),
};

const RESOURCE_CHECK: AllowListCheck = {
  arg: 'resource_uri',
  list: 'allowed_resources',
  missing: 'does not declare args.resource_uri',
  kind: 'a string URI',
  noun: 'Resource',
  verb: 'is not covered by',
  unusable: (uri) => {
    try {
      normalizeResourceUri(uri);
      return undefined;
    } catch (e) {
      return e instanceof BatonError ? e.message : 'The resource URI is not valid.';
    }
  },
  allows: listGrants,
};

const DATA_CLASS_CHECK: AllowListCheck = {
  arg: 'data_class',
  list: 'allowed_data_classes',
  missing: 'does not declare args.data_class',
  kind: 'a string',
  noun: 'Data class',
  verb: 'is not in',
  allows: (allowed, v) => allowed.includes(v),
};

/** A restricted allow-list fails closed: the argument must be present, a string, and allowed. */
function evalAllowList(check: AllowListCheck, policy: Policy, args: Record<string, unknown>): Violation[] {
  const allowed = restriction(policy[check.list]);
  if (allowed === undefined) return [];
  const value = argOf(args, check.arg);
  const fail = (message: string) => [violation(check.arg, allowed, value, message)];
  if (value === undefined) {
    return fail(`The invocation ${check.missing}, but this delegation only allows ${check.list} ${show(allowed)}.`);
  }
  if (typeof value !== 'string') return fail(`args.${check.arg} must be ${check.kind}, but it is ${typeName(value)}.`);
  const reason = check.unusable?.(value);
  if (reason !== undefined) return fail(reason);
  if (check.allows(allowed, value)) return [];
  return fail(`${check.noun} ${show(value)} ${check.verb} ${check.list} ${show(allowed)} of this delegation.`);
}

/** Every way the args fall outside one policy; [] when the policy permits them. */
export function evaluateArgs(policy: Policy, args: Record<string, unknown>): Violation[] {
  return [
    ...evalAllowList(TOOL_CHECK, policy, args),
    ...evalCost(policy, args),
    ...evalFlag('pii_access', policy, args),
    ...evalFlag('write_access', policy, args),
    ...evalAllowList(RESOURCE_CHECK, policy, args),
    ...evalAllowList(DATA_CLASS_CHECK, policy, args),
  ];
}

// ---------------------------------------------------------------------------
// Effective limits of a chain, root first.

export interface EffectiveLimits {
  allowed_tools?: string[];
  max_cost_usd?: number;
  pii_access: boolean;
  write_access: boolean;
  max_calls?: number;
  max_spend_usd?: number;
  max_depth?: number;
  allowed_resources?: string[];
  allowed_data_classes?: string[];
}

/**
 * The intersection of the restricting name lists of each prefix of `lists` (the first 1, 2, … of
 * them), each in the order of its first restricting list; undefined while none restricts. One pass:
 * explain reads every prefix of a chain, and computing each afresh was quadratic in the chain.
 */
export function namesByPrefix(lists: readonly (readonly string[] | undefined)[]): (string[] | undefined)[] {
  let shared: string[] | undefined;
  return lists.map((list) => {
    const restricting = restriction(list);
    if (restricting !== undefined) {
      if (shared === undefined) shared = [...new Set(restricting)];
      else {
        const allowed = new Set(restricting);
        shared = shared.filter((n) => allowed.has(n));
      }
    }
    return shared;
  });
}

/** effectiveLimits(policies).allowed_tools without the rest: the tool gate reads only this, on every verify. */
export function effectiveAllowedTools(policies: readonly Policy[]): string[] | undefined {
  return intersectNames(policies.map((p) => p.allowed_tools));
}

/** Intersection of the restricting name lists, in the order of the first; undefined if none restricts. */
function intersectNames(lists: readonly (readonly string[] | undefined)[]): string[] | undefined {
  return namesByPrefix(lists).at(-1);
}

/**
 * Intersection of pattern lists. Two patterns that share a URI are nested, so
 * the intersection is exactly the candidates (from any list) that every list
 * covers; kept in normal form, without duplicates or entries another covers,
 * in the order each first appears. Each list is indexed once (ResourcePatternIndex).
 *
 * `attenuated`: each list is known to narrow the one before it (checkAttenuation found nothing
 * along the chain), so the last restricting list, whose entries every other list covers, holds
 * every URI of the intersection: only it is indexed. A verify of 16 records of 256 long prefixes
 * spent half a second of the one thread indexing all 4,096 (a review).
 */
function intersectPatterns(lists: readonly (readonly string[] | undefined)[], attenuated: boolean): string[] | undefined {
  const restricting = lists.map(restriction).filter((l): l is readonly string[] => l !== undefined);
  if (restricting.length === 0) return undefined;
  // Every entry's normal form, in the order of first appearance (a policy's entries parse once, when it is read).
  const candidates = new Map<string, ResourcePattern>();
  for (const list of restricting) {
    for (const entry of list) {
      const pattern = parseResourcePattern(entry);
      candidates.set(formatResourcePattern(pattern), pattern);
    }
  }
  let shared: [string, ResourcePattern][];
  if (attenuated) {
    const last = new Set(restricting.at(-1)!.map((entry) => formatResourcePattern(parseResourcePattern(entry))));
    shared = [...candidates].filter(([normal]) => last.has(normal));
  } else {
    const byList = new ResourcePatternIndex();
    restricting.forEach((list, owner) => list.forEach((entry) => byList.add(owner, parseResourcePattern(entry))));
    shared = [...candidates].filter(([, pattern]) => byList.ownersCovering(pattern).size === restricting.length);
  }
  // Distinct normal forms never cover each other both ways: drop each one another covers.
  const bySharedEntry = new ResourcePatternIndex();
  for (const [, pattern] of shared) bySharedEntry.add(0, pattern);
  return shared.filter(([, pattern]) => bySharedEntry.ownersCovering(pattern, true).size === 0).map(([normal]) => normal);
}

function minMoney(values: readonly (number | undefined)[]): number | undefined {
  const micros = values.filter((v): v is number => v !== undefined).map((v) => usdToMicros(v, 'floor'));
  return micros.length === 0 ? undefined : microsToUsd(Math.min(...micros) as Micros);
}

function minCount(values: readonly (number | undefined)[]): number | undefined {
  const set = values.filter((v): v is number => v !== undefined);
  return set.length === 0 ? undefined : Math.min(...set);
}

/**
 * The tightest value of each limit across a chain (root first), for the verify
 * response. Money ceilings are reported as enforced (rounded down to micros).
 * max_depth is the number of hops still allowed below the leaf: a DR at index i
 * of n allows max_depth_i − (n − 1 − i) more, never below 0. `attenuated`: the caller has
 * found each policy to narrow the one before it (checkAttenuation): the resources are then read
 * from the last list that restricts them (see intersectPatterns); the answer is the same.
 */
export function effectiveLimits(policies: readonly Policy[], { attenuated = false }: { attenuated?: boolean } = {}): EffectiveLimits {
  const limits: EffectiveLimits = {
    pii_access: policies.length > 0 && policies.every((p) => p.pii_access === true),
    write_access: policies.length > 0 && policies.every((p) => p.write_access === true),
  };
  const n = policies.length;
  const tools = intersectNames(policies.map((p) => p.allowed_tools));
  const resources = intersectPatterns(
    policies.map((p) => p.allowed_resources),
    attenuated,
  );
  const dataClasses = intersectNames(policies.map((p) => p.allowed_data_classes));
  const maxCost = minMoney(policies.map((p) => p.max_cost_usd));
  const maxSpend = minMoney(policies.map((p) => p.max_spend_usd));
  const maxCalls = minCount(policies.map((p) => p.max_calls));
  const maxDepth = minCount(policies.map((p, i) => (p.max_depth === undefined ? undefined : Math.max(0, p.max_depth - (n - 1 - i)))));
  if (tools !== undefined) limits.allowed_tools = tools;
  if (maxCost !== undefined) limits.max_cost_usd = maxCost;
  if (maxCalls !== undefined) limits.max_calls = maxCalls;
  if (maxSpend !== undefined) limits.max_spend_usd = maxSpend;
  if (maxDepth !== undefined) limits.max_depth = maxDepth;
  if (resources !== undefined) limits.allowed_resources = resources;
  if (dataClasses !== undefined) limits.allowed_data_classes = dataClasses;
  return limits;
}
