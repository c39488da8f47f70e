/**
 * DRS 4.0 record payloads and bundles: the zod schemas that say what a
 * well-formed record is (docs/design.md, wire format).
 *
 * Schemas are strict objects: an unknown field is refused, never ignored,
 * because a constraint Baton does not understand must not silently widen what
 * a record grants. Limits keep every record small enough to verify cheaply.
 */
import { z } from 'zod';
import { BatonError } from './errors.js';
import { isRecordHash, type RecordHash } from './hash.js';
import { ROOT_TYPES } from './lists.js';
import { MAX_NAME_LENGTH, PolicySchema } from './policy.js';

export const DRS_VERSION = '4.0';
/** More than 16 DRs in a chain is refused (configurable lower). */
export const MAX_CHAIN_DEPTH = 16;
export const MAX_JWS_LENGTH = 64 * 1024;
/**
 * Schemas accept lists up to this bound so that an over-deep chain is
 * reported as CHAIN_TOO_DEEP by the verifier rather than as a shape error;
 * the bound itself only stops absurd inputs early.
 */
const MAX_LISTED_RECORDS = 64;

const safeInt = z.number().int().min(Number.MIN_SAFE_INTEGER).max(Number.MAX_SAFE_INTEGER);
const unixSeconds = safeInt.min(0);

/** Shape only; the key itself is checked (canonical, not small order) in block C. */
export const DidKeySchema = z
  .string()
  .max(128)
  .regex(/^did:key:z[1-9A-HJ-NP-Za-km-z]+$/, 'must be a did:key identifier (did:key:z...)');

export const RecordHashSchema = z.custom<RecordHash>(isRecordHash, 'must be sha256: followed by 64 lowercase hex digits');

/** An absolute command path: `/seg/seg`, no empty or dot segments. */
export const CommandSchema = z
  .string()
  .min(1)
  .max(256)
  .regex(/^(\/[A-Za-z0-9_~:@!$&'()*+,;=-][A-Za-z0-9._~:@!$&'()*+,;=-]*)+$/, 'must be an absolute path such as /mcp/tools/call');

const jtiWithPrefix = (prefix: string) =>
  z
    .string()
    .max(160)
    .refine((s) => s.startsWith(prefix) && s.length > prefix.length, `must start with "${prefix}"`)
    .refine((s) => /^[\x21-\x7e]+$/.test(s), 'must be printable ASCII without spaces');

const JsonObjectSchema = z.record(z.string(), z.unknown());

/**
 * DRS's optional trace fields (drs-verify's types): kept as signed, read and enforced by nobody.
 * A correlation_id links a record to a session or workflow; an invocation's result_hash and
 * policy_evaluation are its issuer's notes. Bounded, as every text a record may carry is.
 */
const DrsTraceText = (max: number) => z.string().min(1).max(max);

export const RootTypeSchema = z.enum(ROOT_TYPES);

export const ConsentSchema = z.looseObject({
  method: z.string().min(1).max(256),
  timestamp: z.string().min(1).max(64),
});

export const DelegationPayloadSchema = z
  .strictObject({
    iss: DidKeySchema,
    sub: DidKeySchema,
    aud: DidKeySchema,
    drs_v: z.literal(DRS_VERSION),
    drs_type: z.literal('delegation-receipt'),
    cmd: CommandSchema,
    policy: PolicySchema,
    nbf: unixSeconds,
    exp: unixSeconds.nullable(),
    iat: unixSeconds,
    jti: jtiWithPrefix('dr:'),
    prev_dr_hash: RecordHashSchema.nullable().optional(),
    drs_root_type: RootTypeSchema.optional(),
    drs_consent: ConsentSchema.optional(),
    drs_regulatory: JsonObjectSchema.optional(),
    drs_status_list_index: safeInt.min(0).optional(),
    correlation_id: DrsTraceText(256).optional(),
    // DRS: an opaque object "for the tool server to enforce". Baton enforces `policy` only.
    budget: JsonObjectSchema.optional(),
  })
  .superRefine((p, ctx) => {
    const isRoot = p.prev_dr_hash == null;
    if (p.exp !== null && p.exp < p.nbf) {
      ctx.addIssue({ code: 'custom', path: ['exp'], message: 'must not be before nbf' });
    }
    if (isRoot && p.drs_root_type === undefined) {
      ctx.addIssue({ code: 'custom', path: ['drs_root_type'], message: 'a root delegation must state drs_root_type' });
    }
    if (!isRoot && (p.drs_root_type !== undefined || p.drs_consent !== undefined)) {
      ctx.addIssue({ code: 'custom', path: ['drs_root_type'], message: 'only a root delegation may carry drs_root_type or drs_consent' });
    }
    if (p.drs_root_type === 'human' && p.drs_consent === undefined) {
      ctx.addIssue({ code: 'custom', path: ['drs_consent'], message: 'a root delegation from a human must carry drs_consent' });
    }
  });

export type DelegationPayload = z.infer<typeof DelegationPayloadSchema>;

/**
 * An invocation's args. The tool it names is bounded as a policy's tool names are: the service
 * stores and indexes it (a name of kilobytes failed the insert of every verify batched with it,
 * whatever the chain allowed), and no tool of a catalog or a grant can have a longer one.
 */
const InvocationArgsSchema = JsonObjectSchema.superRefine((args, ctx) => {
  const tool = args['tool'];
  if (typeof tool === 'string' && tool.length > MAX_NAME_LENGTH)
    ctx.addIssue({ code: 'custom', path: ['tool'], message: `must be a tool name of at most ${MAX_NAME_LENGTH} characters` });
});

export const InvocationPayloadSchema = z.strictObject({
  iss: DidKeySchema,
  sub: DidKeySchema,
  drs_v: z.literal(DRS_VERSION),
  drs_type: z.literal('invocation-receipt'),
  cmd: CommandSchema,
  args: InvocationArgsSchema,
  dr_chain: z.array(RecordHashSchema).min(1).max(MAX_LISTED_RECORDS),
  tool_server: z.string().min(1).max(512),
  iat: unixSeconds,
  jti: jtiWithPrefix('inv:'),
  result_hash: DrsTraceText(256).optional(),
  policy_evaluation: DrsTraceText(4096).optional(),
  correlation_id: DrsTraceText(256).optional(),
});

export type InvocationPayload = z.infer<typeof InvocationPayloadSchema>;

const JwsStringSchema = z.string().min(1).max(MAX_JWS_LENGTH);

export const BundleSchema = z.strictObject({
  bundle_version: z.literal(DRS_VERSION),
  invocation: JwsStringSchema,
  receipts: z.array(JwsStringSchema).max(MAX_LISTED_RECORDS),
});

export type Bundle = z.infer<typeof BundleSchema>;

/** At most this many field problems are listed in details.issues. */
const MAX_REPORTED_ISSUES = 50;

/**
 * Of a union's alternatives, the one the value came closest to (strictly fewest issues), whose
 * issues say what to fix: `{receipts: [17 records]}` is an array too long, not "Invalid input"
 * because it is not `{receipt}` either. Undefined on a tie, where no shape was meant more than another.
 */
function closestBranch(branches: readonly (readonly z.core.$ZodIssue[])[]): readonly z.core.$ZodIssue[] | undefined {
  const sorted = [...branches].sort((a, b) => a.length - b.length);
  if (sorted.length === 0 || (sorted.length > 1 && sorted[0]!.length === sorted[1]!.length)) return undefined;
  return sorted[0];
}

/**
 * An issue as the end of "<field> ...". zod's own default messages read "limit Too big: expected
 * number to be <=500" there, so bounds, missing members and wrong types are said plainly; a message
 * a schema wrote itself ("must name at least one scope") is kept as written.
 */
function issuePhrase(issue: z.core.$ZodIssue, missing: boolean): string {
  if (!/^(Too (big|small)|Invalid (input|option))\b/.test(issue.message)) return issue.message;
  const countable: Record<string, [string, string]> = {
    string: ['character', 'characters'],
    array: ['item', 'items'],
    set: ['item', 'items'],
  };
  switch (issue.code) {
    case 'too_big':
    case 'too_small': {
      const limit = issue.code === 'too_big' ? issue.maximum : issue.minimum;
      const bound =
        issue.code === 'too_big'
          ? issue.inclusive === false
            ? 'less than'
            : 'at most'
          : issue.inclusive === false
            ? 'more than'
            : 'at least';
      if (issue.origin === 'date')
        return `must be ${issue.code === 'too_big' ? 'no later than' : 'no earlier than'} ${new Date(Number(limit)).toISOString()}`;
      const unit = countable[issue.origin];
      return unit === undefined
        ? `must be ${bound} ${String(limit)}`
        : `must have ${bound} ${String(limit)} ${Number(limit) === 1 ? unit[0] : unit[1]}`;
    }
    case 'invalid_value': {
      const said = issue.values.map((v) => (typeof v === 'string' ? JSON.stringify(v) : String(v)));
      const fits = said.length === 1 ? said[0]! : `one of ${said.join(', ')}`;
      return missing ? `is required (${fits})` : `must be ${fits}`;
    }
    case 'invalid_type':
      return /received undefined$/.test(issue.message)
        ? `is required (${issue.expected})`
        : `must be ${issue.expected === 'int' ? 'an integer' : `of type ${issue.expected}`}`;
    default:
      return issue.message;
  }
}

/** Whether `path` names a member `value` has (zod's issues do not carry the input, so a missing member is told this way). */
function presentAt(value: unknown, path: readonly PropertyKey[]): boolean {
  let at: unknown = value;
  for (const key of path) {
    if (at === null || typeof at !== 'object' || !Object.prototype.hasOwnProperty.call(at, key)) return false;
    at = (at as Record<PropertyKey, unknown>)[key];
  }
  return at !== undefined;
}

/**
 * Turns zod issues into the one error type, naming every offending field
 * (each unknown key on its own) so a caller can fix everything at once.
 */
export function parseWith<T>(
  schema: z.ZodType<T>,
  value: unknown,
  what: string,
  code: 'INVALID_FIELD' | 'INVALID_REQUEST' = 'INVALID_FIELD',
): T {
  const result = schema.safeParse(value);
  if (result.success) return result.data;
  throw refusalOf(result.error, value, what, code);
}

/**
 * The refusal of `value` that `error` found, every issue in Baton's words under one stable code:
 * parseWith's, and the validation hook's of routes that @hono/zod-openapi validates.
 */
export function refusalOf(
  error: z.ZodError,
  value: unknown,
  what: string,
  code: 'INVALID_FIELD' | 'INVALID_REQUEST' = 'INVALID_FIELD',
): BatonError {
  const whole = code === 'INVALID_FIELD' ? '(root)' : `(${what === 'request body' ? 'body' : what})`;
  const issues: { field: string; message: string }[] = [];
  const collect = (list: readonly z.core.$ZodIssue[], prefix: readonly PropertyKey[]): void => {
    for (const issue of list) {
      const path = [...prefix, ...issue.path];
      const base = path.map(String).join('.');
      const branch = issue.code === 'invalid_union' ? closestBranch(issue.errors) : undefined;
      if (branch !== undefined) collect(branch, path);
      else if (issue.code === 'unrecognized_keys') {
        for (const key of issue.keys) issues.push({ field: base ? `${base}.${key}` : key, message: 'is not a field Baton accepts here' });
      } else {
        issues.push({ field: base || whole, message: issuePhrase(issue, path.length > 0 && !presentAt(value, path)) });
      }
    }
  };
  collect(error.issues, []);
  const first = issues[0] ?? { field: whole, message: 'is not valid' };
  const more = issues.length > 1 ? ` (${issues.length - 1} more in details.issues)` : '';
  return new BatonError(code, {
    message: `The ${what} is not valid: ${first.field} ${first.message}${more}.`,
    details: { what, issues: issues.slice(0, MAX_REPORTED_ISSUES) },
  });
}
