import { createRoute, z } from '@hono/zod-openapi';
import { Approval, APPROVAL_ID } from './approvals.js';
import {
  ErrorEnvelope,
  ErrorCode,
  Block,
  RecordHash,
  Violation,
  DidKey,
  Jws,
  Policy,
  RootType,
  ServiceReceiptRef,
  BadRequestResponse,
  UnauthorizedResponse,
  ConflictResponse,
  PayloadTooLargeResponse,
  StorageUnavailableResponse,
  InternalResponse,
  orNull,
} from './common.js';

export const EffectiveLimits = z
  .strictObject({
    allowed_tools: z.array(z.string()).optional(),
    max_cost_usd: z.number().optional(),
    pii_access: z.boolean(),
    write_access: z.boolean(),
    max_calls: z.int().optional(),
    max_spend_usd: z.number().optional(),
    max_depth: z.int().min(0).optional(),
    allowed_resources: z.array(z.string()).optional(),
    allowed_data_classes: z.array(z.string()).optional(),
  })
  .openapi('EffectiveLimits', { description: 'The tightest limit of every record in the chain, per field.' });

/** The members of a verify body: the bundle's, and Baton's options. */
const verifyMembers = {
  bundle_version: z.literal('4.0').optional(),
  invocation: Jws.optional(),
  receipts: z
    .array(Jws)
    .max(64)
    .openapi({ description: 'Root-to-leaf DR JWS list, or empty when every `dr_chain` hash is stored.' })
    .optional(),
  body: z
    .unknown()
    .openapi({ description: 'The request body the tool server received, compared with the signed `args` under JCS.' })
    .optional(),
  require_binding: z
    .boolean()
    .openapi({ description: 'Deny (`BINDING_MISMATCH`) unless `body` matches `args`.', default: false })
    .optional(),
  approval_id: z
    .string()
    // A text no approval can have is the caller's mistake (400, nothing stored), not a denial to record.
    .regex(APPROVAL_ID, 'must be an approval id: apr_ followed by 32 lowercase hex digits')
    .openapi({
      example: 'apr_5f2c9a0e7b1d4c3a8e6f0b2d9c7a1e4f',
      description:
        'The approval this call spends (a new invocation of an approved call). Without it, the live approval of the same call is found. Its form (`apr_` and 32 lowercase hex digits) is always checked (400 otherwise); the approval itself is read only when a rule sends the call to a human: a call no rule holds is decided without it, and spends nothing.',
    })
    .optional(),
};

/**
 * A dry run is its own path (POST /v1/verify/dry-run), never a body member. The body may be an
 * agent's bundle as a tool server forwarded it (DRS clients post it members and all), and a dry
 * run's allow counts nothing: a `dry_run: true` written into the bundle by the agent would run the
 * tool uncounted, on no approval, as often as the agent liked, for any client reading `valid`. The
 * URL is the tool server's own.
 */
function refuseDryRunMember(value: Record<string, unknown>, ctx: z.RefinementCtx): void {
  if (Object.hasOwn(value, 'dry_run')) {
    ctx.addIssue({
      code: 'custom',
      path: ['dry_run'],
      message:
        "is not a member: a dry run is POST /v1/verify/dry-run. The body may be the agent's own bundle, and a dry run's allow counts nothing",
    });
  }
}

export const VerifyRequest = z.strictObject(verifyMembers).openapi('VerifyRequest', {
  description:
    'The bundle fields, judged by the verifier (a malformed bundle is a 403 deny in block A), plus options. Any other member is refused (400): a misspelled option, `require_bindings` say, would otherwise be ignored and the call judged without it. A dry run is its own path (`POST /v1/verify/dry-run`), never a member: `dry_run` in the body is refused (400).',
});

/**
 * POST /v1/verify and its dry run take no query parameter: a dry run is its own path, which a proxy
 * cannot strip as it may a query parameter (a stripped `?dry_run=true` would be a real, counted call).
 */
export const VerifyQuery = z.strictObject({});

/**
 * POST /verify reads what DRS clients send: their body is the agent's bundle with its members
 * spread in (DRS's VerifyClient sends `{...bundle, body}`, its MCP middleware the bundle itself, as
 * the agent attached it). So members Baton does not know are ignored there, and Baton's own options
 * are refused: an agent that wrote `dry_run: true` into its bundle got `valid: true` with nothing
 * counted and no approval spent, and a DRS client, which reads only `valid`, ran the tool each time.
 */
const { require_binding: _requireBinding, approval_id: _approvalId, ...drsMembers } = verifyMembers;
export const BATON_ONLY_OPTIONS = ['dry_run', 'require_binding', 'approval_id'] as const;
const refuseBatonOptions =
  (why: string) =>
  (value: Record<string, unknown>, ctx: z.RefinementCtx): void => {
    for (const option of BATON_ONLY_OPTIONS) {
      if (Object.hasOwn(value, option))
        ctx.addIssue({ code: 'custom', path: [option], message: `is an option of POST /v1/verify only: ${why}` });
    }
  };
const refuseBatonOptionsInBody = refuseBatonOptions(
  "on /verify the body may be the agent's own bundle (DRS middlewares forward it), so Baton takes no option from it",
);

/** /verify takes none of Baton's options from its query either (DRS clients read only `valid`); other parameters are ignored, as drs-verify ignores them. */
export const VerifyQueryDrs = z
  .looseObject({})
  .superRefine(
    refuseBatonOptions(
      'DRS clients read only `valid`, so Baton takes no option on /verify (a dry run there would read as an allow, a binding or an approval go unchecked by the client)',
    ),
  );

export const VerifyRequestDrs = z.looseObject(drsMembers).superRefine(refuseBatonOptionsInBody).openapi('VerifyRequestDrs', {
  description:
    "The bundle fields and `body`, as DRS clients send them. Members Baton does not know are ignored; Baton's options (`dry_run`, `require_binding`, `approval_id`) are refused (400): this body may be the agent's own bundle. Send them to `POST /v1/verify`.",
});

/**
 * How the service parses a verify body: the options as documented, the bundle
 * members left to the verifier, which judges them (a malformed bundle is a 403
 * deny in block A, not a 400).
 */
const bundleMembersUnjudged = {
  bundle_version: z.unknown().optional(),
  invocation: z.unknown().optional(),
  receipts: z.unknown().optional(),
};
// `dry_run` is named here only to be refused with a message that says where it goes.
export const VerifyRequestBody = z
  .strictObject({ ...verifyMembers, ...bundleMembersUnjudged, dry_run: z.unknown().optional() })
  .superRefine(refuseDryRunMember);
export const VerifyRequestBodyDrs = z.looseObject({ ...drsMembers, ...bundleMembersUnjudged }).superRefine(refuseBatonOptionsInBody);

export const Binding = z
  .enum(['match', 'mismatch', 'absent'])
  .openapi('Binding', { description: 'How `body` compared with the signed `args` under JCS; `absent` when no body was given.' });

export const ChainContext = z
  .strictObject({
    root_principal: DidKey,
    root_type: RootType,
    subject: DidKey,
    chain_depth: z.int().min(1),
    leaf_policy: Policy,
    effective_limits: EffectiveLimits,
    invoker: DidKey,
    tool_server: z.string(),
    cmd: z.string(),
    tool: z.string().nullable().openapi({ description: '`args.tool` when it is a string.' }),
    dr_chain: z.array(RecordHash),
    invocation_jti: z.string(),
    invocation_hash: RecordHash,
    binding: Binding,
    consent_record: z
      .looseObject({ method: z.string(), timestamp: z.string() })
      .optional()
      .openapi({ description: "The root's `drs_consent` as signed (a human root carries one); absent when the root has none." }),
    regulatory: z
      .record(z.string(), z.unknown())
      .optional()
      .openapi({ description: "The root's `drs_regulatory` as signed; absent when the root has none." }),
    session_id: z.string().optional().openapi({ description: '`consent_record.session_id`, when it is a string.' }),
  })
  .openapi('ChainContext', { description: 'What the verified chain authorises, for the tool server to act on.' });

export const Counter = z.strictObject({ dr: RecordHash, calls_used: z.int().min(0), max_calls: z.int().min(0) }).openapi('Counter');

export const Warning = z
  .strictObject({
    code: z.literal('NEAR_LIMIT'),
    dr: RecordHash,
    field: z.enum(['max_calls', 'max_spend_usd']),
    used: z.number(),
    limit: z.number(),
    message: z.string(),
  })
  .openapi('Warning', { description: '`NEAR_LIMIT` once calls or budget pass 80% of a ceiling.' });

export const VerifyAllow = z
  .strictObject({
    valid: z.literal(true),
    dry_run: z.boolean(),
    retry: z.boolean().openapi({
      description:
        'True when this answers a re-send, by the same API key, of an invocation already\nallowed: `service_receipt` is the original one and nothing was counted now. Always false\nfor a fresh allow; on a dry run, true when the real call would be such a retry.',
    }),
    context: ChainContext,
    invocation_id: z.string().openapi({ description: "The invocation's `jti`." }),
    binding: Binding,
    counters: z
      .array(Counter)
      .openapi({ description: 'Every DR of the chain with `max_calls`, root first, after this call (before it, for a dry run).' }),
    warnings: z.array(Warning),
    service_receipt: orNull(ServiceReceiptRef).openapi({
      description: "The service's signed `invocation.allowed` service receipt; `null` for a dry run.",
    }),
  })
  .openapi('VerifyAllow');

export const DecisionError = z
  .strictObject({ code: ErrorCode, block: orNull(Block), message: z.string(), suggestion: z.string() })
  .openapi('DecisionError', { description: "The first violation's code, block, and the table message and suggestion." });

export const VerifyDeny = z
  .strictObject({
    valid: z.literal(false),
    error: DecisionError,
    violations: z.array(Violation).min(1),
    approval: Approval.optional().openapi({
      description: 'Set when a tenant rule requires a human (`APPROVAL_REQUIRED`): wait for its decision, then retry the same call.',
    }),
  })
  .openapi('VerifyDeny', { description: 'A deny, as DRS clients expect (`valid:false`).' });

export const XDrsBundle = z.string().openapi('XDrsBundle', {
  param: {
    name: 'X-DRS-Bundle',
    in: 'header',
    description:
      'DRS transport: base64url (no padding) of the bundle JSON (`Bundle`). The body may carry the same bundle too (as the DRS `VerifyClient` sends it), but not another one (400); an empty header is none. Baton takes request headers up to 64 KiB (a 16-record chain fits; past that a `431 HEADERS_TOO_LARGE`), but proxies often allow less: prefer chains by reference (`receipts: []`).',
  },
});

export const VerifyAllowedResponse = (description = 'Allowed. Counted and signed for.') => ({
  description,
  content: { 'application/json': { schema: VerifyAllow } },
});

export const VerifyDeniedResponse = (
  description = 'Denied by the chain or runtime state (`VerifyDeny`, every unmet condition of the stage that refused in `violations`: the chain first, then the tool catalog and rules, then runtime state; `POST /v1/explain` lists every stage at once), or the key lacks the `verify` scope / is the admin key (`ErrorEnvelope` with `FORBIDDEN`).',
) => ({ description, content: { 'application/json': { schema: z.union([VerifyDeny, ErrorEnvelope]) } } });

/** What a deadline 503 leaves open, and how to learn it: the same on both paths until the re-send. */
const VERIFY_UNAVAILABLE =
  'The database did not decide the verify within the verify deadline (BATON_VERIFY_DEADLINE_MS, default 5000 ms), or did not answer (`STORAGE_UNAVAILABLE`). Nothing was allowed: a tool server runs no tool on this answer. A commit the database had begun before the deadline may still have counted the call.';

/** Request and responses: the same on both paths (POST /verify is the DRS path), but for unknown members and a re-send. */
const verifyExchange = (
  schema: typeof VerifyRequest | typeof VerifyRequestDrs,
  query: typeof VerifyQuery | typeof VerifyQueryDrs,
  options: string,
  unavailable: string,
  allowed?: string,
) => ({
  'x-baton-scopes': ['verify'],
  security: [{ bearerAuth: [] }],
  request: {
    query,
    headers: z.object({ 'X-DRS-Bundle': XDrsBundle.optional() }),
    body: {
      required: false,
      description:
        "A DRS 4.0 bundle plus Baton's options. It may be left out when the bundle travels in `X-DRS-Bundle` (and must be there otherwise).",
      content: { 'application/json': { schema } },
    },
  },
  responses: {
    200: VerifyAllowedResponse(allowed),
    400: BadRequestResponse(
      `The body is not strict JSON${options}, \`X-DRS-Bundle\` is not base64url bundle JSON, or the body and \`X-DRS-Bundle\` carry different bundles (\`INVALID_REQUEST\`).`,
    ),
    401: UnauthorizedResponse(),
    403: VerifyDeniedResponse(),
    409: ConflictResponse(
      'The bundle embeds a delegation record Baton had not stored, and a different record of the same issuer (`iss`) already uses its `jti` in this tenant, or the bundle holds two such records (`CONFLICT`). A dry run answers the same. A `jti` is unique per issuer, so no other holder can take the `jti` of a record it did not sign.',
    ),
    413: PayloadTooLargeResponse(),
    500: InternalResponse(),
    503: StorageUnavailableResponse(`${VERIFY_UNAVAILABLE} ${unavailable}`),
  },
});

export const verifyRoute = createRoute({
  method: 'post',
  path: '/v1/verify',
  tags: ['verify'],
  operationId: 'verify',
  summary: 'Verify an invocation against its delegation chain and count it',
  description:
    "Runs blocks A-F of the verification pipeline (shape, linkage, signatures and trust,\nattenuation and policy, time, revocation) and, in one database statement, block G\n(the API key still active, the root still trusted, no DR revoked, replay, `max_calls`\non every counted DR, `max_spend_usd`, and the service receipt).\n\n- **Retry after a lost answer.** The same invocation (same `jti` and same signed bytes)\n  sent again by the same API key is answered with its original allow: the same\n  `service_receipt`, `retry: true`, and nothing counted again; `counters` are the stored\n  values now. The revocation, root trust and API key are re-checked first, so a chain\n  revoked since then is refused, and so is its time: a retry more than\n  `BATON_INVOCATION_MAX_AGE` (default 300 s) after the invocation's `iat` is refused\n  `INVOCATION_STALE`, as any invocation that old. A retry of a call a human approved\n  spends no approval and asks for none. Any other caller (another key, or a different\n  invocation reusing the `jti`) gets `REPLAY_DETECTED`. A denial never consumes the\n  `jti`, so a denied invocation sent again is simply decided again.\n- **Deadline.** A verify that cannot be decided within the service's deadline\n  (`BATON_VERIFY_DEADLINE_MS`, default 5000 ms, from the request's arrival; the time its body takes to arrive does not count, up to the deadline again) is answered `503 STORAGE_UNAVAILABLE`,\n  and the database refuses to commit it afterwards: nothing is counted. (Only a commit the\n  database had already begun, e.g. waiting for a stalled synchronous replica, or an answer\n  lost after the commit leaves a call counted; send it again to learn, and to get its\n  service receipt, see retry above.)\n- A key revoked on any node is refused (401) by the next verify on every node.\n\n- Trust is the calling key's tenant's trusted roots. A key bound to a tool server only verifies invocations naming it (`TOOL_SERVER_MISMATCH`).\n- `receipts` may be empty when every `dr_chain` hash is already stored (chain by reference). Delegation receipts Baton has not seen are verified in full and stored.\n- A dry run is `POST /v1/verify/dry-run` (not a body member: the body may be the agent's bundle, so `dry_run` there is refused, `400`).\n- `body` is compared with the signed `args` under JCS and reported as `binding`; with `require_binding: true` anything but `match` is a deny (`BINDING_MISMATCH`).\n- A malformed bundle is a deny (403, block A), not a 400: only an unreadable request is 400.\n- Denials are recorded for auditors and never consume the jti. A denial in blocks A-C (before linkage, every signature and the root's trust held) is recorded without the `jti` and `dr_chain` the invocation claims, which anyone may write: it is listed under no DR and no jti.\n- `args.estimated_cost_usd`, when present, must be a finite, non-negative JSON number of US dollars of at most 1,000,000 (the per-invocation maximum); it is required wherever any record of the chain sets `max_cost_usd` or `max_spend_usd`. A missing or unusable estimate there (a string, null, negative, too large) is a deny, `POLICY_VIOLATION` (block D) naming `args.estimated_cost_usd`: a call under a budget is never counted as free.\n\nThe bundle may instead come base64url-encoded in the `X-DRS-Bundle` header (DRS transport), or the same bundle in both, as DRS's `VerifyClient` sends it. An empty header is no header. A header that is there must be readable, whatever the body holds; and when the body also carries a bundle member (`invocation`, `receipts`, `bundle_version`), the two must hold the same bundle and the header nothing else (`400` otherwise: Baton does not guess which one the call is). The bundle in the header is held to the rules of a body on the same path, with or without a copy in the body: a member that is not the bundle's is a `400` here.",
  ...verifyExchange(
    VerifyRequest,
    VerifyQuery,
    ", `require_binding` is not a boolean, a member is not one of those listed (`dry_run` among them: a dry run is `POST /v1/verify/dry-run`), the URL has a query (this path takes none), a bundle in `X-DRS-Bundle` (with or without a copy in the body) holds a member that is not a bundle's",
    'To learn it, re-send the same invocation with the same key: it answers its original allow (`retry: true`) if it was counted, and is decided afresh if not.',
  ),
});

export const verifyDryRunRoute = createRoute({
  method: 'post',
  path: '/v1/verify/dry-run',
  tags: ['verify'],
  operationId: 'verifyDryRun',
  summary: 'Decide a verify as POST /v1/verify would, consuming nothing',
  description:
    "Runs every check `POST /v1/verify` runs and reports counters, but consumes nothing: no counter, no jti, no service receipt, no denial record, and embedded records are not stored. It refuses whatever the real call would refuse at that moment (including the `409` below), so a dry run never says allow where the real call would not: the tool gate's checks (rate window, held grants, the named approval's status and binding, the catalog version) run as the real call runs them, in a transaction that is rolled back. Request and answers are `POST /v1/verify`'s; an allow says `dry_run: true` and carries no service receipt.\n\nIts own path, not an option: a tool server may forward the agent's bundle as the body, and a proxy may strip a query parameter, and either way a dry run's allow (`valid: true`, nothing counted) would be taken for a call's.",
  ...verifyExchange(
    VerifyRequest,
    VerifyQuery,
    ", `require_binding` is not a boolean, a member is not one of those listed (`dry_run` among them), the URL has a query (this path takes none), a bundle in `X-DRS-Bundle` (with or without a copy in the body) holds a member that is not a bundle's",
    'A dry run counts nothing: send it again.',
    'Would be allowed. Nothing was counted, stored or signed (`dry_run: true`, `service_receipt: null`).',
  ),
});

export const verifyDrsRoute = createRoute({
  method: 'post',
  path: '/verify',
  tags: ['verify'],
  operationId: 'verifyDrs',
  summary: 'DRS-compatible verify (as POST /v1/verify, but a re-send is a replay)',
  description:
    "The path DRS clients (`VerifyClient`) call. As `POST /v1/verify` in request, responses and effects, with three differences, all because DRS clients read only `valid`:\n\n- An invocation already allowed, sent again by the same API key, is refused `REPLAY_DETECTED` here rather than answered with its original allow (`retry: true`): a DRS client would run the tool again.\n- Baton's options (`dry_run`, `require_binding`, `approval_id`) are refused (400), in the body and in the query. DRS clients send the agent's bundle as the body, members and all, so an option there may be the agent's: `dry_run: true` answered `valid: true` with nothing counted. Members and query parameters Baton does not know are ignored, in the body and in the bundle in `X-DRS-Bundle`, where a `body` is refused (`400`): there it would be the agent's.\n- A `body` that is not the signed `args` is a deny (`BINDING_MISMATCH`), as `require_binding` makes it on `/v1/verify`: a DRS client that reads only `valid` would run that body. With no `body` nothing is compared (`binding: absent`; DRS's MCP middleware sends none), and a `match` is only as good as whoever put `body` there: the agent's bundle may carry one.\n\nDRS clients typically send the bundle in `X-DRS-Bundle` and the tool's request body as `body`.",
  ...verifyExchange(
    VerifyRequestDrs,
    VerifyQueryDrs,
    ", the body, the query or a bundle in `X-DRS-Bundle` (with or without a copy in the body) carries one of `/v1/verify`'s options (`dry_run`, `require_binding`, `approval_id`) or, in the header, a `body`",
    'Here a re-send is never answered with its original allow: the same invocation sent to this path again is refused with a 403 REPLAY_DETECTED deny if it was counted, and decided afresh if not. Sent by the same key to `POST /v1/verify` instead, it answers its original allow (`retry: true`) if it was counted.',
  ),
});
