import { z } from '@hono/zod-openapi';
import { SERVICE_ERROR_CODES } from '../protocol/errors.js';
import { ACTUAL_SOURCES, ROOT_TYPES } from '../protocol/lists.js';
import { PolicySchema } from '../protocol/policy.js';
import { DidKeySchema, MAX_JWS_LENGTH } from '../protocol/records.js';

/**
 * A schema or null. Not `.nullable()`: on a named (referenced) schema the
 * generator writes allOf[$ref, {type: [..., null]}], which null cannot satisfy.
 */
export const orNull = <T extends z.ZodType>(schema: T, error?: string) =>
  z.union([schema, z.null()], error === undefined ? undefined : { error });

/**
 * A protocol schema, ready for `.openapi(...)`. zod copies its methods onto
 * each schema when it is made, so one the protocol made before
 * @hono/zod-openapi extended zod has no `.openapi`; a copy made now has,
 * whichever order the modules load in.
 */
export const fromProtocol = <T extends z.ZodType>(schema: T): T => schema.clone();

export const ErrorCode = z.enum(SERVICE_ERROR_CODES, { error: 'must be a Baton error code' }).openapi('ErrorCode', {
  description:
    'Stable refusal codes: clients branch on them and a code never changes meaning. Codes with a block letter come from the verification pipeline. The HTTP status, message and suggestion of each are listed on the `/docs` page.',
});

export const Block = z.enum(['A', 'B', 'C', 'D', 'E', 'F', 'G']).openapi('Block', {
  description:
    'The verification block that produced a code: A shape, B linkage, C signatures and trust, D attenuation and policy, E time, F status, G runtime state.',
});

/**
 * A whole number as path or query text: decimal digits, no sign, spaces or leading zeros, at most 15
 * digits (so always a safe integer), read as a number. z.coerce would also take " 1", "+1", "0x10"
 * and "1e3", and numbers past what a column holds.
 */
export const WholeNumberText = z
  .string()
  .regex(/^(0|[1-9][0-9]{0,14})$/, 'must be a non-negative whole number of at most 15 digits, without leading zeros')
  .transform(Number);

export const RecordHash = z
  .string()
  .regex(/^sha256:[0-9a-f]{64}$/, 'must be sha256: followed by 64 lowercase hex digits')
  .openapi('RecordHash', {
    description: '`sha256:` + lowercase hex SHA-256 of the exact JWS string.',
    example: 'sha256:50d858e0985ecc7f60418aaf0cc5ab587f42c2570a884095a9e8ccacd0f6545c',
  });

export const Violation = z
  .strictObject({
    code: ErrorCode,
    dr_index: z
      .int()
      .min(0)
      .openapi({ description: 'Index of the DR in the chain (0 = root); absent for the invocation or the bundle.' })
      .optional(),
    dr_hash: RecordHash.optional(),
    field: z.string().openapi({ description: 'The field or argument concerned, e.g. `policy.max_cost_usd` or `args.tool`.' }),
    required: z.unknown().openapi({ description: 'What would have been accepted.' }).optional(),
    actual: z.unknown().openapi({ description: 'What was found (truncated when long).' }).optional(),
    message: z.string().optional(),
  })
  .openapi('Violation', {
    description: 'One unmet condition. Verification reports every condition it could evaluate, not only the first.',
  });

export const ErrorDetails = z
  .looseObject({
    violations: z.array(Violation).openapi({ description: 'Every unmet condition (verification and issuance refusals).' }).optional(),
    block: Block.optional(),
    issues: z.array(z.object({})).openapi({ description: 'Field problems of an invalid request.' }).optional(),
    required_scopes: z.array(z.string()).openapi({ description: 'The scopes the route accepts (`FORBIDDEN`).' }).optional(),
    submitted_from_index: z
      .int()
      .min(0)
      .openapi({ description: 'Chain index of the first submitted record (issuance refusals); violations count from the root.' })
      .optional(),
    stored: z.object({}).openapi({ description: 'The actual already recorded (`CONFLICT` on actuals).' }).optional(),
  })
  .openapi('ErrorDetails', { description: 'Structured context; which members appear depends on the code.' });

export const ErrorEnvelope = z
  .strictObject({
    error: z.strictObject({
      code: ErrorCode,
      message: z.string().openapi({ description: 'What went wrong, as a full sentence.' }),
      suggestion: z.string().openapi({ description: 'What to do next, as a full sentence.' }),
      details: ErrorDetails.optional(),
    }),
    request_id: z.string().openapi({ description: 'Also in the `X-Request-Id` response header.' }),
  })
  .openapi('ErrorEnvelope', { description: 'The one shape of every refusal (except verify denials, see `VerifyDeny`).' });

export const DidKey = fromProtocol(DidKeySchema).openapi('DidKey', {
  description: 'An Ed25519 `did:key` (multicodec 0xed01, base58btc).',
  example: 'did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK',
});

/**
 * The pattern is documented, not checked here: the record parser checks it
 * and answers with the record's own code (MALFORMED_JWS), which says more
 * than INVALID_REQUEST.
 */
export const Jws = z
  .string({ error: (iss) => (iss.input === undefined ? 'is required: a compact JWS' : 'must be a compact JWS string') })
  .min(1)
  .max(MAX_JWS_LENGTH)
  .openapi('Jws', {
    pattern: '^[A-Za-z0-9_-]+\\.[A-Za-z0-9_-]+\\.[A-Za-z0-9_-]+$',
    description: 'A compact JWS: base64url(JCS(header)).base64url(JCS(payload)).base64url(signature).',
    // Shortened: a real record's payload and 64-byte signature are longer.
    example: 'eyJhbGciOiJFZERTQSIsInR5cCI6IkpXVCJ9.eyJkcnNfdiI6IjQuMCJ9.c2lnbmF0dXJl',
  });

export const Timestamp = z.string().openapi('Timestamp', { format: 'date-time' });

/** The instants a query may name: UTC years 1 to 9999, what PostgreSQL's timestamptz and RFC 3339 both hold. */
const FIRST_INSTANT_MS = Date.parse('0001-01-01T00:00:00Z');
const LAST_INSTANT_MS = Date.parse('9999-12-31T23:59:59.999Z');

/** A query date-time: RFC 3339 with a zone (Z or an offset), read as a Date in UTC years 1 to 9999. */
export const InstantQuery = z.iso
  .datetime({ offset: true, error: 'must be an RFC 3339 date-time with a zone, e.g. 2026-11-23T12:00:00Z' })
  .transform((t) => new Date(t))
  // Year 0000, or an offset that moves the instant out of years 1-9999, parses but cannot be stored
  // or compared by the database: refused here (400), not failed there (500).
  .refine((d) => d.getTime() >= FIRST_INSTANT_MS && d.getTime() <= LAST_INSTANT_MS, {
    error: 'must fall in UTC years 0001 to 9999 (after applying its offset)',
  });

/**
 * A query's time window must not be empty: a contradiction is refused, not answered with an empty page.
 * Zod runs this refinement even when a bound failed its own parse, and then the bound is still the
 * raw text: only two parsed dates are compared (the failed one is already an issue).
 */
export function sinceBeforeUntil(q: { since?: Date | undefined; until?: Date | undefined }, ctx: z.RefinementCtx): void {
  if (q.since instanceof Date && q.until instanceof Date && q.since.getTime() >= q.until.getTime())
    ctx.addIssue({ code: 'custom', path: ['until'], message: 'must be later than since' });
}

export const Usd = z.number().min(0).openapi('Usd', { description: 'US dollars, exact to the micro-dollar.' });

/** A policy name list as the protocol parses it (no control characters, no globs, "*" alone). */
export const NameList = fromProtocol(PolicySchema.shape.allowed_tools.unwrap()).openapi('NameList', {
  description: 'Names (no control characters, no globs), or exactly `["*"]`.',
});

/** The protocol's policy schema (its refinements run at the edge too), described for the document. */
export const Policy = PolicySchema.extend({
  allowed_tools: NameList.optional(),
  max_cost_usd: fromProtocol(PolicySchema.shape.max_cost_usd).openapi({
    description:
      "Ceiling on each invocation's declared `estimated_cost_usd` (which must then be present; an estimate is never above the per-invocation maximum of 1,000,000 USD). A child's ceiling must not exceed its parent's as exact decimals: 0.3000001 is wider than 0.3.",
  }),
  max_calls: fromProtocol(PolicySchema.shape.max_calls).openapi({ description: "Calls allowed through this record's whole subtree." }),
  allowed_resources: fromProtocol(PolicySchema.shape.allowed_resources).openapi({
    description: 'Exact URIs or prefixes ending in `/*` (RFC 3986 normal form), or `["*"]`.',
  }),
  allowed_data_classes: NameList.optional(),
  max_spend_usd: fromProtocol(PolicySchema.shape.max_spend_usd).openapi({
    description:
      "Budget on metered spend (plus pending estimates) over the whole subtree. Every call under it must declare a usable `estimated_cost_usd`. A child's budget must not exceed its parent's as exact decimals.",
  }),
  max_depth: fromProtocol(PolicySchema.shape.max_depth).openapi({ description: 'Further hops allowed below this record.' }),
}).openapi('Policy', {
  description:
    'A DRS 4.0 policy with Baton\'s extensions. Unknown fields are refused. Absent `pii_access` / `write_access` mean false; absent `allowed_*` lists and `["*"]` mean unrestricted; absent ceilings mean unlimited.',
});

export const Bundle = z
  .strictObject({ bundle_version: z.literal('4.0'), invocation: Jws, receipts: z.array(Jws).max(64) })
  .openapi('Bundle', { description: 'A DRS 4.0 bundle, as carried in `X-DRS-Bundle` (base64url JSON) or in the verify body.' });

export const RootType = z.enum(ROOT_TYPES).openapi('RootType');

export const ServiceReceiptRef = z.strictObject({ id: z.int().min(1), kid: z.string(), jws: Jws }).openapi('ServiceReceiptRef', {
  description:
    'A service receipt: a JWS (header `{"alg":"EdDSA","kid":...,"typ":"JWT"}`) whose payload is `{iss, kid, baton_receipt, tenant, subject, iat, jti, data}`, verifiable offline with the key `kid` from `GET /v1/keys`.',
});

export const ActualSource = z
  .enum(ACTUAL_SOURCES, {
    error: (iss) =>
      iss.input === undefined
        ? `is required: an actual without provenance is refused; say where the cost came from (one of ${ACTUAL_SOURCES.join(', ')})`
        : `must be one of ${ACTUAL_SOURCES.join(', ')}`,
  })
  .openapi('ActualSource', { description: 'Where the cost came from. An actual without provenance is refused.' });

export const InvocationActual = z
  .strictObject({
    cost_usd: orNull(Usd),
    tokens_in: z.int().nullable(),
    tokens_out: z.int().nullable(),
    source: ActualSource,
    unavailable_reason: z.string().nullable(),
    recorded_at: Timestamp,
    service_receipt: orNull(ServiceReceiptRef),
  })
  .openapi('InvocationActual', { description: "An invocation's actual, as listed with it." });

/**
 * What every `declared_usd` holds: the estimate a call was counted at, which is not always the
 * agent's own figure (a tool's declared cost per invocation is the floor of every estimate).
 */
export const countedEstimateDescription = (what: string) =>
  `${what} the agent's signed \`args.estimated_cost_usd\` (rounded up to the micro-dollar), raised to the tool's \`cost_per_invocation_usd\` when the tenant's catalog declares a higher one (or the agent declared none); 0 when there is neither. Where the floor raised it, it is above what the agent declared; that figure stays in the signed \`args\`.`;

export const InvocationSummary = z
  .object({
    jti: z.string(),
    decision: z.literal('allowed'),
    hash: RecordHash,
    dr_chain: z.array(RecordHash),
    leaf: RecordHash,
    tool: z.string().nullable(),
    declared_usd: Usd.openapi({ description: countedEstimateDescription('The estimate this call was counted at:') }),
    caller_key_id: z.string(),
    created_at: Timestamp,
    service_receipt: orNull(ServiceReceiptRef),
    actual: orNull(InvocationActual),
  })
  .openapi('InvocationSummary', { description: 'An allowed invocation (it consumed its jti).' });

export const BadRequestResponse = (
  description = 'The request is malformed (`INVALID_REQUEST` or a record shape code); `details.issues` lists the problems.',
) => ({ description, content: { 'application/json': { schema: ErrorEnvelope } } });

export const AdminBadRequestResponse = (
  description = 'The body is invalid (`INVALID_REQUEST`); `details.issues` lists every field problem as `{field, message}`.',
) => ({ description, content: { 'application/json': { schema: ErrorEnvelope } } });

export const UnauthorizedResponse = (
  description = 'No valid API key (`UNAUTHORIZED`). Missing, malformed, unknown and revoked keys get the same answer.',
) => ({ description, content: { 'application/json': { schema: ErrorEnvelope } } });

export const ForbiddenResponse = (
  description = 'The key does not have a scope this route accepts (`FORBIDDEN`, `details.required_scopes`).',
) => ({ description, content: { 'application/json': { schema: ErrorEnvelope } } });

export const NotFoundResponse = (description = 'Nothing exists at this address for this tenant (`NOT_FOUND`).') => ({
  description,
  content: { 'application/json': { schema: ErrorEnvelope } },
});

export const ConflictResponse = (description = 'The request conflicts with something already stored (`CONFLICT`).') => ({
  description,
  content: { 'application/json': { schema: ErrorEnvelope } },
});

export const PayloadTooLargeResponse = (description = 'The body is larger than `BATON_MAX_BODY_BYTES` (`PAYLOAD_TOO_LARGE`).') => ({
  description,
  content: { 'application/json': { schema: ErrorEnvelope } },
});

export const UnprocessableResponse = (description = 'Well-formed but refused; `details.violations` lists every unmet condition.') => ({
  description,
  content: { 'application/json': { schema: ErrorEnvelope } },
});

export const StorageUnavailableResponse = (
  description = 'The database did not answer in time, so Baton refuses rather than guess (`STORAGE_UNAVAILABLE`). Nothing was allowed. A read changed nothing: retry. A write says which of two it was: "The change was not applied" (its work rolls back; send it again), or, when a commit of it had already gone out, that it may be applied (read it back, and send it again only if it is not there).',
) => ({ description, content: { 'application/json': { schema: ErrorEnvelope } } });

export const InternalResponse = (description = 'Baton failed unexpectedly (`INTERNAL`); report the `request_id` to the operator.') => ({
  description,
  content: { 'application/json': { schema: ErrorEnvelope } },
});
