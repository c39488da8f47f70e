/**
 * The Baton SDK: everything an agent, a tool server or an auditor needs.
 *
 * - keys:        did:key Ed25519 key pairs and their JSON key files
 * - records:     root and sub-delegations (attenuation checked before signing),
 *                invocations, bundles by value or by reference
 * - revocation:  signed revocation records
 * - client:      BatonClient, a typed HTTP client for every route
 * - offline:     verifyChain / verifyDelegations (the service's own pipeline,
 *                blocks A-F) and verifyServiceReceipt for service receipts
 *
 * Ed25519 runs on Node's native crypto, or on @noble/ed25519 where native is
 * missing, with one verification rule on both (src/protocol/ed25519.ts).
 *
 * Published as @baton-drs/sdk (scripts/build.mjs); inside this repository
 * it is imported as `baton`.
 */

// Keys
export { generateKeyPair, keyPairFromFile, keyPairFromSeed, keyPairToFile } from './keys.js';
export type { KeyFile, KeyPair } from './keys.js';

// Records
export {
  createInvocation,
  createRootDelegation,
  createSubDelegation,
  makeBundle,
  readDelegation,
  subDelegationViolations,
} from './records.js';
export type { InvocationInput, RootDelegationInput, SignedDelegation, SignedInvocation, SubDelegationInput } from './records.js';

// Revocation
export { createRevocation } from './revocation.js';
export type { RevocationInput, SignedRevocation } from './revocation.js';
export type { RevocationPayload } from '../protocol/revocation.js';

// HTTP client
export {
  BatonAdmin,
  BatonApiError,
  BatonClient,
  DEFAULT_TIMEOUT_MS,
  isBatonApiError,
  MAX_ANSWER_BYTES,
  MAX_VERIFY_ANSWER_BYTES,
} from './client.js';
// API-key lifecycle (expiry, rotation) for operators.
export { adminKeys } from './admin.js';
export type {
  AdminKeys,
  ApiKeyLifecycleView,
  CreateApiKeyInput,
  CreatedLifecycleApiKey,
  LifecycleApiKey,
  RotateApiKeyInput,
  RotatedApiKey,
} from './admin.js';
// Tool catalogs and approvals (BatonClient.tools)
export { BatonTools, createApprovalDecision, toolDocumentHashes } from './tools.js';
// Signed decisions afterwards: check the record GET /v1/approvals/{id} serves as decision.record, offline.
export { verifyApprovalDecision, type ApprovalDecisionCheck, type ApprovalDecisionVerification } from './approval-decision.js';
// What an approval's service receipt binds (its `binding`): a webhook receiver recomputes it from the approval it shows.
export { approvalBinding } from '../protocol/approval.js';
export type { ApprovalSubject } from '../protocol/approval.js';
export type {
  ApprovalDecisionInput,
  ApprovalStatus,
  ApprovalView,
  DecisionInput,
  GrantView,
  PublishToolsInput,
  SignedApprovalDecision,
  ToolDocumentView,
} from './tools.js';
export type { ToolDeclaration } from '../protocol/tool-catalog.js';
export type {
  ActualReport,
  ActualSource,
  ActualView,
  ApiKeyView,
  BatonClientOptions,
  ChainResult,
  Counter,
  CreatedApiKey,
  DelegationDetail,
  DelegationStatus,
  DelegationView,
  DenialView,
  InvocationDetail,
  InvocationListItem,
  InvocationPage,
  DecisionFilter,
  ServiceReceiptFilter,
  DecisionPage,
  DenialListItem,
  IssueRequest,
  IssueResult,
  Jwk,
  LimitWarning,
  LogConsistencyProof,
  LogInfo,
  ServiceReceiptItem,
  ServiceReceiptLogProof,
  ServiceReceiptKind,
  ServiceReceiptPage,
  RequestOptions,
  RevokedBy,
  RevokeResult,
  RootView,
  ServiceKeyView,
  ServiceReceiptRef,
  SubmitResult,
  TenantScope,
  TenantView,
  TreeNode,
  TreeResult,
  Usage,
  VerifyAllowed,
  VerifyDenied,
  VerifyOptions,
  VerifyResult,
} from './client.js';

// MCP tool servers and agents (withBaton, batonCall, invokeTool, callToolWithBundle, refusalOf) have their
// own entry, baton/mcp (src/mcp/middleware.ts): importing the SDK does not load the MCP SDK.

// Offline verification: the same pure pipeline the service runs.
export { DelegationCache, verifyChain, verifyDelegations } from '../protocol/chain.js';
export type {
  Binding,
  ChainContext,
  ChainDecision,
  ChainOptions,
  DecisionError,
  DelegationChainOptions,
  DelegationsDecision,
  VerifiedDelegation,
  VerifiedInvocation,
} from '../protocol/chain.js';
// Pure (no I/O, never throws): checks a service receipt against the service's published keys.
export { verifyServiceReceipt } from '../protocol/service-receipt.js';
export type { ServiceReceiptVerification, ServiceVerificationKey } from '../protocol/service-receipt.js';

// Errors, policy and record types
export { BatonError, ERROR_TABLE, isBatonError, isErrorCode } from '../protocol/errors.js';
export type {
  AnyErrorCode,
  Block,
  ClientErrorCode,
  ErrorBody,
  ErrorCode,
  ErrorEnvelope,
  McpErrorCode,
  Violation,
} from '../protocol/errors.js';
export { checkAttenuation, parsePolicy } from '../protocol/policy.js';
export type { Policy } from '../protocol/policy.js';
export { recordHash } from '../protocol/hash.js';
export type { RecordHash } from '../protocol/hash.js';
export type { Bundle, DelegationPayload, InvocationPayload } from '../protocol/records.js';
export { defaultEd25519Backend } from '../protocol/ed25519.js';

// Transparency log: inclusion and consistency checks offline, and a full replay (baton audit).
export { auditLog, logPolicy, serviceReceiptLeafHash, verifyCheckpointConsistency, verifyServiceReceiptInclusion } from './audit.js';
export type { AuditFinding, AuditOptions, AuditReport, ConsistencyFinding, ConsistencyResult, LogTrust, RollbackFinding } from './audit.js';
// Witnesses: a cosignature/v1 line added to the served checkpoint, signNote(parseNote(note), [cosignatureSigner(name,
// seed, now)]), posted (POST /v1/log/cosignatures) with formatVerifierKey(verifierKey(name, COSIGNATURE_V1, publicKey)).
export { COSIGNATURE_V1, formatVerifierKey, parseNote, parseVerifierKey, signNote, verifierKey } from '../protocol/note.js';
export type { Note, NoteSigner, VerifierKey } from '../protocol/note.js';
export { cosignatureSigner } from '../protocol/cosignature.js';
