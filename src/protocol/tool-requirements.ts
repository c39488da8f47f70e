/**
 * What a call needs because of WHAT its tool is, taken from the catalog and
 * never from the agent's args:
 * - a `write` tool needs write_access granted by every delegation in the chain,
 *   whatever args.write_access says;
 * - a tool that accesses private data (flag, or any sensitivity tag) needs
 *   pii_access from every delegation;
 * - a declared cost per invocation is the floor of the estimate: a lower (or
 *   missing) estimate is raised to it, and the raised amount is what ceilings
 *   and budgets see. A floor above some delegation's max_cost_usd is denied,
 *   since no honest estimate could then fit;
 * - a tenant in strict mode denies undeclared tools (TOOL_UNDECLARED), and any
 *   tenant denies a look-alike of a declared tool, which a tool server that
 *   folds case or Unicode forms, or trims or strips invisible characters, might run as the declared one.
 *
 * Violations have the verify shape (dr_index where a delegation lacks the
 * grant) so they merge with the policy evaluation of the args.
 *
 * Pure: no I/O, no clock.
 */
import type { Violation } from './errors.js';
import { microsToUsd, usdToMicros, type Micros } from './money.js';
import type { Policy } from './policy.js';
import { type Catalog, type ResolvedTool, type ToolDeclaration } from './tool-catalog.js';

export interface ToolRequirements {
  readonly tool: string;
  /** Needed because the tool's type is `write`. */
  readonly write_access: boolean;
  /** Why pii_access is needed ("private_data_access", "tag pii", ...); empty when it is not. */
  readonly pii_access_because: readonly string[];
  /** The declared cost per invocation, rounded up: the least any call of it is estimated at. */
  readonly cost_floor_micros?: Micros;
}

export function requirementsOf(tool: ToolDeclaration): ToolRequirements {
  const piiBecause = [...(tool.private_data_access ? ['private_data_access'] : []), ...tool.tags.map((tag) => `tag ${tag}`)];
  const cost = tool.cost_per_invocation_usd;
  return {
    tool: tool.name,
    write_access: tool.type === 'write',
    pii_access_because: piiBecause,
    ...(cost === undefined ? {} : { cost_floor_micros: usdToMicros(cost, 'ceil') }),
  };
}

/** The declared estimate in micros (rounded up), or undefined when it is missing or not a valid amount. */
function declaredEstimateMicros(estimate: unknown): Micros | undefined {
  if (typeof estimate !== 'number') return undefined;
  try {
    return usdToMicros(estimate, 'ceil');
  } catch {
    return undefined; // policy evaluation reports the bad value wherever a limit needs it
  }
}

export interface FlooredEstimate {
  /** undefined when the args give no valid estimate and the tool declares no cost. */
  readonly micros: Micros | undefined;
  /** The tool's declared cost replaced a lower or missing estimate. */
  readonly raised: boolean;
}

/**
 * The estimate ceilings and budgets must see: the agent's estimate, raised to
 * the tool's declared cost per invocation when it is lower or missing.
 */
export function estimateWithFloor(estimate: unknown, tool: ResolvedTool): FlooredEstimate {
  const declared = declaredEstimateMicros(estimate);
  const floor = tool.kind === 'declared' ? requirementsOf(tool.tool).cost_floor_micros : undefined;
  if (floor !== undefined && (declared === undefined || floor > declared)) return { micros: floor, raised: true };
  return { micros: declared, raised: false };
}

function undeclared(tool: Exclude<ResolvedTool, { kind: 'declared' }>, catalog: Catalog): Violation {
  const required = `a tool declared in catalog version ${catalog.version}`;
  if (tool.kind === 'confusable') {
    return {
      code: 'TOOL_UNDECLARED',
      field: 'args.tool',
      required,
      actual: tool.name,
      message: `Tool ${JSON.stringify(tool.name)} is not declared; the catalog declares ${JSON.stringify(tool.declared.name)}, which differs only in case, Unicode form, whitespace or invisible characters. Tool names are exact.`,
    };
  }
  return {
    code: 'TOOL_UNDECLARED',
    field: 'args.tool',
    required,
    actual: tool.name ?? null,
    message:
      tool.name === undefined
        ? 'The invocation does not name its tool in args.tool as a string, and this tenant denies undeclared tools.'
        : `Tool ${JSON.stringify(tool.name)} is not declared in the tool catalog, and this tenant denies undeclared tools.`,
  };
}

function missingGrant(field: 'write_access' | 'pii_access', dr_index: number, policy: Policy, why: string): Violation {
  return {
    code: 'POLICY_VIOLATION',
    dr_index,
    field: `policy.${field}`,
    required: true,
    actual: policy[field] ?? null,
    message: `${why}, so every delegation must grant ${field}; this one does not (absent means false).`,
  };
}

function checkDeclared(tool: ToolDeclaration, policies: readonly Policy[]): Violation[] {
  const needs = requirementsOf(tool);
  const name = JSON.stringify(tool.name);
  const out: Violation[] = [];
  policies.forEach((policy, i) => {
    if (needs.write_access && policy.write_access !== true) {
      out.push(missingGrant('write_access', i, policy, `The catalog declares ${name} as a write tool`));
    }
    if (needs.pii_access_because.length > 0 && policy.pii_access !== true) {
      out.push(missingGrant('pii_access', i, policy, `The catalog declares ${name} with ${needs.pii_access_because.join(', ')}`));
    }
    const floor = needs.cost_floor_micros;
    const cap = policy.max_cost_usd;
    if (floor !== undefined && cap !== undefined && floor > usdToMicros(cap, 'floor')) {
      out.push({
        code: 'POLICY_VIOLATION',
        dr_index: i,
        field: 'policy.max_cost_usd',
        required: `at least ${microsToUsd(floor)}`,
        actual: cap,
        message: `The catalog declares that ${name} costs ${microsToUsd(floor)} USD per invocation, above max_cost_usd ${cap} of this delegation.`,
      });
    }
  });
  return out;
}

/**
 * Every condition the catalog adds to a call of `tool` under a chain of
 * policies (root first); [] when there is none. Undeclared tools in a
 * non-strict tenant add none here: the args-based policy evaluation and the
 * approval rules (which treat unknown properties as possibly matching) still apply.
 */
export function checkToolRequirements(
  tool: ResolvedTool,
  policies: readonly Policy[],
  opts: { catalog: Catalog; strict: boolean },
): Violation[] {
  switch (tool.kind) {
    case 'declared':
      return checkDeclared(tool.tool, policies);
    case 'confusable':
      return [undeclared(tool, opts.catalog)];
    case 'undeclared':
      return opts.strict ? [undeclared(tool, opts.catalog)] : [];
  }
}
