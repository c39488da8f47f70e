import { createRoute, z } from '@hono/zod-openapi';
import { DELEGATION_STATUSES, READ_SCOPES } from '../protocol/lists.js';
import { CommandSchema, ConsentSchema, MAX_CHAIN_DEPTH } from '../protocol/records.js';
import { RevocationReasonSchema } from '../protocol/revocation.js';
import {
  RecordHash,
  DidKey,
  Jws,
  Timestamp,
  Usd,
  Policy,
  RootType,
  ServiceReceiptRef,
  InvocationSummary,
  BadRequestResponse,
  UnauthorizedResponse,
  ForbiddenResponse,
  NotFoundResponse,
  ConflictResponse,
  PayloadTooLargeResponse,
  UnprocessableResponse,
  StorageUnavailableResponse,
  InternalResponse,
  orNull,
  fromProtocol,
  countedEstimateDescription,
} from './common.js';

export const SubmitDelegationsRequest = z
  .union(
    [
      z.strictObject({
        receipts: z
          .array(Jws)
          .min(1)
          .max(MAX_CHAIN_DEPTH)
          .openapi({ description: 'Root-to-leaf; the first is a root or extends a stored record.' }),
      }),
      z.strictObject({ receipt: Jws }),
    ],
    {
      // Each branch's own issues name nothing useful when the body fits neither (both keys, a string).
      error: () => 'send {"receipts": [root-to-leaf JWS, ...]} (1 to 16) or {"receipt": "<JWS>"}, one of the two, and no other field',
    },
  )
  .openapi('SubmitDelegationsRequest');

export const DelegationStatus = z.enum(DELEGATION_STATUSES).openapi('DelegationStatus', {
  description:
    'What a verify through the record meets first, of what is stored: `revoked` when the record or an ancestor is revoked; `expired`; `held` when a grant of the record or an ancestor is not approved (its tools form the lethal trifecta: every verify through it is refused `GRANT_PENDING_APPROVAL`, see `GET /v1/grants`); `not_yet_valid`; else `active`.',
});

export const DelegationView = z
  .object({
    hash: RecordHash,
    jti: z.string(),
    iss: DidKey,
    sub: DidKey,
    aud: DidKey,
    cmd: z.string(),
    policy: Policy,
    nbf: z.int(),
    exp: z.int().nullable(),
    iat: z.int(),
    depth: z.int().min(0).openapi({ description: '0 for a root.' }),
    parent_hash: orNull(RecordHash),
    root_hash: RecordHash,
    status: DelegationStatus,
    revoked_at: orNull(Timestamp).openapi({ description: 'When this record itself was revoked.' }),
    revoked_by: orNull(RecordHash).openapi({ description: 'The highest revoked record at or above this one, when any.' }),
    created_at: Timestamp,
  })
  .openapi('DelegationView', { description: 'A stored delegation record, decoded. The base of the delegation shapes below.' });

export const DelegationWithServiceReceipt = z
  .strictObject({ ...DelegationView.shape, jws: Jws, service_receipt: orNull(ServiceReceiptRef) })
  .openapi('DelegationWithServiceReceipt', {
    description:
      'A record with its JWS and the service receipt of its acceptance (`null` in a keyless answer, whose service receipts would name the tenant).',
  });

/** Holding a record's JWS proves nothing (records travel in every bundle): a keyless answer shows nothing stored about it. */
const notShownKeyless = 'Absent in a keyless answer, which shows nothing stored about a record.';

export const SubmittedDelegation = z
  .strictObject({
    ...DelegationWithServiceReceipt.shape,
    depth: z.int().min(0).optional().openapi({
      description:
        '0 for a root. Absent in a keyless answer about records all stored already that do not start at a root: where they sit in the stored chain is not what the records say.',
    }),
    root_hash: RecordHash.optional().openapi({ description: 'Absent where `depth` is, for the same reason.' }),
    status: DelegationStatus.optional().openapi({ description: notShownKeyless }),
    revoked_at: orNull(Timestamp)
      .optional()
      .openapi({ description: `When this record itself was revoked. ${notShownKeyless}` }),
    revoked_by: orNull(RecordHash)
      .optional()
      .openapi({ description: `The highest revoked record at or above this one, when any. ${notShownKeyless}` }),
    created_at: Timestamp.optional().openapi({ description: notShownKeyless }),
  })
  .openapi('SubmittedDelegation', {
    description:
      'A submitted record. With an API key: as stored, with the service receipt of its acceptance. Without one: what the records and their chain say, and nothing stored about it: no status, revocation or storage time, and `service_receipt` is `null` (its claims name the tenant).',
  });

export const SubmitResult = z
  .strictObject({
    created: z.boolean().openapi({ description: 'True when at least one record was newly stored.' }),
    tenant_id: z.string().openapi({ description: 'Only when submitted with an API key; a keyless answer names no tenant.' }).optional(),
    delegations: z.array(SubmittedDelegation).openapi({ description: 'The submitted records, in order.' }),
  })
  .openapi('SubmitResult');

export const IssueRequest = z
  .strictObject({
    audience: DidKey,
    policy: Policy,
    cmd: fromProtocol(CommandSchema).openapi({ description: 'An absolute command path such as `/mcp/tools/call`.' }).optional(),
    subject: DidKey.optional(),
    nbf: z.int().min(0).optional(),
    exp: z.int().min(0).nullable().optional(),
    root_type: RootType.optional(),
    consent: fromProtocol(ConsentSchema).openapi({ description: 'Required by DRS when `root_type` is `human`.' }).optional(),
    jti: z.string().min(4).max(160).regex(/^dr:/).openapi({ example: 'dr:2f6c1d0e-7b4a-4e8e-9a53-0c1d2e3f4a5b' }).optional(),
  })
  .openapi('IssueRequest');

export const IssueResult = z
  .strictObject({ tenant_id: z.string(), custodial_did: DidKey, delegation: DelegationWithServiceReceipt })
  .openapi('IssueResult');

export const Usage = z
  .strictObject({
    calls_used: z.int().min(0),
    max_calls: z.int().nullable(),
    declared_usd: Usd.openapi({
      description: countedEstimateDescription(
        'Over the invocations through it (its whole subtree), the sum of the estimates they were counted at, each',
      ),
    }),
    metered_usd: Usd.openapi({ description: 'What tool servers metered, over the metered invocations.' }),
    metered_invocations: z.int().min(0),
    unmetered_invocations: z
      .int()
      .min(0)
      .openapi({ description: 'Invocations without a metered cost (no actual yet, or `source` `unavailable`).' }),
    unavailable_invocations: z.int().min(0).openapi({ description: 'Of those, the ones whose actual was reported as `unavailable`.' }),
    calibration: z.number().nullable().openapi({
      description:
        'Metered cost over what was declared (the estimates counted, floors included), over the metered invocations only, rounded to 4 decimals. `null` when no metered invocation declared a cost: none is metered yet, or every metered one was counted at 0 (metered cost then stands against nothing declared, which `calibration_flag` still judges). Informational: the flag is decided on the exact sums, not on this ratio.',
    }),
    calibration_flag: z.union([z.literal('metered_above_declared'), z.null()]).openapi({
      description:
        "`metered_above_declared` exactly when the tool gate's `cost_calibration` rule condition holds for this delegation, decided by the same predicate verify, dry runs and `POST /v1/explain` evaluate: over the metered invocations through it (its whole subtree), metered cost above `ratio_above` times what was declared for them, over at least `min_metered_invocations` of them, under the tenant's current `cost_calibration` setting (its tool document's; default `{ratio_above: 1.2, min_metered_invocations: 3}`, also before any is published). Every verify through a chain holding a flagged delegation decides with `cost_calibration: true` (the default rule `cost-calibration` then requires approval; before a tool document is published, verify has no rules and the flag changes nothing). `null` otherwise.",
    }),
    max_spend_usd: z.number().nullable(),
    spend_reserved_usd: z.number().nullable().openapi({
      description:
        'Metered spend plus pending estimates (including the estimates of `unavailable` actuals) counted against `max_spend_usd`.',
    }),
    amounts_saturated: z.boolean().openapi({
      description:
        'True when a sum or counter above reached 9,007,199,254.740991 USD (2^53 - 1 micro-dollars), the largest amount reported exactly: it shows that lower bound instead of failing. Far above any budget, so budget checks still deny.',
    }),
  })
  .openapi('Usage', { description: "Runtime use of the record's whole subtree." });

export const DelegationDetail = z
  .strictObject({ ...DelegationView.shape, jws: Jws, revoked_reason: z.string().nullable(), usage: Usage })
  .openapi('DelegationDetail');

export const DelegationChain = z
  .strictObject({
    hash: RecordHash,
    root_principal: DidKey,
    receipts: z.array(Jws).openapi({ description: 'Root-to-leaf JWS list.' }),
    records: z.array(DelegationWithServiceReceipt),
  })
  .openapi('DelegationChain');

const TreeNodeBase = z.strictObject({
  ...DelegationView.shape,
  calls_used: z
    .int()
    .min(0)
    .openapi({ description: 'Allowed calls through this delegation (its own and those of its subtree), as its `usage.calls_used`.' }),
  max_calls: z.int().nullable(),
});
type TreeNodeShape = z.infer<typeof TreeNodeBase> & { children: TreeNodeShape[] };
export const TreeNode: z.ZodType<TreeNodeShape> = TreeNodeBase.extend({
  children: z.array(z.lazy(() => TreeNode)),
}).openapi('TreeNode');

export const DelegationTree = z.strictObject({ tree: TreeNode, count: z.int().min(1), truncated: z.boolean() }).openapi('DelegationTree');

export const RevokeWithKeyRequest = z
  .strictObject({
    confirm: z.literal(true, {
      error: (iss) => (iss.input === undefined ? 'is required: send confirm: true to revoke' : 'must be true to revoke'),
    }),
    reason: fromProtocol(RevocationReasonSchema).openapi({ description: 'Why; must not be blank. Stored trimmed.' }),
  })
  .openapi('RevokeWithKeyRequest');

export const RevokeWithSignatureRequest = z.strictObject({ revocation: Jws }).openapi('RevokeWithSignatureRequest');

export const RevokedBy = z
  .strictObject({
    kind: z.enum(['api_key', 'admin', 'did']),
    id: z.string().optional().openapi({
      description:
        "The API key id, the admin key id, or the signer's DID. Absent only in a keyless revoker's answer about a record a key revoked first, or whose first revoker no service receipt records: the tenant's key id (and its reason) are not the signer's to read.",
    }),
  })
  .openapi('RevokedBy');

export const TenantRevocation = z
  .strictObject({
    tenant_id: z.string(),
    revoked_at: Timestamp,
    reason: z.string().nullable(),
    descendants: z.int().min(0),
    service_receipt: orNull(ServiceReceiptRef),
    already_revoked: z.boolean(),
  })
  .openapi('TenantRevocation');

export const RevokeResult = z
  .strictObject({
    hash: RecordHash,
    status: z.literal('revoked'),
    revoked_at: Timestamp,
    reason: z.string().nullable(),
    revoked_by: RevokedBy,
    descendants: z.int().min(0).openapi({ description: 'Records below this one, all denied from now on.' }),
    service_receipt: orNull(ServiceReceiptRef),
    already_revoked: z.boolean(),
    tenant_id: z.string().openapi({ description: 'API key paths only.' }).optional(),
    tenants: z.array(TenantRevocation).openapi({ description: 'Admin key only; every tenant holding the record.' }).optional(),
  })
  .openapi('RevokeResult');

export const InvocationListItem = z.strictObject({ ...InvocationSummary.shape }).openapi('InvocationListItem');

export const InvocationPage = z
  .strictObject({ invocations: z.array(InvocationListItem), next_cursor: z.string().nullable() })
  .openapi('InvocationPage');

export const DelegationHash = RecordHash.openapi('DelegationHash', {
  param: { name: 'hash', in: 'path', required: true, description: "A delegation record's hash." },
});
export const DelegationHashParams = z.object({ hash: DelegationHash });

export const InvocationsCursor = z
  .string()
  .min(1)
  .max(512)
  .openapi('InvocationsCursor', {
    param: { name: 'cursor', in: 'query', description: '`next_cursor` of the previous page, unchanged. Omit for the newest invocations.' },
  });

export const INVOCATIONS_DEFAULT_LIMIT = 50;
export const INVOCATIONS_MAX_LIMIT = 200;

/** Read from the query string as decimal text; documented as the integer it is. */
export const InvocationsLimit = z
  .string()
  .regex(/^[1-9][0-9]{0,2}$/, `must be a whole number from 1 to ${INVOCATIONS_MAX_LIMIT}`)
  .transform(Number)
  .pipe(z.number().max(INVOCATIONS_MAX_LIMIT, `must be at most ${INVOCATIONS_MAX_LIMIT}`))
  .openapi('InvocationsLimit', {
    type: 'integer',
    minimum: 1,
    maximum: INVOCATIONS_MAX_LIMIT,
    param: { name: 'limit', in: 'query', description: 'Page size, decimal without leading zeros.' },
    default: INVOCATIONS_DEFAULT_LIMIT,
  });

/** One page of an invocation list. Queries are strict: an unknown parameter is refused. */
export const InvocationsPageQuery = z.strictObject({
  cursor: InvocationsCursor.optional(),
  limit: InvocationsLimit.optional().default(INVOCATIONS_DEFAULT_LIMIT),
});

export const submitDelegationsRoute = createRoute({
  method: 'post',
  path: '/v1/delegations',
  tags: ['delegations'],
  operationId: 'submitDelegations',
  summary: 'Submit signed delegation records (root or sub-delegations)',
  description:
    "Stores one signed DR, a DRS delegation receipt (`{receipt}`), or a root-to-leaf list of them (`{receipts}`). The first record is either a root signed by a trusted root of a tenant, or a sub-DR whose parent is already stored. The chain it extends must verify: linked hand-offs, valid signatures, attenuation and time nesting, live and unrevoked ancestors.\n\n- Agents prove themselves by signature, so no API key is needed. With a key (`issue` scope), the records must belong to that key's tenant; without one, the tenant follows from the chain (and a chain several tenants could own is `422 UNPROCESSABLE`).\n- Resubmitting the same records is idempotent: `200` with the stored rows and their original service receipts. With a key they are judged again, against the clock and the store: a stored record since expired or revoked is `422` (`RECEIPT_EXPIRED`, `RECEIPT_REVOKED`), as a new record extending it would be. `201` when at least one record was newly stored, each with a fresh service receipt.\n- Without a key, the answer reveals nothing stored until the caller's signatures prove a part in the chain. The submitted records are first judged on their own (shape, each signature by its own `iss`, linkage, attenuation and time between them). A stored parent then counts only if the first record is signed by the parent's holder (its `aud`): an unknown parent and a parent held by someone else get the same `422 BUNDLE_INCOMPLETE`. A root whose signature verifies learns whether some tenant trusts its issuer, never which. A keyless answer names no tenant: no `tenant_id`, and `service_receipt` is `null` (a service receipt's signed claims name the tenant); read service receipts with a key of the tenant. Nor does it show what is stored about a record (no `status`, `revoked_at`, `revoked_by` or `created_at`): records travel in every bundle, so holding one proves nothing. Records that are all stored already are answered as stored without being judged against the store again, so a revoked chain re-submitted without a key gets the answer a live one gets; a new record extending a revoked one is refused (`422 RECEIPT_REVOKED`).",
  'x-baton-scopes': ['issue'],
  security: [{}, { bearerAuth: [] }],
  request: { body: { required: true, content: { 'application/json': { schema: SubmitDelegationsRequest } } } },
  responses: {
    200: { description: 'Every record was already stored; nothing changed.', content: { 'application/json': { schema: SubmitResult } } },
    201: { description: 'At least one record was newly stored and signed for.', content: { 'application/json': { schema: SubmitResult } } },
    400: BadRequestResponse(
      'The body is not `{receipt}` or `{receipts:[1..16]}` (`INVALID_REQUEST`), or a record is not a well-formed DRS 4.0 JWS (`MALFORMED_JWS`, `UNSUPPORTED_ALG`, `NON_CANONICAL_JSON`, `NUMBER_OUT_OF_RANGE`, `INVALID_FIELD`), or names a did:key that is not an acceptable Ed25519 key (`INVALID_DID`, `WEAK_KEY`).',
    ),
    401: UnauthorizedResponse('An Authorization header was sent but the key is not valid.'),
    403: ForbiddenResponse('A key was sent that lacks the `issue` scope (`FORBIDDEN`).'),
    409: ConflictResponse(
      'A different delegation record of the same issuer (`iss`) already uses this `jti` in the tenant, or two submitted records share an issuer and a `jti` (`CONFLICT`). A `jti` is unique per issuer, so no other holder can take the `jti` of a record it did not sign.',
    ),
    413: PayloadTooLargeResponse(),
    422: UnprocessableResponse(
      'The chain does not verify. `error.code` is the first protocol code (for example `UNTRUSTED_ROOT`, `BUNDLE_INCOMPLETE` for an unknown parent, `ISSUER_AUDIENCE_GAP`, `CHAIN_HASH_MISMATCH`, `SIGNATURE_INVALID`, `POLICY_ESCALATION`, `COMMAND_MISMATCH`, `RECEIPT_EXPIRED`, `RECEIPT_REVOKED`, `CHAIN_TOO_DEEP`) and `details.violations` lists every unmet condition; `details.submitted_from_index` is the chain index of the first submitted record (`0` when a keyless submission was refused on the submitted records alone). Nothing is stored.',
    ),
    500: InternalResponse(),
    503: StorageUnavailableResponse(),
  },
});

export const issueDelegationRoute = createRoute({
  method: 'post',
  path: '/v1/delegations/issue',
  tags: ['delegations'],
  operationId: 'issueDelegation',
  summary: "Issue a root delegation signed with the tenant's custodial root key",
  description:
    'The service signs a root DR with a root key it holds for the tenant (generated on first use, encrypted at rest, trusted as a root of the tenant with label `custodial`) and stores it like any submitted DR. Defaults: `cmd` `/mcp/tools/call`, `subject` the custodial DID, `nbf` now, `exp` 24 h after `nbf` (or after now when `nbf` is earlier; `null` for no expiry), `root_type` `organisation`, a random `jti`.',
  'x-baton-scopes': ['issue'],
  security: [{ bearerAuth: [] }],
  request: { body: { required: true, content: { 'application/json': { schema: IssueRequest } } } },
  responses: {
    200: {
      description:
        'This very record was issued before: the same request with the same `jti`, in the same second of the service clock, signs the same bytes. Already stored; nothing changed.',
      content: { 'application/json': { schema: IssueResult } },
    },
    201: { description: 'The root DR, signed, stored and signed for.', content: { 'application/json': { schema: IssueResult } } },
    400: BadRequestResponse(
      'The body does not match `IssueRequest` (`INVALID_REQUEST`), or the record it describes is invalid (`INVALID_FIELD`, e.g. `exp` before `nbf`).',
    ),
    401: UnauthorizedResponse(),
    403: ForbiddenResponse(),
    409: ConflictResponse(
      "A different record issued with the tenant's custodial root key already uses the requested `jti` (`CONFLICT`); a `jti` is unique per issuer.",
    ),
    413: PayloadTooLargeResponse(),
    422: UnprocessableResponse('The signed record would not verify now, e.g. `exp` is before now (`RECEIPT_EXPIRED`).'),
    500: InternalResponse(),
    503: StorageUnavailableResponse(),
  },
});

/** A GET of one stored record of the key's tenant: the same key, path parameter and refusals. */
const readDelegationRoute = <P extends string>(o: {
  path: P;
  operationId: string;
  summary: string;
  description: string;
  ok: { description: string; schema: z.ZodType };
}) =>
  createRoute({
    method: 'get',
    path: o.path,
    tags: ['delegations'],
    operationId: o.operationId,
    summary: o.summary,
    description: o.description,
    'x-baton-scopes': [...READ_SCOPES],
    security: [{ bearerAuth: [] }],
    request: { params: DelegationHashParams },
    responses: {
      200: { description: o.ok.description, content: { 'application/json': { schema: o.ok.schema } } },
      400: BadRequestResponse('The path is not a record hash (`INVALID_REQUEST`).'),
      401: UnauthorizedResponse(),
      403: ForbiddenResponse(
        'The key lacks a read scope, is the admin key (reads are per tenant), or is bound to a tool server without `issue`, `audit` or `approve` (such a key reads only the invocations naming its server; refused before any lookup) (`FORBIDDEN`).',
      ),
      404: NotFoundResponse(),
      500: InternalResponse(),
      503: StorageUnavailableResponse(),
    },
  });

export const getDelegationRoute = readDelegationRoute({
  path: '/v1/delegations/{hash}',
  operationId: 'getDelegation',
  summary: 'A delegation record with its status and usage',
  description:
    'The stored record, its status (`revoked` when it or any ancestor is revoked; then `revoked_by` names the highest revoked record), its JWS, and usage over its whole subtree: calls, declared and metered spend, and calibration.',
  ok: { description: 'The record.', schema: DelegationDetail },
});

export const getDelegationChainRoute = readDelegationRoute({
  path: '/v1/delegations/{hash}/chain',
  operationId: 'getDelegationChain',
  summary: 'The root-to-leaf chain ending at a record, with service receipts',
  description:
    '`receipts` is the root-to-leaf JWS list of delegation receipts, re-verifiable offline (`baton verify --chain-only` takes the whole response); `records` repeats each record with its status and the service receipt of its acceptance.',
  ok: { description: 'The chain.', schema: DelegationChain },
});

export const getDelegationTreeRoute = readDelegationRoute({
  path: '/v1/delegations/{hash}/tree',
  operationId: 'getDelegationTree',
  summary: 'A record and its descendants, nested',
  description:
    'The record and its descendants, shallowest first, each under its parent. At most 1000 records and 4 MiB of records, each measured by its signed JWS, which holds its policy (about 3 MiB of policies at most; the record asked for always comes, whatever its size): any holder of a record may store records with large policies under it. `truncated` says when more exist: those left out are deeper than, or as deep as and stored after, the last ones shown. Read them as the tree of a record shown (`GET /v1/delegations/{hash}/tree` of a child) or one at a time (`GET /v1/delegations/{hash}`).',
  ok: { description: 'The tree.', schema: DelegationTree },
});

export const listDelegationInvocationsRoute = createRoute({
  method: 'get',
  path: '/v1/delegations/{hash}/invocations',
  tags: ['delegations', 'invocations'],
  operationId: 'listDelegationInvocations',
  summary: "Allowed invocations through a record's subtree, newest first",
  description:
    'Every allowed invocation whose `dr_chain` contains the record, newest first, keyset paged: pass `next_cursor` back as `cursor` until it is `null`. Denials are not invocations and are not listed (see `GET /v1/invocations/{jti}`). A key bound to a tool server (`tool_server`) without `issue`, `audit` or `approve` sees only the invocations naming its server, and a record none of them passes through is `404` like an unknown one.',
  'x-baton-scopes': ['audit', 'report', 'verify', 'issue'],
  security: [{ bearerAuth: [] }],
  request: {
    params: DelegationHashParams,
    query: InvocationsPageQuery,
  },
  responses: {
    200: { description: 'One page.', content: { 'application/json': { schema: InvocationPage } } },
    400: BadRequestResponse(
      'The hash, `limit` or `cursor` is invalid (a cursor this service did not issue, such as one naming an impossible date), a parameter is repeated, or an unknown parameter is given (`INVALID_REQUEST`).',
    ),
    401: UnauthorizedResponse(),
    403: ForbiddenResponse('The key lacks a read scope, or is the admin key (`FORBIDDEN`).'),
    404: NotFoundResponse(),
    500: InternalResponse(),
    503: StorageUnavailableResponse(),
  },
});

export const revokeDelegationRoute = createRoute({
  method: 'post',
  path: '/v1/delegations/{hash}/revoke',
  tags: ['delegations'],
  operationId: 'revokeDelegation',
  summary: 'Revoke a delegation record and, in effect, its whole subtree',
  description:
    'Two ways in:\n\n- With an API key: `issue` (a record of the key\'s tenant) or the admin key (the record in every tenant holding it), body `{confirm: true, reason}`.\n- Without a key: `{revocation: <JWS>}`, a revocation record signed by the record\'s issuer, the root issuer, or the holder of any ancestor. Its payload is `{iss, drs_v: "4.0", drs_type: "revocation", target: <hash>, iat, jti: "rev:…", reason?}`, encoded like a DR. It revokes the record in every tenant holding it. A signer with no part in the record\'s chain gets exactly the `404` of an unknown hash; the record\'s own holder gets `403` (a holder cannot revoke the grant it received). A keyless answer names no tenant: `service_receipt` is `null`.\n\nFrom that moment the record and every descendant are denied `RECEIPT_REVOKED`, on every node. Revoking again is idempotent: the original `revoked_at`, reason, revoker and service receipt come back with `already_revoked: true`.',
  'x-baton-scopes': ['issue', 'admin'],
  security: [{}, { bearerAuth: [] }],
  request: {
    params: DelegationHashParams,
    body: { required: true, content: { 'application/json': { schema: z.union([RevokeWithKeyRequest, RevokeWithSignatureRequest]) } } },
  },
  responses: {
    200: { description: 'Revoked (now or before).', content: { 'application/json': { schema: RevokeResult } } },
    400: BadRequestResponse(
      'The path is not a record hash, or the body is invalid (`INVALID_REQUEST`); or the revocation record is malformed, targets another hash, or claims a future `iat` (`MALFORMED_JWS`, `NON_CANONICAL_JSON`, `INVALID_FIELD`, `INVALID_DID`, `WEAK_KEY`, ...).',
    ),
    401: UnauthorizedResponse('The key is not valid, or `{confirm, reason}` was sent without a key (`UNAUTHORIZED`).'),
    403: ForbiddenResponse(
      'The key lacks the `issue` scope (`FORBIDDEN`); the revocation record is signed by the holder of this record, who cannot revoke the grant it received (`FORBIDDEN`); or its signature does not verify (`SIGNATURE_INVALID`).',
    ),
    404: NotFoundResponse(
      "No such record for the key's tenant; or, without a key, no stored record with this hash that the signer may revoke (the same answer whether the hash is unknown or the signer has no part in its chain) (`NOT_FOUND`).",
    ),
    413: PayloadTooLargeResponse(),
    500: InternalResponse(),
    503: StorageUnavailableResponse(),
  },
});
