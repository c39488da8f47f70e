/**
 * The shape of each answer BatonClient takes from the service: the members the SDK and its callers
 * read, with their JSON types (openapi.yaml, src/api/wire-types.ts). Not a schema validator, and
 * dependency-free on purpose (the SDK depends on the noble libraries alone): enough that a body
 * which is not Baton's answer (a proxy's, another service's, an older or broken server's) is
 * refused as UNEXPECTED_RESPONSE naming the member, rather than taken as success or surfacing later
 * as a TypeError. Nested values nobody here reads are checked only for their JSON type.
 */

export type JsonKind = 'string' | 'number' | 'boolean' | 'object' | 'array';

/** A JSON kind, an object with members of their own shapes, a list, or one of those absent or null. */
export type Shape = JsonKind | ObjectShape | ListShape | ModifiedShape;
export interface ObjectShape {
  readonly [member: string]: Shape;
}

class ListShape {
  constructor(readonly item: Shape) {}
}

class ModifiedShape {
  constructor(
    readonly shape: Shape,
    readonly mayBeAbsent: boolean,
    readonly mayBeNull: boolean,
  ) {}
}

export const listOf = (item: Shape): Shape => new ListShape(item);
/** Modifiers compose: optional(nullable(x)) may be absent or null. */
const modified = (shape: Shape, mayBeAbsent: boolean, mayBeNull: boolean): Shape =>
  shape instanceof ModifiedShape
    ? new ModifiedShape(shape.shape, mayBeAbsent || shape.mayBeAbsent, mayBeNull || shape.mayBeNull)
    : new ModifiedShape(shape, mayBeAbsent, mayBeNull);
export const optional = (shape: Shape): Shape => modified(shape, true, false);
export const nullable = (shape: Shape): Shape => modified(shape, false, true);

/**
 * Deeper than any answer of Baton's (a delegation tree is at most 16 records deep): a body nested
 * further is refused before its walk could overflow the stack.
 */
const MAX_NESTING = 64;

/** Why `value` does not have `shape` (naming the first member that differs), or undefined when it does. */
export function shapeProblem(value: unknown, shape: Shape, path = '', nesting = 0): string | undefined {
  const name = path === '' ? 'the body' : `\`${path}\``;
  if (nesting > MAX_NESTING) return `${name} is nested deeper than any answer of Baton's`;
  if (shape instanceof ModifiedShape) {
    if ((value === undefined && shape.mayBeAbsent) || (value === null && shape.mayBeNull)) return undefined;
    if (value === null) return `${name} is null, not ${expected(shape.shape)}`;
    return shapeProblem(value, shape.shape, path, nesting);
  }
  if (value === undefined) return `${name} is missing (${expected(shape)} expected)`;
  const kind = kindOf(value);
  if (shape instanceof ListShape) {
    if (!Array.isArray(value)) return `${name} is ${article(kind)}, not an array`;
    for (const [i, item] of value.entries()) {
      const problem = shapeProblem(item, shape.item, `${path}[${i}]`, nesting + 1);
      if (problem !== undefined) return problem;
    }
    return undefined;
  }
  if (typeof shape === 'string') return kind === shape ? undefined : `${name} is ${article(kind)}, not ${article(shape)}`;
  if (kind !== 'object') return `${name} is ${article(kind)}, not a JSON object`;
  for (const [member, memberShape] of Object.entries(shape)) {
    const problem = shapeProblem(
      (value as Record<string, unknown>)[member],
      memberShape,
      path === '' ? member : `${path}.${member}`,
      nesting + 1,
    );
    if (problem !== undefined) return problem;
  }
  return undefined;
}

function kindOf(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'array';
  return typeof value;
}

const article = (kind: string): string =>
  kind === 'null' ? 'null' : kind === 'object' ? 'a JSON object' : `a${/^[aeiou]/.test(kind) ? 'n' : ''} ${kind}`;

function expected(shape: Shape): string {
  if (shape instanceof ModifiedShape) return expected(shape.shape);
  if (shape instanceof ListShape) return 'an array';
  return typeof shape === 'string' ? article(shape) : 'a JSON object';
}

// ---------------------------------------------------------------- the service's answers

const SERVICE_RECEIPT_REF = nullable('object');

/** A delegation record as answers echo it: its hash, its JWS and the signed members a reader shows. */
const RECORD: ObjectShape = {
  hash: 'string',
  jws: 'string',
  iss: 'string',
  aud: 'string',
  sub: 'string',
  cmd: 'string',
  policy: 'object',
  nbf: 'number',
  exp: nullable('number'),
  parent_hash: nullable('string'),
  revoked_by: optional(nullable('string')),
};

/** A subtree's use, as `baton chain` shows it. */
const USAGE: Shape = {
  calls_used: 'number',
  max_calls: nullable('number'),
  declared_usd: 'number',
  metered_usd: 'number',
  metered_invocations: 'number',
  unmetered_invocations: 'number',
  unavailable_invocations: 'number',
  calibration: nullable('number'),
  calibration_flag: nullable('string'),
  max_spend_usd: nullable('number'),
  spend_reserved_usd: nullable('number'),
};

export const SUBMIT_RESULT: Shape = {
  created: 'boolean',
  delegations: listOf({ ...RECORD, service_receipt: SERVICE_RECEIPT_REF }),
  tenant_id: optional('string'),
};

export const ISSUE_RESULT: Shape = {
  custodial_did: 'string',
  tenant_id: 'string',
  delegation: { ...RECORD, service_receipt: SERVICE_RECEIPT_REF },
};

/**
 * An allow: what verify() judges it by, and what the MCP middleware hands on (counters, warnings).
 * `context`, `binding` and `service_receipt` are passed on as they are (verify() reads the receipt
 * itself, when the client pins service keys).
 */
export const VERIFY_ALLOW: Shape = {
  valid: 'boolean',
  invocation_id: 'string',
  dry_run: 'boolean',
  retry: 'boolean',
  counters: listOf('object'),
  warnings: listOf('object'),
  context: optional('object'),
};

/** A deny: callers read its error, its violations and the approval it opened. */
export const VERIFY_DENY: Shape = {
  valid: 'boolean',
  error: { code: 'string', message: 'string', suggestion: 'string', block: optional(nullable('string')) },
  violations: listOf('object'),
  approval: optional({ id: 'string', status: 'string', expires_at: 'number' }),
};

export const REVOKE_RESULT: Shape = {
  hash: 'string',
  status: 'string',
  already_revoked: 'boolean',
  descendants: 'number',
  revoked_at: 'string',
  revoked_by: { kind: 'string' },
  reason: nullable('string'),
  service_receipt: SERVICE_RECEIPT_REF,
  tenants: optional(listOf('object')),
};

export const ACTUAL: Shape = { jti: 'string', source: 'string', cost_usd: nullable('number'), recorded_at: 'string' };

export const DELEGATION_DETAIL: Shape = {
  ...RECORD,
  status: 'string',
  depth: 'number',
  root_hash: 'string',
  usage: USAGE,
  revoked_reason: nullable('string'),
};

export const DELEGATION_CHAIN: Shape = {
  hash: 'string',
  root_principal: 'string',
  receipts: listOf('string'),
  records: listOf({ ...RECORD, status: 'string', depth: 'number', service_receipt: SERVICE_RECEIPT_REF }),
};

const TREE_NODE: { [member: string]: Shape } = {
  hash: 'string',
  status: 'string',
  iss: 'string',
  aud: 'string',
  policy: 'object',
  exp: nullable('number'),
  calls_used: 'number',
  max_calls: nullable('number'),
};
// A node's children are nodes: readers walk the whole tree (at most 1000 records).
TREE_NODE['children'] = listOf(TREE_NODE);
export const DELEGATION_TREE: Shape = { count: 'number', truncated: 'boolean', tree: TREE_NODE };

export const INVOCATION_PAGE: Shape = {
  invocations: listOf({ jti: 'string', decision: 'string', created_at: 'string', dr_chain: listOf('string') }),
  next_cursor: nullable('string'),
};

/** Allowed and denied decisions alike (a denial's jti may be null). */
export const DECISION_PAGE: Shape = {
  invocations: listOf({ decision: 'string', created_at: 'string', dr_chain: listOf('string') }),
  next_cursor: nullable('string'),
};

export const INVOCATION_DETAIL: Shape = { jti: 'string', decision: 'string', denials: listOf('object') };

export const SERVICE_RECEIPT_PAGE: Shape = {
  service_receipts: listOf({ id: 'number', kind: 'string', subject: 'string', jws: 'string', kid: 'string' }),
  next_after: nullable('number'),
};

export const LOG_INFO: Shape = { origin: 'string', tree_size: 'number', root_hash: 'string', verifier_keys: listOf('string') };
export const LOG_PROOF: Shape = {
  leaf_index: 'number',
  tree_size: 'number',
  proof: 'string',
  service_receipt: { id: 'number', jws: 'string' },
};
export const LOG_CONSISTENCY: Shape = { from: 'number', to: 'number', proof: listOf('string') };

/** verifyServiceReceipt() decodes each public key. */
export const SERVICE_KEY_LIST: Shape = { keys: listOf({ kid: 'string', did: 'string', public_key: 'string', status: 'string' }) };
export const JWKS: Shape = { keys: listOf({ kid: 'string', kty: 'string', crv: 'string', x: 'string' }) };
export const STATUS: Shape = { status: 'string' };

export const TENANT: ObjectShape = { id: 'string', name: 'string', created_at: 'string' };
export const TENANT_LIST: Shape = { tenants: listOf(TENANT) };
export const TRUSTED_ROOT: Shape = { tenant_id: 'string', did: 'string', label: nullable('string') };
export const TRUSTED_ROOT_LIST: Shape = { roots: listOf(TRUSTED_ROOT) };

const API_KEY: ObjectShape = { id: 'string', scopes: listOf('string'), tenant_id: nullable('string'), tool_server: nullable('string') };
export const API_KEY_LIST: Shape = { api_keys: listOf(API_KEY) };
export const CREATED_API_KEY: Shape = { ...API_KEY, key: 'string' };
export const ROTATED_API_KEY: Shape = { key: CREATED_API_KEY, previous: API_KEY };

export const TOOL_DOCUMENT: Shape = {
  version: 'number',
  strict: 'boolean',
  default_decision: 'string',
  rules: listOf('object'),
  approvers: listOf('string'),
  webhook_url: nullable('string'),
  tools: listOf('object'),
  hash: 'string',
  catalog_hash: 'string',
};

export const APPROVAL: Shape = {
  id: 'string',
  status: 'string',
  tool_server: 'string',
  invocation_jti: 'string',
  dr_chain: listOf('string'),
  expires_at: 'number',
  decision: nullable('object'),
};

export const GRANT: Shape = { dr_hash: 'string', status: 'string', explanation: 'string', decision: nullable('object') };

/** One page of a keyset-paged list of `field`. */
export const pageOf = (field: string, item: Shape): Shape => ({ [field]: listOf(item), next_cursor: nullable('string') });
