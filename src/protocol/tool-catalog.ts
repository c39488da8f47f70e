/**
 * The tenant tool catalog: what each tool IS, declared by the tenant, so that
 * what a call needs is derived from the tool rather than from the agent's own
 * args.
 *
 * A catalog is a versioned document `{version, tools}`. Parsing is strict:
 * unknown keys are refused (an ignored field could be a risk flag someone
 * meant to set), every risk-relevant field must be given explicitly (a
 * forgotten flag must not silently read as "safe"), and names are exact, with
 * the same rules as tool names in a policy but without the "*" wildcard.
 *
 * Pure: no I/O, no clock.
 */
import { z } from 'zod';
import { sha256Hex } from './hash.js';
import { canonicalJson } from './jcs.js';
import { MAX_USD } from './money.js';
import { PolicyNameSchema, WILDCARD } from './policy.js';
import { parseWith } from './records.js';

export const TOOL_TYPES = ['read', 'write', 'external', 'internal'] as const;
/** Ordered from the smallest to the widest reach. */
export const BLAST_RADII = ['read', 'local', 'domain', 'organizational'] as const;
export const SENSITIVITY_TAGS = ['pii', 'pci', 'secrets'] as const;
/** The three flags of the lethal trifecta. */
export const RISK_FLAGS = ['untrusted_content', 'private_data_access', 'external_communication'] as const;

export type ToolType = (typeof TOOL_TYPES)[number];
export type BlastRadius = (typeof BLAST_RADII)[number];
export type SensitivityTag = (typeof SENSITIVITY_TAGS)[number];
export type RiskFlag = (typeof RISK_FLAGS)[number];

export const MAX_CATALOG_TOOLS = 1024;
/** A per-tool rate above one million calls a minute is a typo, not a limit. */
export const MAX_RATE_LIMIT_PER_MINUTE = 1_000_000;

export const ToolNameSchema = PolicyNameSchema.refine((s) => s !== WILDCARD, {
  message: 'A declared tool has an exact name; "*" is not a tool.',
});

const ACTION_PART = '[a-z][a-z0-9_.-]{0,63}';
const ACTION_TYPE = new RegExp(`^${ACTION_PART}:${ACTION_PART}$`);
/** `category:action` or `category:*`, as rules may match them. */
export const ACTION_TYPE_PATTERN = new RegExp(`^${ACTION_PART}:(?:${ACTION_PART}|\\*)$`);

/** `category:action`, lower case, so that two spellings can never name the same action. */
export const ActionTypeSchema = z
  .string()
  .max(129)
  .regex(ACTION_TYPE, 'must be category:action in lower case letters, digits, "_", "." or "-", each part starting with a letter');

function uniqueList<T extends string>(item: z.ZodType<T>, max: number) {
  return z
    .array(item)
    .max(max)
    .refine((xs) => new Set(xs).size === xs.length, { message: 'must not list an entry twice' });
}

export const ToolDeclarationSchema = z.strictObject({
  name: ToolNameSchema,
  type: z.enum(TOOL_TYPES),
  blast_radius: z.enum(BLAST_RADII),
  untrusted_content: z.boolean(),
  private_data_access: z.boolean(),
  external_communication: z.boolean(),
  tags: uniqueList(z.enum(SENSITIVITY_TAGS), SENSITIVITY_TAGS.length),
  action_type: ActionTypeSchema,
  rate_limit_per_minute: z.int().min(1).max(MAX_RATE_LIMIT_PER_MINUTE).optional(),
  cost_per_invocation_usd: z.number().nonnegative().max(MAX_USD).optional(),
});

export type ToolDeclaration = z.infer<typeof ToolDeclarationSchema>;

/**
 * The key under which two names count as the same for a reader, or for a tool
 * server that tidies names: Unicode compatibility form, whitespace, control and
 * invisible characters (soft hyphen, zero-width joiners) dropped, case folded.
 * Declared names must differ in it, and a call naming a look-alike of a
 * declared tool ("paid_search " for "paid_search") is refused rather than
 * treated as undeclared, which would skip the declared tool's requirements
 * (see resolveTool).
 */
export function confusableKey(name: string): string {
  return (
    name
      .normalize('NFKC')
      .replace(/[\s\p{Cc}\p{Default_Ignorable_Code_Point}]/gu, '')
      // Upper then lower: close to full case folding, so "STRASSE" meets "straße" (toLowerCase alone keeps ß).
      .toUpperCase()
      .toLowerCase()
      .normalize('NFKC')
  );
}

/**
 * Lets a list-wide check run even when some items failed their own schema, so
 * that repeated names are reported together with every other issue.
 */
export const EVEN_WITH_ITEM_ISSUES = { when: (payload: { value: unknown }) => Array.isArray(payload.value) };

/** A string field of an item that may have failed its own schema; undefined if it is not a string. */
export function stringField(item: unknown, key: string): string | undefined {
  const value = typeof item === 'object' && item !== null ? (item as Record<string, unknown>)[key] : undefined;
  return typeof value === 'string' ? value : undefined;
}

const ToolListSchema = z
  .array(ToolDeclarationSchema)
  .max(MAX_CATALOG_TOOLS)
  .superRefine((tools, ctx) => {
    const seen = new Map<string, string>();
    tools.forEach((tool, i) => {
      const name = stringField(tool, 'name');
      if (name === undefined) return;
      const earlier = seen.get(confusableKey(name));
      if (earlier === undefined) {
        seen.set(confusableKey(name), name);
        return;
      }
      ctx.addIssue({
        code: 'custom',
        path: [i, 'name'],
        message:
          earlier === name
            ? `declares ${JSON.stringify(name)} twice`
            : `${JSON.stringify(name)} differs from the declared ${JSON.stringify(earlier)} only in case, Unicode form, whitespace or invisible characters`,
      });
    });
  }, EVEN_WITH_ITEM_ISSUES);

export const CatalogSchema = z.strictObject({
  /** Each change is a new version; the service assigns it. */
  version: z.int().min(1),
  tools: ToolListSchema,
});

export type Catalog = z.infer<typeof CatalogSchema>;

/** Validates a catalog document; throws INVALID_FIELD listing every issue under details.issues. */
export function parseCatalog(raw: unknown): Catalog {
  return parseWith(CatalogSchema, raw, 'tool catalog');
}

/**
 * A stored version's catalog, judged when it was published: the look-alike rule may have grown since
 * (whitespace, invisible characters, full case folding), and reading must not make a tenant's current
 * version unreadable. A call still resolves an exact name first, then the first look-alike.
 */
const StoredCatalogSchema = CatalogSchema.extend({ tools: z.array(ToolDeclarationSchema).max(MAX_CATALOG_TOOLS) });

export function parseStoredCatalog(raw: unknown): Catalog {
  return parseWith(StoredCatalogSchema, raw, 'stored tool catalog');
}

/** One declaration in a fixed key order with sorted tags, optional fields only when set. */
function canonicalTool(tool: ToolDeclaration): ToolDeclaration {
  const { rate_limit_per_minute, cost_per_invocation_usd } = tool;
  return {
    name: tool.name,
    type: tool.type,
    blast_radius: tool.blast_radius,
    untrusted_content: tool.untrusted_content,
    private_data_access: tool.private_data_access,
    external_communication: tool.external_communication,
    tags: [...tool.tags].sort(),
    action_type: tool.action_type,
    ...(rate_limit_per_minute === undefined ? {} : { rate_limit_per_minute }),
    ...(cost_per_invocation_usd === undefined ? {} : { cost_per_invocation_usd }),
  };
}

/** The catalog with tools sorted by name (UTF-16 order, as JCS sorts keys) and tags sorted. */
export function canonicalCatalog(catalog: Catalog): Catalog {
  const tools = catalog.tools.map(canonicalTool).sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  return { version: catalog.version, tools };
}

/** `sha256:` + hex SHA-256 of the JCS form of the canonical catalog: equal for any ordering of the same declarations. */
export function catalogHash(catalog: Catalog): `sha256:${string}` {
  return `sha256:${sha256Hex(canonicalJson(canonicalCatalog(catalog)))}`;
}

/**
 * The trifecta flags a tool carries, declared or implied. Implied, so that a
 * declaration cannot understate its own risk: an `external` tool communicates
 * externally, and a tool tagged pii, pci or secrets accesses private data.
 */
export function riskFlagsOf(tool: ToolDeclaration): ReadonlySet<RiskFlag> {
  const flags = new Set<RiskFlag>();
  if (tool.untrusted_content) flags.add('untrusted_content');
  if (tool.private_data_access || tool.tags.length > 0) flags.add('private_data_access');
  if (tool.external_communication || tool.type === 'external') flags.add('external_communication');
  return flags;
}

/** What a call's tool turned out to be. */
export type ResolvedTool =
  | { readonly kind: 'declared'; readonly tool: ToolDeclaration }
  /** Not in the catalog; `name` is absent when args.tool is missing or not a string. */
  | { readonly kind: 'undeclared'; readonly name?: string }
  /** Not in the catalog, but a look-alike (case, Unicode form, whitespace or invisible characters) of a declared tool. */
  | { readonly kind: 'confusable'; readonly name: string; readonly declared: ToolDeclaration };

/** Looks up the value of args.tool by exact name, noticing look-alikes of declared tools. */
export function resolveTool(catalog: Catalog, toolArg: unknown): ResolvedTool {
  if (typeof toolArg !== 'string') return { kind: 'undeclared' };
  const exact = catalog.tools.find((t) => t.name === toolArg);
  if (exact !== undefined) return { kind: 'declared', tool: exact };
  const key = confusableKey(toolArg);
  const lookalike = catalog.tools.find((t) => confusableKey(t.name) === key);
  if (lookalike !== undefined) return { kind: 'confusable', name: toolArg, declared: lookalike };
  return { kind: 'undeclared', name: toolArg };
}
