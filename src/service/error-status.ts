/**
 * The one place an error code gets its HTTP status.
 *
 * The protocol's ERROR_TABLE says what each code means (message, suggestion,
 * block, whether the input is malformed); this module says how the service
 * answers it. A code only the SDK client or the MCP middleware produces is
 * NOT_HTTP: the service never sends it. Two named rules depend on where the refusal is made, and both
 * live here:
 * - a record refused on its merits when it is submitted for storage
 *   (POST /v1/delegations, issuance) is 422, see SubmissionRefusal;
 * - a verification denial ({valid:false}) is 403 whatever its code, see
 *   DENIAL_STATUS.
 */
import {
  BatonError,
  SERVICE_ERROR_CODES,
  type AnyErrorCode,
  type ClientErrorCode,
  type ErrorCode,
  type McpErrorCode,
} from '../protocol/errors.js';

/** Codes the service never answers with: the SDK client's and the MCP middleware's own. */
export const NOT_HTTP = 'not-http';

type HttpStatus = 400 | 401 | 403 | 404 | 405 | 408 | 409 | 413 | 422 | 429 | 431 | 500 | 503;

/** Every code, with the status the service answers it with, or NOT_HTTP. The type makes the map complete. */
export const ERROR_STATUS: { readonly [C in AnyErrorCode]: C extends ClientErrorCode | McpErrorCode ? typeof NOT_HTTP : HttpStatus } = {
  // Block A: shape, size, completeness
  BUNDLE_INCOMPLETE: 403,
  MALFORMED_JWS: 400,
  UNSUPPORTED_ALG: 400,
  NON_CANONICAL_JSON: 400,
  NUMBER_OUT_OF_RANGE: 400,
  INVALID_FIELD: 400,
  CHAIN_TOO_DEEP: 403,
  // Block B: linkage
  CHAIN_HASH_MISMATCH: 403,
  ISSUER_AUDIENCE_GAP: 403,
  SUBJECT_MISMATCH: 403,
  DR_CHAIN_MISMATCH: 403,
  COMMAND_MISMATCH: 403,
  // Block C: signatures and trust
  SIGNATURE_INVALID: 403,
  WEAK_KEY: 400,
  INVALID_DID: 400,
  UNTRUSTED_ROOT: 403,
  TOOL_SERVER_MISMATCH: 403,
  // Block D: attenuation and policy
  POLICY_ESCALATION: 403,
  POLICY_VIOLATION: 403,
  BINDING_MISMATCH: 403,
  TOOL_UNDECLARED: 403,
  RULE_DENIED: 403,
  APPROVAL_REQUIRED: 403,
  APPROVALS_PENDING_LIMIT: 403,
  // Block E: time
  RECEIPT_EXPIRED: 403,
  RECEIPT_NOT_YET_VALID: 403,
  INVOCATION_STALE: 403,
  // Block F: status
  RECEIPT_REVOKED: 403,
  GRANT_PENDING_APPROVAL: 403,
  // Block G: runtime state
  REPLAY_DETECTED: 403,
  CALLS_EXHAUSTED: 403,
  BUDGET_EXHAUSTED: 403,
  TOOL_RATE_LIMITED: 403,
  APPROVAL_REJECTED: 403,
  APPROVAL_EXPIRED: 403,
  APPROVAL_USED: 403,
  APPROVAL_MISMATCH: 403,
  APPROVAL_DECIDED_BY_CALLER: 403,
  // Service edge
  INVALID_REQUEST: 400,
  UNAUTHORIZED: 401,
  FORBIDDEN: 403,
  NOT_FOUND: 404,
  METHOD_NOT_ALLOWED: 405,
  CONFLICT: 409,
  SELF_APPROVAL: 403,
  PAYLOAD_TOO_LARGE: 413,
  HEADERS_TOO_LARGE: 431,
  REQUEST_TIMEOUT: 408,
  UNPROCESSABLE: 422,
  RATE_LIMITED: 429,
  SERVICE_BUSY: 503,
  STORAGE_UNAVAILABLE: 503,
  INTERNAL: 500,
  // Transparency log
  MALFORMED_NOTE: 400,
  INVALID_VERIFIER_KEY: 400,
  NOTE_NOT_VERIFIED: 403,
  MALFORMED_CHECKPOINT: 400,
  MALFORMED_LOG_PROOF: 400,
  LOG_PROOF_INVALID: 403,
  MALFORMED_TILE: 400,
  COSIGNATURES_INSUFFICIENT: 403,
  // SDK client and MCP middleware only
  NETWORK_ERROR: NOT_HTTP,
  TIMEOUT: NOT_HTTP,
  ABORTED: NOT_HTTP,
  UNEXPECTED_RESPONSE: NOT_HTTP,
  BUNDLE_MISSING: NOT_HTTP,
  BUNDLE_MALFORMED: NOT_HTTP,
  TOOL_MISMATCH: NOT_HTTP,
  BATON_UNAVAILABLE: NOT_HTTP,
  UNGATED_REQUEST: NOT_HTTP,
};

/**
 * The status of a verification denial, the `{valid:false}` answer of
 * POST /v1/verify: the call is denied whatever the reason, including a
 * malformed record in the bundle, so that a tool server branches on one status.
 */
export const DENIAL_STATUS = 403 as const;

/**
 * A delegation record refused on its merits when submitted for storage
 * (POST /v1/delegations, custodial issuance): the request is well-formed but
 * the record is not acceptable, so a refusal that verify answers with 403 is
 * 422 here. A malformed record stays 400.
 */
export class SubmissionRefusal extends BatonError {}

/** The HTTP status the service answers `e` with. */
export function httpStatusOf(e: BatonError): HttpStatus {
  const status = ERROR_STATUS[e.code];
  if (e instanceof SubmissionRefusal && status === 403) return 422;
  return status;
}

/** The service's codes and their statuses, for the /docs page. */
export function serviceErrorStatuses(): [ErrorCode, HttpStatus][] {
  return SERVICE_ERROR_CODES.map((code) => [code, ERROR_STATUS[code]]);
}
