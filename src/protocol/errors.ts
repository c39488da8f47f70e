/**
 * One error type, one table of stable codes.
 *
 * Every refusal a client of Baton can see, from the pure protocol core up to
 * the HTTP edge, the SDK client and the MCP middleware, carries a code from
 * ERROR_TABLE with its message and suggestion. Codes are part of the public
 * contract: clients branch on them, so they never change meaning once shipped.
 * The verification codes carry the pipeline block letter (docs/design.md)
 * that produced them (A shape, B linkage, C signatures/trust, D policy,
 * E time, F status, G runtime state).
 *
 * This table is data only. Which HTTP status the service answers for a code
 * is decided in one place, src/service/error-status.ts.
 */

export type Block = 'A' | 'B' | 'C' | 'D' | 'E' | 'F' | 'G';

interface CodeSpec {
  readonly block?: Block;
  /**
   * The input itself is not well-formed (as opposed to well-formed and refused
   * on its merits): fixing the request, not the delegation, is what helps.
   */
  readonly malformed?: true;
  /** A full sentence saying what went wrong. */
  readonly message: string;
  /** A full sentence saying what to do next. */
  readonly suggestion: string;
}

const SERVICE_ERRORS = {
  // Block A: shape, size, completeness
  BUNDLE_INCOMPLETE: {
    block: 'A',
    message: 'The bundle does not contain every delegation record its invocation names.',
    suggestion:
      'Include every receipt listed in the invocation dr_chain, root first, or submit them to Baton beforehand so they can be referenced by hash.',
  },
  MALFORMED_JWS: {
    block: 'A',
    malformed: true,
    message: 'A record is not a well-formed compact JWS with the DRS 4.0 EdDSA header.',
    suggestion:
      'Encode each record as base64url(JCS(header)).base64url(JCS(payload)).base64url(signature) with header {"alg":"EdDSA","typ":"JWT"} and no padding.',
  },
  UNSUPPORTED_ALG: {
    block: 'A',
    malformed: true,
    message: 'A record header names an algorithm other than EdDSA.',
    suggestion: 'Sign every record with Ed25519 and use the header {"alg":"EdDSA","typ":"JWT"} exactly.',
  },
  NON_CANONICAL_JSON: {
    block: 'A',
    malformed: true,
    message: 'A header or payload is not byte-exact RFC 8785 (JCS) canonical JSON.',
    suggestion: 'Serialize with a JCS implementation: sorted keys, no whitespace, no duplicate keys, ES6 number formatting.',
  },
  NUMBER_OUT_OF_RANGE: {
    block: 'A',
    malformed: true,
    message:
      'A number is outside the range Baton accepts (integers must lie within plus or minus 2^53-1, amounts must be finite and non-negative).',
    suggestion: 'Send integers as exact safe integers and money as a non-negative decimal number of US dollars.',
  },
  INVALID_FIELD: {
    block: 'A',
    malformed: true,
    message: 'A record field is missing, of the wrong type, or outside its documented limits.',
    suggestion:
      'Check the field each violation names (field, required, actual) against the DRS 4.0 record format: the payload fields, their types and ranges.',
  },
  CHAIN_TOO_DEEP: {
    block: 'A',
    message: 'The delegation chain is longer than the configured maximum depth.',
    suggestion: 'Delegate from a record closer to the root, or ask the operator to raise the maximum depth (at most 16).',
  },
  // Block B: linkage
  CHAIN_HASH_MISMATCH: {
    block: 'B',
    message: 'A delegation record does not point at the hash of the record before it.',
    suggestion: 'Set prev_dr_hash of each sub-delegation to sha256: plus the hex SHA-256 of the exact parent JWS string.',
  },
  ISSUER_AUDIENCE_GAP: {
    block: 'B',
    message: 'A hand-off was not signed by the party the previous record delegated to.',
    suggestion: 'Each record must be issued (iss) by the aud of its parent, and the invocation by the aud of the leaf.',
  },
  SUBJECT_MISMATCH: {
    block: 'B',
    message: 'The subject (sub) changes along the chain.',
    suggestion: 'Keep sub identical at every hop and in the invocation: it names the root principal on whose behalf the chain acts.',
  },
  DR_CHAIN_MISMATCH: {
    block: 'B',
    message: 'The invocation dr_chain does not list the hashes of the supplied receipts in root-to-leaf order.',
    suggestion: 'Build dr_chain from the exact receipts in the bundle, root first.',
  },
  COMMAND_MISMATCH: {
    block: 'B',
    message:
      'A command (cmd) is not equal to, or a sub-path of, the command of the record before it (a command naming a tool, /mcp/tools/call/<tool>, covers only itself).',
    suggestion: 'Narrow cmd only by appending path segments, e.g. /mcp/tools/call/search under /mcp/tools/call.',
  },
  // Block C: signatures and trust
  SIGNATURE_INVALID: {
    block: 'C',
    message: 'A signature does not verify under the issuer key named in the record.',
    suggestion: 'Re-sign the record with the private key of its iss over the exact header.payload bytes.',
  },
  WEAK_KEY: {
    block: 'C',
    malformed: true,
    message: 'A did:key is not canonical or names an Ed25519 key of small order, which would allow forgery.',
    suggestion: 'Generate a fresh Ed25519 key pair and encode its public key as did:key with multicodec 0xed01 and base58btc.',
  },
  INVALID_DID: {
    block: 'C',
    malformed: true,
    message: 'A principal is not a did:key identifier for an Ed25519 public key.',
    suggestion: 'Use did:key:z6Mk... identifiers (multicodec 0xed01, base58btc) for every iss, sub and aud.',
  },
  UNTRUSTED_ROOT: {
    block: 'C',
    message: 'The root delegation record is not signed by a root key this tenant trusts.',
    suggestion: 'Ask the operator to register the root DID as a trusted root of the tenant, or issue the root through Baton.',
  },
  TOOL_SERVER_MISMATCH: {
    block: 'C',
    message: 'The invocation names a different tool server than the one this API key is bound to.',
    suggestion: 'Call verify with the key issued to the tool server the invocation names.',
  },
  // Block D: attenuation and policy
  POLICY_ESCALATION: {
    block: 'D',
    message: 'A delegation grants more than its parent allows.',
    suggestion:
      'Narrow the child policy so every list is a subset of the parent, every ceiling is at most the parent, and pii/write access stays off where the parent has it off.',
  },
  POLICY_VIOLATION: {
    block: 'D',
    message: 'The invocation arguments are not permitted by every delegation record in the chain.',
    suggestion:
      'Declare every constrained argument (tool, estimated_cost_usd, pii_access, write_access, resource_uri, data_class) within the limits listed in violations.',
  },
  BINDING_MISMATCH: {
    block: 'D',
    message: 'The request body the tool server received differs from the arguments the agent signed.',
    suggestion: 'Send the tool exactly the signed args, or sign a new invocation for the body you mean to send.',
  },
  TOOL_UNDECLARED: {
    block: 'D',
    message: 'The tool is not declared in the tenant tool catalog, and the tenant denies undeclared tools.',
    suggestion: 'Declare the tool in the catalog with its exact name, or call a declared tool; names are compared exactly.',
  },
  RULE_DENIED: {
    block: 'D',
    message: 'A tenant approval rule denies this call.',
    suggestion:
      'The violation names the rule that matched (field, message); call a different tool, or ask the tenant admin to change the rule.',
  },
  APPROVAL_REQUIRED: {
    block: 'D',
    message: 'A tenant approval rule requires a human to approve this call first; nothing was consumed.',
    suggestion:
      'Wait until an approver approves the approval named by `approval` in this answer (its id and expiry), then retry the same call once.',
  },
  APPROVALS_PENDING_LIMIT: {
    block: 'D',
    message:
      'A tenant approval rule requires a human for this call, but the chain already has as many approvals waiting as one delegation may; none was opened, and nothing was consumed.',
    suggestion:
      'Wait until approvers decide the approvals of this chain that are waiting (GET /v1/approvals?status=pending), or until they expire, then retry the call.',
  },
  // Block E: time
  RECEIPT_EXPIRED: {
    block: 'E',
    message: 'A delegation record in the chain has expired.',
    suggestion: 'Ask the delegator for a fresh delegation record.',
  },
  RECEIPT_NOT_YET_VALID: {
    block: 'E',
    message: 'A delegation record in the chain is not valid yet (its nbf is in the future).',
    suggestion: 'Wait until the record nbf, or check the clock of the machine that signed it.',
  },
  INVOCATION_STALE: {
    block: 'E',
    message: 'The invocation was signed too long ago, or claims a time too far in the future.',
    suggestion: 'Sign a fresh invocation immediately before calling the tool, with iat set from an accurate clock.',
  },
  // Block F: status
  RECEIPT_REVOKED: {
    block: 'F',
    message: 'A delegation record in the chain has been revoked.',
    suggestion: 'Ask the delegator for a new delegation; revoked records and all their descendants stay denied.',
  },
  GRANT_PENDING_APPROVAL: {
    block: 'F',
    message:
      'A delegation record in the chain waits for human approval: when it was stored, its tools together read untrusted content, accessed private data and communicated externally, under the tool catalog then current.',
    suggestion: 'Ask an approver to approve the delegation, or issue one whose allowed_tools leave out one of the three risks.',
  },
  // Block G: runtime state
  REPLAY_DETECTED: {
    block: 'G',
    message: 'This invocation (its jti) has already been used.',
    suggestion: 'Sign a new invocation with a fresh jti for every tool call.',
  },
  CALLS_EXHAUSTED: {
    block: 'G',
    message: 'A delegation record in the chain has used all of its max_calls.',
    suggestion: 'Ask the holder of that record for a new delegation with a fresh call allowance.',
  },
  BUDGET_EXHAUSTED: {
    block: 'G',
    message: 'Metered spend plus pending estimates would pass a max_spend_usd budget in the chain.',
    suggestion: 'Report actual costs for finished invocations, lower the estimate, or ask for a larger budget.',
  },
  TOOL_RATE_LIMITED: {
    block: 'G',
    message: 'The tool has reached its rate_limit_per_minute in the tenant tool catalog.',
    suggestion: 'Retry in the next minute; the limit counts allowed calls of this tool across every Baton node.',
  },
  APPROVAL_REJECTED: {
    block: 'G',
    message: 'An approver rejected this call.',
    suggestion: 'Read the reason the approver gave; do not retry the same call.',
  },
  APPROVAL_EXPIRED: {
    block: 'G',
    message: 'The approval expired before it was decided or used.',
    suggestion: 'Make the call again to request a fresh approval.',
  },
  APPROVAL_USED: {
    block: 'G',
    message: 'The approval has already allowed its one call.',
    suggestion: 'Each approval allows exactly one call; make the call again to request a new approval.',
  },
  APPROVAL_DECIDED_BY_CALLER: {
    block: 'G',
    message: 'The API key that decided the approval cannot spend it.',
    suggestion: 'Approving a call and running it are separate duties: send the call from the tool server key that asked for the approval.',
  },
  APPROVAL_MISMATCH: {
    block: 'G',
    message: 'The approval named was granted for a different call than this one, or no such approval exists.',
    suggestion:
      'Retry exactly the approved call (same chain, tool and arguments) with its approval_id, or send this call without approval_id to request approval for it.',
  },
  // Service edge
  INVALID_REQUEST: {
    malformed: true,
    message: 'The request body or parameters are not valid.',
    suggestion: 'Check the fields listed in details against openapi.yaml.',
  },
  UNAUTHORIZED: {
    message: 'The request has no valid API key.',
    suggestion: 'Send Authorization: Bearer <key> with a key issued by the operator.',
  },
  FORBIDDEN: {
    message: 'The API key does not have the scope this route needs.',
    suggestion: 'Use a key with the scope named in details, or ask the operator to issue one.',
  },
  NOT_FOUND: {
    message: 'Nothing exists at this address for this tenant.',
    suggestion: 'Check the identifier, and that the API key belongs to the tenant that owns it.',
  },
  METHOD_NOT_ALLOWED: {
    message: 'The route exists, but not for this HTTP method.',
    suggestion: 'Use one of the methods the Allow header lists (see openapi.yaml or GET /docs).',
  },
  CONFLICT: {
    message: 'The request conflicts with something already stored.',
    suggestion: 'Use a fresh identifier, or resend exactly the original request to get its stored result.',
  },
  SELF_APPROVAL: {
    message: 'The party that asked for an approval cannot decide it.',
    suggestion: 'Have a different approver, one the tenant lists, approve or reject it.',
  },
  PAYLOAD_TOO_LARGE: {
    message: 'The request body is larger than Baton accepts.',
    suggestion:
      'Send a smaller body (the limit is BATON_MAX_BODY_BYTES, 256 KiB by default). A verify can send its stored chain by reference (empty receipts), and many records can be submitted in several requests.',
  },
  HEADERS_TOO_LARGE: {
    message: 'The request headers are larger than Baton accepts (64 KiB in all).',
    suggestion:
      'Send smaller headers. A bundle too large for X-DRS-Bundle goes in the body, and a verify can send its stored chain by reference (empty receipts).',
  },
  REQUEST_TIMEOUT: {
    message: 'The request did not arrive in full within the time Baton waits for one.',
    suggestion:
      'Send each request whole and at once: its headers within BATON_HEADERS_TIMEOUT_MS (66 s by default) and all of it within BATON_REQUEST_TIMEOUT_MS (120 s). Nothing was read, so nothing was done; send it again.',
  },
  UNPROCESSABLE: {
    message: 'The request is well-formed but Baton refuses it.',
    suggestion: 'Read details.violations for every unmet condition.',
  },
  RATE_LIMITED: {
    message: 'Too many requests.',
    suggestion: 'Retry after the number of seconds in the Retry-After header.',
  },
  SERVICE_BUSY: {
    message: 'Baton is too busy to take this request now, so it refused it before doing anything.',
    suggestion:
      'Nothing was done: send the request again after the number of seconds in the Retry-After header. If this persists, the operator can raise BATON_MAX_BODY_BUFFER_BYTES (the request body bytes one Baton process receives at once, 64 MiB by default) or add nodes.',
  },
  STORAGE_UNAVAILABLE: {
    message: 'The database is unavailable, so Baton cannot decide safely and refuses.',
    suggestion:
      'Nothing was allowed: a tool server runs no tool on this answer. Retry shortly (GET /readyz tells when the database is back). A change the database had begun to commit when it failed may still have been applied: read it back before sending a write again; a verify re-sent to /v1/verify as the same invocation with the same key answers its original allow (retry: true) if it was counted (on the DRS path /verify, any re-send is REPLAY_DETECTED).',
  },
  INTERNAL: {
    message: 'Baton failed unexpectedly.',
    suggestion: 'Retry; if it persists, report the request_id to the operator.',
  },
  // Transparency log: signed notes, checkpoints, tiles, proofs, cosignatures
  MALFORMED_NOTE: {
    malformed: true,
    message: 'A signed note is not well-formed (C2SP signed-note).',
    suggestion:
      'Send UTF-8 text without control characters other than newline, ending in a newline, then a blank line, then one or more lines "— <key name> <base64(key ID || signature)>", each signed once per key.',
  },
  INVALID_VERIFIER_KEY: {
    malformed: true,
    message: 'A verifier key is not a valid Ed25519 note or cosignature key.',
    suggestion:
      'Use <name>+<8 hex digit key ID>+<base64(type || 32-byte public key)> with type 0x01 (note) or 0x04 (cosignature), the key ID derived from name, type and key, and a strong Ed25519 key.',
  },
  NOTE_NOT_VERIFIED: {
    message: 'The signed note carries no valid signature from a trusted key, or a trusted key signed it invalidly.',
    suggestion: 'Check that the note was signed by the expected log key over its exact text and that no signature line was altered.',
  },
  MALFORMED_CHECKPOINT: {
    malformed: true,
    message: 'A checkpoint body is not well-formed (C2SP tlog-checkpoint).',
    suggestion:
      'Write the origin line, the tree size in decimal without leading zeros, and the base64 SHA-256 root hash, each ending in a newline, then optional non-empty extension lines.',
  },
  MALFORMED_LOG_PROOF: {
    malformed: true,
    message: 'A Merkle proof, tree size, index or proof bundle is not well-formed.',
    suggestion:
      'Send 32-byte SHA-256 hashes, non-negative safe-integer sizes and indexes, and tlog-proof bundles in the c2sp.org/tlog-proof@v1 format.',
  },
  LOG_PROOF_INVALID: {
    message: 'A Merkle inclusion or consistency proof does not verify against the signed tree head.',
    suggestion: 'Fetch a fresh proof for the same tree size; if a proof from the log itself keeps failing, treat the log as misbehaving.',
  },
  MALFORMED_TILE: {
    malformed: true,
    message: 'A tile path, tile or entry bundle is not well-formed (C2SP tlog-tiles).',
    suggestion:
      'Use tile/<L>/<N>[.p/<W>] paths with 3-digit x-prefixed index elements, tiles of 1 to 256 32-byte hashes, and uint16 length-prefixed entry bundles.',
  },
  COSIGNATURES_INSUFFICIENT: {
    message: 'Fewer trusted witnesses than required cosigned this checkpoint.',
    suggestion: 'Wait for more witnesses to cosign the checkpoint, or fetch it from the log again with its cosignatures attached.',
  },
} as const satisfies Record<string, CodeSpec>;

/** Codes the service never sends: the SDK client's own, when no usable HTTP answer arrived. */
const CLIENT_ERRORS = {
  NETWORK_ERROR: {
    message: 'Baton could not be reached: the connection failed before an answer arrived.',
    suggestion:
      'Check the base URL and that Baton is running and reachable, then retry. A request that was sent may still have been decided (and a verify counted) before the connection failed.',
  },
  TIMEOUT: {
    message: 'Baton did not answer within the request timeout.',
    suggestion:
      'Check that the service is healthy (GET /readyz) and its database reachable, or raise the timeout; treat the call as not allowed.',
  },
  ABORTED: {
    message: 'The caller aborted the request before Baton answered.',
    suggestion: 'Send the request again if it is still wanted.',
  },
  UNEXPECTED_RESPONSE: {
    message: 'Baton answered with something that is not a Baton response (wrong content type or shape).',
    suggestion: 'Check that the base URL points at a Baton service and not at a proxy or another server.',
  },
} as const satisfies Record<string, CodeSpec>;

/** Codes the service never sends: the MCP middleware's own, when it refuses a tool call before (or instead of) asking Baton. */
const MCP_ERRORS = {
  BUNDLE_MISSING: {
    message: 'This tool call carries no DRS bundle, so Baton cannot verify it and the tool does not run.',
    suggestion:
      'Attach the DRS bundle to the request: params._meta["X-DRS-Bundle"] = base64url(JSON bundle), or params._meta["xyz.okeyamy.drs/bundle"] (same, or the bundle object). From TypeScript: callToolWithBundle(client, name, args, bundle), or invokeTool(client, {...}) which signs and attaches.',
  },
  BUNDLE_MALFORMED: {
    message: 'The DRS bundle attached to this tool call cannot be read.',
    suggestion:
      'Attach one bundle, under one key: params._meta["X-DRS-Bundle"] = base64url(JSON bundle), or params._meta["xyz.okeyamy.drs/bundle"] (same, or the bundle object), holding the invocation and the receipts root first. From TypeScript: callToolWithBundle or invokeTool attach it.',
  },
  TOOL_MISMATCH: {
    message: 'The signed invocation arguments name a different tool than the one this request calls.',
    suggestion: 'Sign the invocation with args.tool set to the called tool and send those args, unchanged, as the call arguments.',
  },
  BATON_UNAVAILABLE: {
    message: 'Baton could not decide, so the tool did not run.',
    suggestion: "Retry shortly. If it persists, check the tool server's Baton configuration (base URL and a verify-scope API key).",
  },
  UNGATED_REQUEST: {
    message:
      'This server checks its tool calls with Baton and refuses requests Baton does not check (resources/read, prompts/get, completion/complete).',
    suggestion:
      "Use the server's tools, which Baton checks. Its operator can serve these requests ungated with withBaton(server, { ..., ungated: 'serve' }).",
  },
} as const satisfies Record<string, CodeSpec>;

export const ERROR_TABLE = { ...SERVICE_ERRORS, ...CLIENT_ERRORS, ...MCP_ERRORS } as const;

/** The codes the service answers with (the OpenAPI ErrorCode enum), and the only ones a BatonError carries. */
export type ErrorCode = keyof typeof SERVICE_ERRORS;
/** The codes the SDK client produces when no usable answer arrived. */
export type ClientErrorCode = keyof typeof CLIENT_ERRORS;
/** The codes the MCP middleware produces when it refuses a call itself. */
export type McpErrorCode = keyof typeof MCP_ERRORS;
/** Every code a client can see. */
export type AnyErrorCode = keyof typeof ERROR_TABLE;

export const SERVICE_ERROR_CODES = Object.keys(SERVICE_ERRORS) as [ErrorCode, ...ErrorCode[]];

export function isErrorCode(code: string): code is AnyErrorCode {
  return Object.hasOwn(ERROR_TABLE, code);
}

/**
 * Whether `code` is one only Baton's checks produce: a verification code (it names a block of the
 * verify pipeline) or the MCP middleware's own. Generic codes (UNAUTHORIZED, NOT_FOUND, TIMEOUT,
 * INTERNAL, ...) are any server's words as well.
 */
export function isBatonSpecificCode(code: string): boolean {
  return Object.hasOwn(MCP_ERRORS, code) || (Object.hasOwn(SERVICE_ERRORS, code) && 'block' in SERVICE_ERRORS[code as ErrorCode]);
}

/**
 * One unmet condition. Verification collects every violation it can evaluate,
 * not only the first, so a caller can fix everything in one round trip.
 */
export interface Violation {
  readonly code: ErrorCode;
  /** Index of the DR in the chain (0 = root); absent for the invocation or the bundle. */
  readonly dr_index?: number;
  readonly dr_hash?: string;
  /** The field or argument concerned, e.g. "policy.max_cost_usd" or "args.tool". */
  readonly field: string;
  readonly required?: unknown;
  readonly actual?: unknown;
  /** Specific explanation; falls back to the table message when absent. */
  readonly message?: string;
}

/** A refusal the service (or the same checks run in the SDK and CLI) makes: always a service code. */
export class BatonError extends Error {
  readonly code: ErrorCode;
  readonly block: Block | undefined;
  readonly suggestion: string;
  readonly details: Record<string, unknown> | undefined;
  readonly violations: readonly Violation[];

  constructor(
    code: ErrorCode,
    opts: {
      message?: string | undefined;
      suggestion?: string | undefined;
      details?: Record<string, unknown> | undefined;
      violations?: readonly Violation[] | undefined;
      /** null: the refusal is no step of the verify pipeline (a decision route's APPROVAL_EXPIRED), whatever the code's block. */
      block?: null;
    } = {},
  ) {
    const spec: CodeSpec = ERROR_TABLE[code];
    super(opts.message ?? spec.message);
    this.name = 'BatonError';
    this.code = code;
    this.block = opts.block === null ? undefined : spec.block;
    this.suggestion = opts.suggestion ?? spec.suggestion;
    this.details = opts.details;
    this.violations = opts.violations ?? [];
  }
}

/** Whether the input itself is not well-formed (see CodeSpec.malformed). */
export function isMalformed(code: ErrorCode): boolean {
  const spec: CodeSpec = ERROR_TABLE[code];
  return spec.malformed === true;
}

/** The `error` member of the envelope every refusal is sent (and printed) in. */
export interface ErrorBody<C extends string = AnyErrorCode> {
  readonly code: C;
  readonly message: string;
  readonly suggestion: string;
  readonly details?: Record<string, unknown>;
}

/** The error envelope: {error:{code, message, suggestion, details?}, request_id}. */
export interface ErrorEnvelope<C extends string = AnyErrorCode> {
  readonly error: ErrorBody<C>;
  readonly request_id: string;
}

/** A refusal as its envelope carries it: violations and the block letter join details. */
export function errorBody<C extends string>(e: {
  readonly code: C;
  readonly message: string;
  readonly suggestion: string;
  readonly details?: Record<string, unknown> | undefined;
  readonly violations: readonly Violation[];
  readonly block?: Block | string | undefined;
}): ErrorBody<C> {
  const details: Record<string, unknown> = { ...(e.details ?? {}) };
  if (e.violations.length > 0) details['violations'] = e.violations;
  if (e.block) details['block'] = e.block;
  return {
    code: e.code,
    message: e.message,
    suggestion: e.suggestion,
    ...(Object.keys(details).length > 0 ? { details } : {}),
  };
}

export function blockOf(code: ErrorCode): Block | undefined {
  const spec: CodeSpec = ERROR_TABLE[code];
  return spec.block;
}

export function isBatonError(e: unknown): e is BatonError {
  return e instanceof BatonError;
}

/** A violation's value as a person reads it: a string as it is, anything else as JSON. */
export function shownValue(v: unknown): string {
  return typeof v === 'string' ? v : JSON.stringify(v);
}

/**
 * What a violation required and found, as the end of its line: ": required X, got Y", or only the
 * part it has (an untrusted root or a replay requires nothing it can name: ": got <value>", not
 * "required (absent)", which read as if the value had to be absent); "" when it has neither.
 */
export function requirementText(v: Pick<Violation, 'required' | 'actual'>): string {
  if (v.required === undefined) return v.actual === undefined ? '' : `: got ${shownValue(v.actual)}`;
  return `: required ${shownValue(v.required)}, got ${v.actual === undefined ? '(absent)' : shownValue(v.actual)}`;
}
