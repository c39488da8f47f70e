/**
 * One error type, one table of stable codes.
 *
 * Every refusal Baton gives, from the pure protocol core up to the HTTP edge,
 * carries a code from ERROR_TABLE. Codes are part of the public contract:
 * clients branch on them, so they never change meaning once shipped. The
 * verification codes carry the pipeline block letter (docs/design.md) that produced
 * them (A shape, B linkage, C signatures/trust, D policy, E time, F status,
 * G runtime state).
 */

export type Block = 'A' | 'B' | 'C' | 'D' | 'E' | 'F' | 'G';

interface CodeSpec {
  readonly block?: Block;
  /** HTTP status the service maps this code to. */
  readonly status: number;
  /** A full sentence saying what went wrong. */
  readonly message: string;
  /** A full sentence saying what to do next. */
  readonly suggestion: string;
}

export const ERROR_TABLE = {
  // Block A: shape, size, completeness
  BUNDLE_INCOMPLETE: {
    block: 'A',
    status: 403,
    message: 'The bundle does not contain every delegation record its invocation names.',
    suggestion:
      'Include every receipt listed in the invocation dr_chain, root first, or submit them to Baton beforehand so they can be referenced by hash.',
  },
  MALFORMED_JWS: {
    block: 'A',
    status: 400,
    message: 'A record is not a well-formed compact JWS with the DRS 4.0 EdDSA header.',
    suggestion:
      'Encode each record as base64url(JCS(header)).base64url(JCS(payload)).base64url(signature) with header {"alg":"EdDSA","typ":"JWT"} and no padding.',
  },
  UNSUPPORTED_ALG: {
    block: 'A',
    status: 400,
    message: 'A record header names an algorithm other than EdDSA.',
    suggestion: 'Sign every record with Ed25519 and use the header {"alg":"EdDSA","typ":"JWT"} exactly.',
  },
  NON_CANONICAL_JSON: {
    block: 'A',
    status: 400,
    message: 'A header or payload is not byte-exact RFC 8785 (JCS) canonical JSON.',
    suggestion: 'Serialize with a JCS implementation: sorted keys, no whitespace, no duplicate keys, ES6 number formatting.',
  },
  NUMBER_OUT_OF_RANGE: {
    block: 'A',
    status: 400,
    message:
      'A number is outside the range Baton accepts (integers must lie within plus or minus 2^53-1, amounts must be finite and non-negative).',
    suggestion: 'Send integers as exact safe integers and money as a non-negative decimal number of US dollars.',
  },
  INVALID_FIELD: {
    block: 'A',
    status: 400,
    message: 'A record field is missing, of the wrong type, or outside its documented limits.',
    suggestion: 'Check the field named in details against the DRS 4.0 record format: the payload fields, their types and ranges.',
  },
  CHAIN_TOO_DEEP: {
    block: 'A',
    status: 403,
    message: 'The delegation chain is longer than the configured maximum depth.',
    suggestion: 'Delegate from a record closer to the root, or ask the operator to raise the maximum depth (at most 16).',
  },
  // Block B: linkage
  CHAIN_HASH_MISMATCH: {
    block: 'B',
    status: 403,
    message: 'A delegation record does not point at the hash of the record before it.',
    suggestion: 'Set prev_dr_hash of each sub-delegation to sha256: plus the hex SHA-256 of the exact parent JWS string.',
  },
  ISSUER_AUDIENCE_GAP: {
    block: 'B',
    status: 403,
    message: 'A hand-off was not signed by the party the previous record delegated to.',
    suggestion: 'Each record must be issued (iss) by the aud of its parent, and the invocation by the aud of the leaf.',
  },
  SUBJECT_MISMATCH: {
    block: 'B',
    status: 403,
    message: 'The subject (sub) changes along the chain.',
    suggestion: 'Keep sub identical at every hop and in the invocation: it names the root principal on whose behalf the chain acts.',
  },
  DR_CHAIN_MISMATCH: {
    block: 'B',
    status: 403,
    message: 'The invocation dr_chain does not list the hashes of the supplied receipts in root-to-leaf order.',
    suggestion: 'Build dr_chain from the exact receipts in the bundle, root first.',
  },
  COMMAND_MISMATCH: {
    block: 'B',
    status: 403,
    message: 'A command (cmd) is not equal to, or a sub-path of, the command of the record before it.',
    suggestion: 'Narrow cmd only by appending path segments, e.g. /mcp/tools/call/search under /mcp/tools/call.',
  },
  // Block C: signatures and trust
  SIGNATURE_INVALID: {
    block: 'C',
    status: 403,
    message: 'A signature does not verify under the issuer key named in the record.',
    suggestion: 'Re-sign the record with the private key of its iss over the exact header.payload bytes.',
  },
  WEAK_KEY: {
    block: 'C',
    status: 400,
    message: 'A did:key is not canonical or names an Ed25519 key of small order, which would allow forgery.',
    suggestion: 'Generate a fresh Ed25519 key pair and encode its public key as did:key with multicodec 0xed01 and base58btc.',
  },
  INVALID_DID: {
    block: 'C',
    status: 400,
    message: 'A principal is not a did:key identifier for an Ed25519 public key.',
    suggestion: 'Use did:key:z6Mk... identifiers (multicodec 0xed01, base58btc) for every iss, sub and aud.',
  },
  UNTRUSTED_ROOT: {
    block: 'C',
    status: 403,
    message: 'The root delegation record is not signed by a root key this tenant trusts.',
    suggestion: 'Ask the operator to register the root DID as a trusted root of the tenant, or issue the root through Baton.',
  },
  TOOL_SERVER_MISMATCH: {
    block: 'C',
    status: 403,
    message: 'The invocation names a different tool server than the one this API key is bound to.',
    suggestion: 'Call verify with the key issued to the tool server the invocation names.',
  },
  // Block D: attenuation and policy
  POLICY_ESCALATION: {
    block: 'D',
    status: 403,
    message: 'A delegation grants more than its parent allows.',
    suggestion:
      'Narrow the child policy so every list is a subset of the parent, every ceiling is at most the parent, and pii/write access stays off where the parent has it off.',
  },
  POLICY_VIOLATION: {
    block: 'D',
    status: 403,
    message: 'The invocation arguments are not permitted by every delegation record in the chain.',
    suggestion:
      'Declare every constrained argument (tool, estimated_cost_usd, pii_access, write_access, resource_uri, data_class) within the limits listed in violations.',
  },
  BINDING_MISMATCH: {
    block: 'D',
    status: 403,
    message: 'The request body the tool server received differs from the arguments the agent signed.',
    suggestion: 'Send the tool exactly the signed args, or sign a new invocation for the body you mean to send.',
  },
  TOOL_UNDECLARED: {
    block: 'D',
    status: 403,
    message: 'The tool is not declared in the tenant tool catalog, and the tenant denies undeclared tools.',
    suggestion: 'Declare the tool in the catalog with its exact name, or call a declared tool; names are compared exactly.',
  },
  RULE_DENIED: {
    block: 'D',
    status: 403,
    message: 'A tenant approval rule denies this call.',
    suggestion: 'Read details for the rule that matched; call a different tool, or ask the tenant admin to change the rule.',
  },
  APPROVAL_REQUIRED: {
    block: 'D',
    status: 403,
    message: 'A tenant approval rule requires a human to approve this call first; nothing was consumed.',
    suggestion:
      'Wait until an approver approves the approval named by `approval` in this answer (its id and expiry), then retry the same call once.',
  },
  // Block E: time
  RECEIPT_EXPIRED: {
    block: 'E',
    status: 403,
    message: 'A delegation record in the chain has expired.',
    suggestion: 'Ask the delegator for a fresh delegation record.',
  },
  RECEIPT_NOT_YET_VALID: {
    block: 'E',
    status: 403,
    message: 'A delegation record in the chain is not valid yet (its nbf is in the future).',
    suggestion: 'Wait until the record nbf, or check the clock of the machine that signed it.',
  },
  INVOCATION_STALE: {
    block: 'E',
    status: 403,
    message: 'The invocation was signed too long ago, or claims a time too far in the future.',
    suggestion: 'Sign a fresh invocation immediately before calling the tool, with iat set from an accurate clock.',
  },
  // Block F: status
  RECEIPT_REVOKED: {
    block: 'F',
    status: 403,
    message: 'A delegation record in the chain has been revoked.',
    suggestion: 'Ask the delegator for a new delegation; revoked records and all their descendants stay denied.',
  },
  GRANT_PENDING_APPROVAL: {
    block: 'F',
    status: 403,
    message:
      'A delegation record in the chain waits for human approval: its tools together read untrusted content, access private data and communicate externally.',
    suggestion: 'Ask an approver to approve the delegation, or issue one whose allowed_tools leave out one of the three risks.',
  },
  // Block G: runtime state
  REPLAY_DETECTED: {
    block: 'G',
    status: 403,
    message: 'This invocation (its jti) has already been used.',
    suggestion: 'Sign a new invocation with a fresh jti for every tool call.',
  },
  CALLS_EXHAUSTED: {
    block: 'G',
    status: 403,
    message: 'A delegation record in the chain has used all of its max_calls.',
    suggestion: 'Ask the holder of that record for a new delegation with a fresh call allowance.',
  },
  BUDGET_EXHAUSTED: {
    block: 'G',
    status: 403,
    message: 'Metered spend plus pending estimates would pass a max_spend_usd budget in the chain.',
    suggestion: 'Report actual costs for finished invocations, lower the estimate, or ask for a larger budget.',
  },
  TOOL_RATE_LIMITED: {
    block: 'G',
    status: 403,
    message: 'The tool has reached its rate_limit_per_minute in the tenant tool catalog.',
    suggestion: 'Retry in the next minute; the limit counts allowed calls of this tool across every Baton node.',
  },
  APPROVAL_REJECTED: {
    block: 'G',
    status: 403,
    message: 'An approver rejected this call.',
    suggestion: 'Read the reason the approver gave; do not retry the same call.',
  },
  APPROVAL_EXPIRED: {
    block: 'G',
    status: 403,
    message: 'The approval expired before it was decided or used.',
    suggestion: 'Make the call again to request a fresh approval.',
  },
  APPROVAL_USED: {
    block: 'G',
    status: 403,
    message: 'The approval has already allowed its one call.',
    suggestion: 'Each approval allows exactly one call; make the call again to request a new approval.',
  },
  APPROVAL_MISMATCH: {
    block: 'G',
    status: 403,
    message: 'The approval was granted for a different call than this one.',
    suggestion: 'Retry exactly the approved call (same chain, tool and arguments), or request approval for this one.',
  },
  // Service edge
  INVALID_REQUEST: {
    status: 400,
    message: 'The request body or parameters are not valid.',
    suggestion: 'Check the fields listed in details against openapi.yaml.',
  },
  UNAUTHORIZED: {
    status: 401,
    message: 'The request has no valid API key.',
    suggestion: 'Send Authorization: Bearer <key> with a key issued by the operator.',
  },
  FORBIDDEN: {
    status: 403,
    message: 'The API key does not have the scope this route needs.',
    suggestion: 'Use a key with the scope named in details, or ask the operator to issue one.',
  },
  NOT_FOUND: {
    status: 404,
    message: 'Nothing exists at this address for this tenant.',
    suggestion: 'Check the identifier, and that the API key belongs to the tenant that owns it.',
  },
  CONFLICT: {
    status: 409,
    message: 'The request conflicts with something already stored.',
    suggestion: 'Use a fresh identifier, or resend exactly the original request to get its stored result.',
  },
  SELF_APPROVAL: {
    status: 403,
    message: 'The party that asked for an approval cannot decide it.',
    suggestion: 'Have a different approver, one the tenant lists, approve or reject it.',
  },
  PAYLOAD_TOO_LARGE: {
    status: 413,
    message: 'The request body is larger than Baton accepts.',
    suggestion: 'Send chains by reference (empty receipts) or split the request.',
  },
  UNPROCESSABLE: {
    status: 422,
    message: 'The request is well-formed but Baton refuses it.',
    suggestion: 'Read details.violations for every unmet condition.',
  },
  RATE_LIMITED: {
    status: 429,
    message: 'Too many requests.',
    suggestion: 'Retry after the number of seconds in the Retry-After header.',
  },
  STORAGE_UNAVAILABLE: {
    status: 503,
    message: 'The database is unavailable, so Baton cannot decide safely and refuses.',
    suggestion: 'Retry shortly; the call was not allowed and nothing was counted.',
  },
  INTERNAL: {
    status: 500,
    message: 'Baton failed unexpectedly.',
    suggestion: 'Retry; if it persists, report the request_id to the operator.',
  },
  // Transparency log: signed notes, checkpoints, tiles, proofs, cosignatures
  MALFORMED_NOTE: {
    status: 400,
    message: 'A signed note is not well-formed (C2SP signed-note).',
    suggestion:
      'Send UTF-8 text without control characters other than newline, ending in a newline, then a blank line, then one or more lines "— <key name> <base64(key ID || signature)>", each signed once per key.',
  },
  INVALID_VERIFIER_KEY: {
    status: 400,
    message: 'A verifier key is not a valid Ed25519 note or cosignature key.',
    suggestion:
      'Use <name>+<8 hex digit key ID>+<base64(type || 32-byte public key)> with type 0x01 (note) or 0x04 (cosignature), the key ID derived from name, type and key, and a strong Ed25519 key.',
  },
  NOTE_NOT_VERIFIED: {
    status: 403,
    message: 'The signed note carries no valid signature from a trusted key, or a trusted key signed it invalidly.',
    suggestion: 'Check that the note was signed by the expected log key over its exact text and that no signature line was altered.',
  },
  MALFORMED_CHECKPOINT: {
    status: 400,
    message: 'A checkpoint body is not well-formed (C2SP tlog-checkpoint).',
    suggestion:
      'Write the origin line, the tree size in decimal without leading zeros, and the base64 SHA-256 root hash, each ending in a newline, then optional non-empty extension lines.',
  },
  MALFORMED_LOG_PROOF: {
    status: 400,
    message: 'A Merkle proof, tree size, index or proof bundle is not well-formed.',
    suggestion:
      'Send 32-byte SHA-256 hashes, non-negative safe-integer sizes and indexes, and tlog-proof bundles in the c2sp.org/tlog-proof@v1 format.',
  },
  LOG_PROOF_INVALID: {
    status: 403,
    message: 'A Merkle inclusion or consistency proof does not verify against the signed tree head.',
    suggestion: 'Fetch a fresh proof for the same tree size; if a proof from the log itself keeps failing, treat the log as misbehaving.',
  },
  MALFORMED_TILE: {
    status: 400,
    message: 'A tile path, tile or entry bundle is not well-formed (C2SP tlog-tiles).',
    suggestion:
      'Use tile/<L>/<N>[.p/<W>] paths with 3-digit x-prefixed index elements, tiles of 1 to 256 32-byte hashes, and uint16 length-prefixed entry bundles.',
  },
  COSIGNATURES_INSUFFICIENT: {
    status: 403,
    message: 'Fewer trusted witnesses than required cosigned this checkpoint.',
    suggestion: 'Wait for more witnesses to cosign the checkpoint, or fetch it from the log again with its cosignatures attached.',
  },
} as const satisfies Record<string, CodeSpec>;

export type ErrorCode = keyof typeof ERROR_TABLE;

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

export class BatonError extends Error {
  readonly code: ErrorCode;
  readonly block: Block | undefined;
  readonly status: number;
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
      /**
       * The request was well-formed but a record in it is refused on its merits
       * (submission, issuance): the service answers 422 instead of the table's
       * status, unless the table says 400 (the input itself is malformed).
       */
      unprocessable?: boolean | undefined;
    } = {},
  ) {
    const spec: CodeSpec = ERROR_TABLE[code];
    super(opts.message ?? spec.message);
    this.name = 'BatonError';
    this.code = code;
    this.block = spec.block;
    this.status = opts.unprocessable && spec.status !== 400 ? 422 : spec.status;
    this.suggestion = opts.suggestion ?? spec.suggestion;
    this.details = opts.details;
    this.violations = opts.violations ?? [];
  }
}

export function blockOf(code: ErrorCode): Block | undefined {
  const spec: CodeSpec = ERROR_TABLE[code];
  return spec.block;
}

export function isBatonError(e: unknown): e is BatonError {
  return e instanceof BatonError;
}
