/**
 * Lethal trifecta detection: whether the tools a delegation lets its holder
 * call together read untrusted content, access private data and communicate
 * externally. An agent with all three can be steered by what it reads into
 * sending what it may see to anyone, so such a grant needs a human.
 *
 * The reach of a delegation is its allowed_tools; absent or ["*"] means every
 * tool the tenant lets anyone call. Undeclared tools fail closed:
 * - strict tenant: an undeclared tool cannot be called at all, so it adds
 *   nothing to the reach;
 * - non-strict tenant: an undeclared tool might be anything, so it counts as
 *   carrying all three flags. A list naming one is judged with those flags,
 *   and an unrestricted delegation always reaches "any undeclared tool",
 *   which is a trifecta on its own.
 *
 * Pure: no I/O, no clock.
 */
import { restriction } from './policy.js';
import { RISK_FLAGS, riskFlagsOf, type Catalog, type RiskFlag } from './tool-catalog.js';

/** Where a flag in the reach comes from. */
export type FlagSource =
  | { readonly kind: 'declared'; readonly tool: string }
  /** Named in allowed_tools but not declared (non-strict tenant): assumed to carry every flag. */
  | { readonly kind: 'undeclared'; readonly tool: string }
  /** The delegation is unrestricted in a non-strict tenant, so any undeclared tool is in reach. */
  | { readonly kind: 'any_undeclared' };

export interface TrifectaReport {
  /** True when the reach combines all three flags. */
  readonly detected: boolean;
  /** Whether the reach was the whole catalog (tools unrestricted) or the listed tools. */
  readonly reach: 'listed' | 'unrestricted';
  /** For each flag, every source in reach that carries it (empty when none does). */
  readonly sources: Readonly<Record<RiskFlag, readonly FlagSource[]>>;
}

export interface TrifectaOptions {
  readonly catalog: Catalog;
  /** Strict tenants deny undeclared tools, so those cannot be in reach. */
  readonly strict: boolean;
}

/** Judges one allowed_tools list (undefined or ["*"] = unrestricted). */
export function detectTrifecta(allowedTools: readonly string[] | undefined, opts: TrifectaOptions): TrifectaReport {
  const listed = restriction(allowedTools);
  const sources: Record<RiskFlag, FlagSource[]> = { untrusted_content: [], private_data_access: [], external_communication: [] };
  const add = (flags: Iterable<RiskFlag>, source: FlagSource) => {
    for (const flag of flags) sources[flag].push(source);
  };
  const byName = new Map(opts.catalog.tools.map((t) => [t.name, t]));
  const names = listed === undefined ? opts.catalog.tools.map((t) => t.name) : [...new Set(listed)];
  for (const name of names) {
    const tool = byName.get(name);
    if (tool !== undefined) add(riskFlagsOf(tool), { kind: 'declared', tool: name });
    else if (!opts.strict) add(RISK_FLAGS, { kind: 'undeclared', tool: name });
  }
  if (listed === undefined && !opts.strict) add(RISK_FLAGS, { kind: 'any_undeclared' });
  return {
    detected: RISK_FLAGS.every((flag) => sources[flag].length > 0),
    reach: listed === undefined ? 'unrestricted' : 'listed',
    sources,
  };
}

/** "web_fetch", "an undeclared tool "x"", "any undeclared tool": for explanations. */
export function describeSource(source: FlagSource): string {
  switch (source.kind) {
    case 'declared':
      return JSON.stringify(source.tool);
    case 'undeclared':
      return `undeclared ${JSON.stringify(source.tool)}`;
    case 'any_undeclared':
      return 'any undeclared tool';
  }
}

const FLAG_WORDS: Record<RiskFlag, string> = {
  untrusted_content: 'untrusted content',
  private_data_access: 'private data',
  external_communication: 'external communication',
};

/** One sentence naming the contributors of each flag, e.g. for a pending-approval explanation. */
export function describeTrifecta(report: TrifectaReport): string {
  const parts = RISK_FLAGS.map((flag) => {
    const from = report.sources[flag].map(describeSource);
    return `${FLAG_WORDS[flag]} from ${from.length === 0 ? 'no tool' : from.join(', ')}`;
  });
  return parts.join('; ');
}

/**
 * Why undeclared tools made up part of the reach, or undefined when none did:
 * a held grant or a pending approval must say what the tenant can change.
 */
export function describeUndeclared(report: TrifectaReport): string | undefined {
  const named = new Set<string>();
  let anyUndeclared = false;
  for (const flag of RISK_FLAGS) {
    for (const source of report.sources[flag]) {
      if (source.kind === 'undeclared') named.add(JSON.stringify(source.tool));
      else if (source.kind === 'any_undeclared') anyUndeclared = true;
    }
  }
  if (named.size === 0 && !anyUndeclared) return undefined;
  const why = [
    ...(named.size === 0
      ? []
      : [`tool${named.size === 1 ? '' : 's'} ${[...named].join(', ')} ${named.size === 1 ? 'is' : 'are'} undeclared`]),
    ...(anyUndeclared ? ['the delegation leaves its tools unrestricted, so it reaches any undeclared tool'] : []),
  ];
  return (
    `${why.join(', and ')}; in a non-strict tenant an undeclared tool counts as carrying all three risk flags, ` +
    'because nothing says what it does. Declare the tools, give the delegation an allowed_tools list of declared tools, ' +
    'or make the tenant strict, where undeclared tools are denied and count for nothing'
  );
}

/** The reason a reach is held or gated: its trifecta sources, and why undeclared tools count when they do. */
export function explainTrifecta(report: TrifectaReport): string {
  const undeclared = describeUndeclared(report);
  return `${describeTrifecta(report)}${undeclared === undefined ? '' : `. ${undeclared.charAt(0).toUpperCase()}${undeclared.slice(1)}`}`;
}
