/**
 * BatonClient: a typed HTTP client for every Baton route.
 *
 *   const baton = new BatonClient({ baseUrl: 'http://127.0.0.1:8080', apiKey });
 *   const decision = await baton.verify(bundle, { body: toolArgs, requireBinding: true });
 *   if (!decision.valid) refuse(decision.error.code, decision.error.suggestion);
 *
 * Conventions:
 * - Request bodies are the wire JSON of openapi.yaml (snake_case); options that
 *   change how a call is made are camelCase (dryRun, timeoutMs, ...).
 * - Every response is the server's JSON, typed here. The only addition is
 *   `request_id` on verify results (taken from the X-Request-Id header).
 * - A refusal is a thrown BatonApiError carrying the server's stable `code`,
 *   `suggestion`, `details` and `requestId`. Exception: a verify DENY is an
 *   answer, not a failure, so verify() returns it ({valid: false, ...}).
 * - No network error or timeout is ever mistaken for an allow: both throw
 *   (code NETWORK_ERROR / TIMEOUT), and the caller must refuse the tool call.
 * - Every call is bounded by timeoutMs (default 10 s), response body included.
 * - An answer is taken only in the shape Baton gives it (answer-shape.ts), and a chain fetched by
 *   hash only when it is the chain of that hash (fetched-chain.ts): anything else throws
 *   UNEXPECTED_RESPONSE.
 * - Nothing is retried: a verify consumes a call, so retrying is the caller's
 *   decision (BatonApiError.retryable says when it can help; the same invocation re-sent with
 *   the same key gets its original allow back, `retry: true`, counted once).
 */
import { BatonTools } from './tools.js';
import { decodeBase64url } from '../protocol/base64url.js';
import { ERROR_TABLE, isErrorCode, type ClientErrorCode, type ErrorCode, type Violation } from '../protocol/errors.js';
import { notJsonAsIs, utf8Decode } from '../protocol/jcs.js';
import { decodeJws } from '../protocol/jws.js';
import { compareBinding } from '../protocol/chain.js';
import type { Bundle } from '../protocol/records.js';
import {
  serviceKid,
  verifyServiceReceipt,
  type ServiceReceiptVerification,
  type ServiceVerificationKey,
} from '../protocol/service-receipt.js';
import { publicKeyFromDidKey } from '../protocol/did-key.js';
import { recordHash } from '../protocol/hash.js';
import type { components } from '../api/wire-types.js';
import type { KeyPair } from './keys.js';
import type { SignedDelegation } from './records.js';
import { createRevocation } from './revocation.js';
import * as answers from './answer-shape.js';
import { fetchedChainProblem } from './fetched-chain.js';
import { urlWithoutUserInfo } from './server-url.js';

export const DEFAULT_TIMEOUT_MS = 10_000;
/** The longest delay a timer takes (2^31 - 1 ms, about 24.8 days); a longer one fires at once. */
const MAX_TIMEOUT_MS = 2_147_483_647;
const SDK_USER_AGENT = 'baton-sdk/0.1.0';

// ---------------------------------------------------------------- errors

/**
 * A refused or failed call. `code` is the server's stable code (ERROR_TABLE in
 * src/protocol/errors.ts) when the server answered, otherwise a ClientErrorCode.
 * `status` is the HTTP status, or 0 when no response arrived.
 */
export class BatonApiError extends Error {
  readonly status: number;
  readonly code: ErrorCode | ClientErrorCode | (string & {});
  readonly suggestion: string | undefined;
  readonly details: Record<string, unknown> | undefined;
  /** The service's request id (envelope or X-Request-Id): quote it to the operator. */
  readonly requestId: string | undefined;
  readonly method: string;
  readonly url: string;

  constructor(init: {
    status: number;
    code: BatonApiError['code'];
    message: string;
    suggestion?: string | undefined;
    details?: Record<string, unknown> | undefined;
    requestId?: string | undefined;
    method: string;
    url: string;
    cause?: unknown;
  }) {
    super(init.message, init.cause === undefined ? undefined : { cause: init.cause });
    this.name = 'BatonApiError';
    this.status = init.status;
    this.code = init.code;
    this.suggestion = init.suggestion ?? (isErrorCode(init.code) ? ERROR_TABLE[init.code].suggestion : undefined);
    this.details = init.details;
    this.requestId = init.requestId;
    this.method = init.method;
    this.url = init.url;
  }

  /** Every unmet condition the server listed (issuance refusals carry them in details.violations). */
  get violations(): readonly Violation[] {
    const v = this.details?.['violations'];
    return Array.isArray(v) ? (v as Violation[]) : [];
  }

  /** The verification block (A-G) of the code, when the server named one. */
  get block(): string | undefined {
    const b = this.details?.['block'];
    return typeof b === 'string' ? b : undefined;
  }

  /**
   * Whether trying again later can help: no answer, or an answer saying "busy" or "not reachable
   * now" (429, 502, 503, 504), whether Baton or a proxy or load balancer before it gave it. Like a
   * timeout, a 502 or 504 does not say the request did nothing: reads are safe to repeat, and so is
   * a verify of the same invocation (the same key gets its original allow back, counted once) or a
   * submission or revocation (idempotent); a create may have been applied, so read it back first.
   * Baton's 500 (INTERNAL) is not retryable: it is a fault of the service, which the same request
   * most likely meets again. An answer of the wrong shape is not either, whatever its status says.
   */
  get retryable(): boolean {
    return this.code === 'NETWORK_ERROR' || this.code === 'TIMEOUT' || RETRYABLE_STATUSES.has(this.status);
  }
}

/**
 * Records a page's next cursor, refusing one the server answered before, or one named by a page that
 * held nothing: following either, a loop reading every page would never end (a server may page in a
 * circle, or hand out fresh cursors to empty pages forever). UNEXPECTED_RESPONSE instead.
 */
export function followCursorOnce<C extends string | number>(
  seen: Set<string>,
  next: C,
  path: string,
  itemsOnPage: number,
  answer: { status?: number; requestId?: string | null } = {},
): C {
  const key = String(next);
  const problem = seen.has(key)
    ? `answered ${JSON.stringify(next)} as the next page, which it had answered before`
    : itemsOnPage === 0
      ? `answered an empty page that names a next one (${JSON.stringify(next)})`
      : undefined;
  if (problem !== undefined) {
    throw new BatonApiError({
      status: answer.status ?? 200,
      code: 'UNEXPECTED_RESPONSE',
      method: 'GET',
      url: path,
      message: `The server pages GET ${path} wrongly: it ${problem}, so paging would never end.`,
      suggestion: 'The service pages this list wrongly; report it to its operator with this cursor.',
      requestId: answer.requestId ?? undefined,
    });
  }
  seen.add(key);
  return next;
}

const RETRYABLE_STATUSES: ReadonlySet<number> = new Set([429, 502, 503, 504]);

/**
 * The most an answer may hold, so that a server which never stops sending cannot take the caller's
 * memory. Baton's largest answer is a delegation tree of 1000 records, each with its decoded policy
 * (up to about 48 KB under the 64 KiB record limit): about 50 MB at worst. A verify's answer names one
 * chain's leaf policy and limits, at most a few hundred KB; a tool server's memory is the one a hostile
 * answer to verify would take, so that route reads less (MAX_VERIFY_ANSWER_BYTES).
 */
export const MAX_ANSWER_BYTES = 128 * 1024 * 1024;
export const MAX_VERIFY_ANSWER_BYTES = 4 * 1024 * 1024;

class AnswerTooLarge extends Error {
  constructor(readonly status: number) {
    super('answer too large');
  }
}

/** An answer a fetch got by following a redirect (a caller's fetch may, whatever `redirect` says). */
class AnswerRedirected extends Error {
  constructor(readonly status: number) {
    super('answer redirected');
  }
}

/** A body whose pieces are not bytes (an object-mode stream, text of an unknown encoding). */
class AnswerNotBytes extends Error {
  constructor(readonly status: number) {
    super('answer not bytes');
  }
}

/**
 * The body, refused (AnswerTooLarge) once past `max` bytes, whether it says its length or not.
 * Reading stops when `stopped` aborts (a timeout, a cancel): a body that ignores the signal is not
 * read on in the background.
 */
async function bodyWithin(res: Response, max: number, stopped: AbortSignal): Promise<Uint8Array> {
  if (Number(res.headers.get('content-length') ?? 0) > max) throw new AnswerTooLarge(res.status);
  if (res.body === null) return new Uint8Array(0);
  const parts: Uint8Array[] = [];
  let total = 0;
  const take = (chunk: unknown): void => {
    if (stopped.aborted) throw stopped.reason;
    if (!(chunk instanceof Uint8Array)) throw new AnswerNotBytes(res.status);
    total += chunk.byteLength;
    if (total > max) throw new AnswerTooLarge(res.status);
    parts.push(chunk);
  };
  const body = res.body as unknown as { getReader?: unknown; [Symbol.asyncIterator]?: unknown } | undefined;
  if (typeof body?.getReader === 'function') {
    const reader = res.body.getReader();
    try {
      for (let chunk = await reader.read(); !chunk.done; chunk = await reader.read()) take(chunk.value);
    } catch (e) {
      void reader.cancel().catch(() => {});
      throw e;
    }
  } else if (typeof body?.[Symbol.asyncIterator] === 'function') {
    // A custom fetch's Response-like answer (node-fetch's body is a Node stream): counted as it comes.
    for await (const chunk of body as AsyncIterable<unknown>) take(chunk);
  } else {
    // Nothing to read piecewise: read whole, then judged.
    const whole = new Uint8Array(await res.arrayBuffer());
    if (whole.byteLength > max) throw new AnswerTooLarge(res.status);
    return whole;
  }
  // Joined here, not with concatBytes(...parts): a body of millions of tiny pieces would overflow a spread.
  const bytes = new Uint8Array(total);
  let at = 0;
  for (const part of parts) {
    bytes.set(part, at);
    at += part.byteLength;
  }
  return bytes;
}

export function isBatonApiError(e: unknown): e is BatonApiError {
  return e instanceof BatonApiError;
}

// ---------------------------------------------------------------- wire types

// Generated from the service's OpenAPI document (npm run openapi): the SDK
// names them, the contract defines them.
type Schemas = components['schemas'];

export type ServiceReceiptRef = Schemas['ServiceReceiptRef'];
export type DelegationStatus = Schemas['DelegationStatus'];
export type DelegationView = Schemas['DelegationView'];
export type SubmitResult = Schemas['SubmitResult'];
export type IssueRequest = Schemas['IssueRequest'];
export type IssueResult = Schemas['IssueResult'];
export type Usage = Schemas['Usage'];
export type DelegationDetail = Schemas['DelegationDetail'];
export type ChainResult = Schemas['DelegationChain'];
export type TreeNode = Schemas['TreeNode'];
export type TreeResult = Schemas['DelegationTree'];
export type ChainContext = Schemas['ChainContext'];
export type LogInfo = Schemas['LogInfo'];
export type ServiceReceiptLogProof = Schemas['ServiceReceiptLogProof'];
export type LogConsistencyProof = Schemas['LogConsistencyProof'];
export type Counter = Schemas['Counter'];
export type LimitWarning = Schemas['Warning'];

export interface VerifyOptions extends RequestOptions {
  /** Run every check and report counters, consuming nothing (POST /v1/verify/dry-run). */
  readonly dryRun?: boolean;
  /** The request body the tool received, compared with the signed args under JCS. */
  readonly body?: unknown;
  /** Deny BINDING_MISMATCH unless `body` equals the signed args. */
  readonly requireBinding?: boolean;
  /** The approval this call spends (a new invocation of the approved call). */
  readonly approvalId?: string;
}

/** The answers of verify, plus the X-Request-Id response header. */
export type VerifyAllowed = Schemas['VerifyAllow'] & { readonly request_id: string | null };
export type VerifyDenied = Schemas['VerifyDeny'] & { readonly request_id: string | null };
export type VerifyResult = VerifyAllowed | VerifyDenied;

export type ActualSource = Schemas['ActualSource'];
export type ActualReport = Schemas['ActualRequest'];
export type ActualView = Schemas['Actual'];
export type InvocationListItem = Schemas['InvocationListItem'];
export type DenialView = Schemas['Denial'];
export type InvocationDetail = Schemas['InvocationAllowed'] | Schemas['InvocationDenied'];
export type InvocationPage = Schemas['InvocationPage'];
export type DenialListItem = Schemas['DenialListItem'];
export type DecisionPage = Schemas['DecisionPage'];
/** Filters of GET /v1/service-receipts, combined with AND; dates as RFC 3339 text with a zone, or Date. */
export interface ServiceReceiptFilter {
  readonly kind?: ServiceReceiptItem['kind'];
  /** A DR hash or an invocation jti. */
  readonly subject?: string;
  /** Signed at or after. */
  readonly since?: string | Date;
  /** Signed before. */
  readonly until?: string | Date;
}

const instantText = (d: string | Date | undefined): string | undefined => (d instanceof Date ? d.toISOString() : d);

/** Filters of GET /v1/invocations, combined with AND; dates as RFC 3339 text with a zone, or Date. */
export interface DecisionFilter {
  /** Decisions whose chain passes through this DR (its whole subtree). */
  readonly dr?: string;
  /** Allowed invocations of this tool. */
  readonly tool?: string;
  readonly outcome?: 'allowed' | 'denied';
  /** Denials with this code (theirs or one of their violations'). */
  readonly code?: string;
  /** At or after. */
  readonly since?: string | Date;
  /** Before. */
  readonly until?: string | Date;
}
export type RevokedBy = Schemas['RevokedBy'];
export type RevokeResult = Schemas['RevokeResult'];
export type ServiceReceiptKind = Schemas['ServiceReceiptKind'];
export type ServiceReceiptItem = Schemas['ServiceReceipt'];
export type ServiceReceiptPage = Schemas['ServiceReceiptPage'];
export type ServiceKeyView = Schemas['ServiceKey'];
export type Jwk = Schemas['Jwk'];
export type TenantView = Schemas['Tenant'];
export type RootView = Schemas['TrustedRoot'];
export type TenantScope = Schemas['TenantScope'];
export type ApiKeyView = Schemas['ApiKey'];
export type CreatedApiKey = Schemas['CreatedApiKey'];

// ---------------------------------------------------------------- options

export interface BatonClientOptions {
  /** e.g. http://127.0.0.1:8080 (a path prefix is kept: https://host/baton). */
  readonly baseUrl: string;
  /** Sent as Authorization: Bearer <key> on routes that take one. */
  readonly apiKey?: string | undefined;
  /** Per-call bound, response body included. Default 10 000 ms. */
  readonly timeoutMs?: number;
  /** A fetch implementation (tests, proxies, instrumentation). Default: global fetch. */
  readonly fetch?: typeof fetch;
  /** Extra headers on every request. */
  readonly headers?: Readonly<Record<string, string>>;
  /**
   * The did:key of each Baton service key this client trusts to sign allows (each key's `did` at
   * GET /v1/keys, saved with the tool server's configuration). Given, verify() takes an allow only
   * with a service receipt one of them signed for the very invocation it sent; any other answer
   * throws UNEXPECTED_RESPONSE. Without it an allow is taken on the answer's word, so the
   * connection (TLS, the right base URL) is all that makes it Baton's. After the service rotates its
   * key, add the new one's did here.
   */
  readonly serviceDids?: readonly string[];
  /**
   * The tenant this client's key belongs to (`ten_…`); required with serviceDids. A pinned
   * service signs for every tenant it serves, so an allow is taken only when its receipt names
   * this tenant: another tenant's real allow of the same invocation (one whose roots an attacker
   * controls) proves nothing of this one's policies.
   */
  readonly tenantId?: string;
}

export interface RequestOptions {
  /** Cancels the call (the error code is ABORTED). */
  readonly signal?: AbortSignal;
  readonly timeoutMs?: number;
  /** Overrides the client's key for this call; null sends no key. */
  readonly apiKey?: string | null;
}

type AuthMode = 'key' | 'none';

interface CallSpec {
  readonly method: 'GET' | 'POST' | 'DELETE';
  readonly path: string;
  readonly query?: Record<string, string | number | undefined>;
  readonly body?: unknown;
  readonly auth: AuthMode;
  /** Non-2xx statuses whose JSON body is an answer, not an error (verify's 403 deny, readyz's 503). */
  readonly answerStatuses?: (status: number, body: unknown) => boolean;
  /** The most its answer may hold; MAX_ANSWER_BYTES unless the route's answers are smaller. */
  readonly maxAnswerBytes?: number;
  /** The shape the answer must have (or a choice of one by the body), or null when no body is due (204). */
  readonly answer: answers.Shape | ((body: unknown) => answers.Shape) | null;
}

interface Answer<T> {
  readonly status: number;
  readonly body: T;
  readonly requestId: string | null;
}

const enc = encodeURIComponent;

// ---------------------------------------------------------------- the client

export class BatonClient {
  readonly baseUrl: string;
  readonly timeoutMs: number;
  /** Tenants, trusted roots and API keys: needs the admin key. */
  readonly admin: BatonAdmin;
  /** Tool catalog and approvals (issue 13). */
  readonly tools: BatonTools;
  readonly #apiKey: string | undefined;
  readonly #fetch: typeof fetch;
  readonly #headers: Readonly<Record<string, string>>;
  #keys: ServiceVerificationKey[] | undefined;
  /** The keys of options.serviceDids (the only ones verify() and verifyServiceReceipt() then trust), and the tenant. */
  readonly #pinned: PinnedService | undefined;

  constructor(options: BatonClientOptions) {
    const shown = JSON.stringify(urlWithoutUserInfo(options.baseUrl));
    const unusable = () => new TypeError(`baseUrl must be an absolute http(s) URL such as http://127.0.0.1:8080, got ${shown}.`);
    let url: URL;
    try {
      url = new URL(options.baseUrl);
    } catch {
      throw unusable();
    }
    if (url.protocol !== 'http:' && url.protocol !== 'https:') throw unusable();
    if (url.search || url.hash) throw new TypeError('baseUrl must not carry a query or fragment.');
    // fetch refuses such a URL at every call, which read as a service not reachable; Baton's key goes in apiKey.
    if (url.username || url.password) {
      throw new TypeError(
        `baseUrl must not carry a user name or password (${shown}): give Baton's API key as apiKey (CLI: --api-key or a context).`,
      );
    }
    this.baseUrl = url.toString().replace(/\/+$/, '');
    this.timeoutMs = usableTimeoutMs(options.timeoutMs ?? DEFAULT_TIMEOUT_MS);
    this.#apiKey = options.apiKey || undefined;
    const f = options.fetch ?? globalThis.fetch;
    if (typeof f !== 'function') throw new TypeError('No fetch implementation: run on Node 20+ or pass options.fetch.');
    this.#fetch = f;
    this.#headers = { ...(options.headers ?? {}) };
    if (options.serviceDids !== undefined) {
      if (typeof options.tenantId !== 'string' || !/^ten_\S+$/.test(options.tenantId))
        throw new TypeError(
          'serviceDids needs tenantId, the id (ten_…) of the tenant whose key this client uses: the service signs for every tenant, so the receipt must name yours.',
        );
      this.#pinned = { keys: pinnedServiceKeys(options.serviceDids), tenantId: options.tenantId };
    }
    this.admin = new BatonAdmin((spec, opts) => this.#call(spec, opts));
    this.tools = new BatonTools((spec, opts) => this.#call(spec, opts));
  }

  /** The tenant whose signed allows alone this client takes (options.tenantId, with serviceDids), or undefined when it pins none. */
  get pinnedTenantId(): string | undefined {
    return this.#pinned?.tenantId;
  }

  // ------------------------------------------------------------ issuance

  /**
   * POST /v1/delegations: stores signed DRs, one or a root-to-leaf list (the
   * first is a trusted root, or extends a stored parent). Idempotent. Agents
   * need no key here (the signature is the proof); with a key (issue scope)
   * the record is stored for that key's tenant. Pass {apiKey: null} to submit
   * without the client's key.
   */
  async submit(
    records: string | SignedDelegation | readonly (string | SignedDelegation)[],
    opts: RequestOptions = {},
  ): Promise<SubmitResult> {
    const jws = (r: string | SignedDelegation) => (typeof r === 'string' ? r : r.jws);
    const body =
      typeof records === 'string' || !Array.isArray(records)
        ? { receipt: jws(records as string | SignedDelegation) }
        : { receipts: (records as readonly (string | SignedDelegation)[]).map(jws) };
    return (
      await this.#call<SubmitResult>({ method: 'POST', path: '/v1/delegations', body, auth: 'key', answer: answers.SUBMIT_RESULT }, opts)
    ).body;
  }

  /** POST /v1/delegations/issue: the service signs a root DR with the tenant's custodial root key (issue scope). */
  async issue(request: IssueRequest, opts: RequestOptions = {}): Promise<IssueResult> {
    return (
      await this.#call<IssueResult>(
        { method: 'POST', path: '/v1/delegations/issue', body: request, auth: 'key', answer: answers.ISSUE_RESULT },
        opts,
      )
    ).body;
  }

  // ------------------------------------------------------------ the hot path

  /**
   * POST /v1/verify (verify scope). Resolves to the decision: {valid: true,
   * ...} or {valid: false, error, violations}. A deny is returned, never
   * thrown; anything that is not a decision (bad key, storage down, timeout)
   * throws BatonApiError, and the caller must then refuse the call too.
   */
  async verify(bundle: Bundle, opts: VerifyOptions = {}): Promise<VerifyResult> {
    // Sent as JSON, such a body would reach Baton as another one (Infinity as null), and be compared as that.
    const lossy = opts.body === undefined ? undefined : notJsonAsIs(opts.body);
    if (lossy !== undefined)
      throw new TypeError(`verify: body is not JSON as it is (${lossy}); Baton would compare another body. Refuse the call.`);
    const body = {
      bundle_version: bundle.bundle_version,
      invocation: bundle.invocation,
      receipts: bundle.receipts,
      ...(opts.body !== undefined ? { body: opts.body } : {}),
      ...(opts.requireBinding ? { require_binding: true } : {}),
      ...(opts.approvalId !== undefined ? { approval_id: opts.approvalId } : {}),
    };
    // Its own path: never a body member, which may be an agent's bundle, nor a query parameter a proxy might strip.
    const path = opts.dryRun ? '/v1/verify/dry-run' : '/v1/verify';
    const answer = await this.#call<Omit<VerifyAllowed, 'request_id'> | Omit<VerifyDenied, 'request_id'>>(
      {
        method: 'POST',
        path,
        body,
        auth: 'key',
        answerStatuses: (status, b) => status === 403 && isDenyBody(b),
        answer: (b) => ((b as { valid?: unknown } | null)?.valid === false ? answers.VERIFY_DENY : answers.VERIFY_ALLOW),
        maxAnswerBytes: MAX_VERIFY_ANSWER_BYTES,
      },
      opts,
    );
    const problem = answer.body.valid ? allowNotForThisCall(answer.status, answer.body, bundle, opts, this.#pinned) : undefined;
    if (problem !== undefined) throw this.#notTaken(answer, 'POST', path, `The answer to POST ${path} ${problem}; refuse the call.`);
    return { ...answer.body, request_id: answer.requestId } as VerifyResult;
  }

  // ------------------------------------------------------------ revocation

  /** POST /v1/delegations/{hash}/revoke with the client's key (issue scope, or admin): {confirm: true, reason}. */
  async revoke(hash: string, reason: string, opts: RequestOptions = {}): Promise<RevokeResult> {
    return (
      await this.#call<RevokeResult>(
        {
          method: 'POST',
          path: `/v1/delegations/${enc(hash)}/revoke`,
          body: { confirm: true, reason },
          auth: 'key',
          answer: answers.REVOKE_RESULT,
        },
        opts,
      )
    ).body;
  }

  /**
   * Revokes by a signed revocation record, without an API key: signs one with
   * `signer` (the DR's issuer, the root issuer, or an ancestor's holder), or
   * posts `revocation` if already signed. Its target names the DR.
   */
  async revokeSigned(
    input: { readonly revocation: string } | { readonly signer: KeyPair; readonly target: string; readonly reason?: string },
    opts: Omit<RequestOptions, 'apiKey'> = {},
  ): Promise<RevokeResult> {
    let jws: string;
    let target: string;
    if ('revocation' in input) {
      jws = input.revocation;
      target = revocationTarget(jws);
    } else {
      const signed = createRevocation({
        signer: input.signer,
        target: input.target,
        ...(input.reason !== undefined ? { reason: input.reason } : {}),
      });
      jws = signed.jws;
      target = signed.payload.target;
    }
    // No Authorization header: with one, the service takes the API-key path.
    return (
      await this.#call<RevokeResult>(
        {
          method: 'POST',
          path: `/v1/delegations/${enc(target)}/revoke`,
          body: { revocation: jws },
          auth: 'none',
          answer: answers.REVOKE_RESULT,
        },
        opts,
      )
    ).body;
  }

  // ------------------------------------------------------------ metered spend

  /** POST /v1/invocations/{jti}/actuals (report scope): the metered cost of an allowed invocation, with provenance. */
  async reportActual(jti: string, actual: ActualReport, opts: RequestOptions = {}): Promise<ActualView> {
    return (
      await this.#call<ActualView>(
        { method: 'POST', path: `/v1/invocations/${enc(jti)}/actuals`, body: actual, auth: 'key', answer: answers.ACTUAL },
        opts,
      )
    ).body;
  }

  // ------------------------------------------------------------ reads

  /** GET /v1/delegations/{hash}: the record, its status and its subtree's usage. */
  async getDelegation(hash: string, opts: RequestOptions = {}): Promise<DelegationDetail> {
    return (
      await this.#call<DelegationDetail>(
        { method: 'GET', path: `/v1/delegations/${enc(hash)}`, auth: 'key', answer: answers.DELEGATION_DETAIL },
        opts,
      )
    ).body;
  }

  /** GET /v1/delegations/{hash}/chain: root-to-leaf delegation receipts, each record with its acceptance service receipt. */
  async getChain(hash: string, opts: RequestOptions = {}): Promise<ChainResult> {
    const path = `/v1/delegations/${enc(hash)}/chain`;
    const answer = await this.#call<ChainResult>({ method: 'GET', path, auth: 'key', answer: answers.DELEGATION_CHAIN }, opts);
    // Callers sign under this chain (a sub-delegation, an invocation): only the one of `hash` will do.
    const problem = fetchedChainProblem(hash, answer.body);
    if (problem !== undefined)
      throw this.#notTaken(
        answer,
        'GET',
        path,
        `Baton answered GET ${path} with a chain that is not the one of ${hash}: ${problem}; it is not taken.`,
        ', and that the hash is the one meant',
      );
    return answer.body;
  }

  /** GET /v1/delegations/{hash}/tree: the record and its descendants, nested. */
  async getTree(hash: string, opts: RequestOptions = {}): Promise<TreeResult> {
    return (
      await this.#call<TreeResult>(
        { method: 'GET', path: `/v1/delegations/${enc(hash)}/tree`, auth: 'key', answer: answers.DELEGATION_TREE },
        opts,
      )
    ).body;
  }

  /** GET /v1/delegations/{hash}/invocations: one page of the subtree's allowed invocations, newest first. */
  async listInvocations(hash: string, page: { cursor?: string; limit?: number } = {}, opts: RequestOptions = {}): Promise<InvocationPage> {
    return (
      await this.#call<InvocationPage>(
        {
          method: 'GET',
          path: `/v1/delegations/${enc(hash)}/invocations`,
          query: { cursor: page.cursor, limit: page.limit },
          auth: 'key',
          answer: answers.INVOCATION_PAGE,
        },
        opts,
      )
    ).body;
  }

  /** Every page of listInvocations, fetched as you iterate. */
  async *invocationPages(
    hash: string,
    page: { cursor?: string; limit?: number } = {},
    opts: RequestOptions = {},
  ): AsyncGenerator<InvocationPage> {
    let cursor = page.cursor;
    const seen = new Set<string>(cursor === undefined ? [] : [cursor]);
    for (;;) {
      const p = await this.listInvocations(
        hash,
        { ...(cursor !== undefined ? { cursor } : {}), ...(page.limit !== undefined ? { limit: page.limit } : {}) },
        opts,
      );
      yield p;
      if (p.next_cursor === null) return;
      cursor = followCursorOnce(seen, p.next_cursor, `/v1/delegations/${hash}/invocations`, p.invocations.length);
    }
  }

  /** Every invocation under `hash`, newest first, paged lazily. */
  async *iterateInvocations(hash: string, page: { limit?: number } = {}, opts: RequestOptions = {}): AsyncGenerator<InvocationListItem> {
    for await (const p of this.invocationPages(hash, page, opts)) yield* p.invocations;
  }

  /** GET /v1/invocations (audit scope): one page of the tenant's verify decisions, allowed and denied, newest first, filtered. */
  async listDecisions(filter: DecisionFilter & { cursor?: string; limit?: number } = {}, opts: RequestOptions = {}): Promise<DecisionPage> {
    const query = {
      dr: filter.dr,
      tool: filter.tool,
      outcome: filter.outcome,
      code: filter.code,
      since: instantText(filter.since),
      until: instantText(filter.until),
      cursor: filter.cursor,
      limit: filter.limit,
    };
    return (
      await this.#call<DecisionPage>({ method: 'GET', path: '/v1/invocations', query, auth: 'key', answer: answers.DECISION_PAGE }, opts)
    ).body;
  }

  /** Every decision matching `filter`, newest first, paged lazily (the cursor keeps the filters' order). */
  async *iterateDecisions(
    filter: DecisionFilter & { limit?: number } = {},
    opts: RequestOptions = {},
  ): AsyncGenerator<DecisionPage['invocations'][number]> {
    let cursor: string | undefined;
    const seen = new Set<string>();
    for (;;) {
      const p = await this.listDecisions({ ...filter, ...(cursor !== undefined ? { cursor } : {}) }, opts);
      yield* p.invocations;
      if (p.next_cursor === null) return;
      cursor = followCursorOnce(seen, p.next_cursor, '/v1/invocations', p.invocations.length);
    }
  }

  /** GET /v1/invocations/{jti}: the invocation, its decision, service receipt and actual (or its denials). */
  async getInvocation(jti: string, opts: RequestOptions = {}): Promise<InvocationDetail> {
    return (
      await this.#call<InvocationDetail>(
        { method: 'GET', path: `/v1/invocations/${enc(jti)}`, auth: 'key', answer: answers.INVOCATION_DETAIL },
        opts,
      )
    ).body;
  }

  /** GET /v1/service-receipts (audit scope): one page of the tenant's service receipts, oldest first. */
  async listServiceReceipts(
    page: ServiceReceiptFilter & { after?: number; limit?: number } = {},
    opts: RequestOptions = {},
  ): Promise<ServiceReceiptPage> {
    const query = {
      after: page.after,
      limit: page.limit,
      kind: page.kind,
      subject: page.subject,
      since: instantText(page.since),
      until: instantText(page.until),
    };
    return (
      await this.#call<ServiceReceiptPage>(
        { method: 'GET', path: '/v1/service-receipts', query, auth: 'key', answer: answers.SERVICE_RECEIPT_PAGE },
        opts,
      )
    ).body;
  }

  /** Every page of listServiceReceipts from `after`, fetched as you iterate. */
  async *serviceReceiptPages(
    page: ServiceReceiptFilter & { after?: number; limit?: number } = {},
    opts: RequestOptions = {},
  ): AsyncGenerator<ServiceReceiptPage> {
    let after = page.after;
    const seen = new Set<string>(after === undefined ? [] : [String(after)]);
    for (;;) {
      const p = await this.listServiceReceipts({ ...page, ...(after !== undefined ? { after } : {}) }, opts);
      yield p;
      if (p.next_after === null) return;
      after = followCursorOnce(seen, p.next_after, '/v1/service-receipts', p.service_receipts.length);
    }
  }

  /** Every service receipt from `after` on, oldest first, paged lazily. */
  async *iterateServiceReceipts(
    page: ServiceReceiptFilter & { after?: number; limit?: number } = {},
    opts: RequestOptions = {},
  ): AsyncGenerator<ServiceReceiptItem> {
    for await (const p of this.serviceReceiptPages(page, opts)) yield* p.service_receipts;
  }

  // ------------------------------------------------------------ transparency log

  /** GET /v1/log (audit scope): the tenant's log origin, tree size, root and note verifier keys. */
  async logInfo(opts: RequestOptions = {}): Promise<LogInfo> {
    return (await this.#call<LogInfo>({ method: 'GET', path: '/v1/log', auth: 'key', answer: answers.LOG_INFO }, opts)).body;
  }

  /**
   * GET /v1/log/service-receipts/{id}/proof (audit scope): the service receipt with its tlog-proof
   * bundle under the latest signed checkpoint, or the one of `treeSize`. Check it offline with
   * verifyServiceReceiptInclusion (or `baton log check`).
   */
  async logProof(serviceReceiptId: number, page: { treeSize?: number } = {}, opts: RequestOptions = {}): Promise<ServiceReceiptLogProof> {
    return (
      await this.#call<ServiceReceiptLogProof>(
        {
          method: 'GET',
          path: `/v1/log/service-receipts/${serviceReceiptId}/proof`,
          query: { tree_size: page.treeSize },
          auth: 'key',
          answer: answers.LOG_PROOF,
        },
        opts,
      )
    ).body;
  }

  /** GET /v1/log/consistency (audit scope): the proof that the tree of size `to` extends the one of size `from`. */
  async logConsistency(from: number, to: number, opts: RequestOptions = {}): Promise<LogConsistencyProof> {
    return (
      await this.#call<LogConsistencyProof>(
        { method: 'GET', path: '/v1/log/consistency', query: { from, to }, auth: 'key', answer: answers.LOG_CONSISTENCY },
        opts,
      )
    ).body;
  }

  // ------------------------------------------------------------ service keys

  /** GET /v1/keys: the service's service-receipt-signing keys, current and retired (public). */
  async keys(opts: Omit<RequestOptions, 'apiKey'> = {}): Promise<{ keys: ServiceKeyView[] }> {
    return (
      await this.#call<{ keys: ServiceKeyView[] }>(
        { method: 'GET', path: '/v1/keys', auth: 'none', answer: answers.SERVICE_KEY_LIST },
        opts,
      )
    ).body;
  }

  /** GET /.well-known/jwks.json: the same keys as a JWK set (public). */
  async jwks(opts: Omit<RequestOptions, 'apiKey'> = {}): Promise<{ keys: Jwk[] }> {
    return (await this.#call<{ keys: Jwk[] }>({ method: 'GET', path: '/.well-known/jwks.json', auth: 'none', answer: answers.JWKS }, opts))
      .body;
  }

  /**
   * Checks a service receipt (from any response's `service_receipt.jws`) offline
   * against the published keys, fetched once and again when an unknown kid
   * appears (a rotation); or, when the client pins its service keys (serviceDids), against those
   * alone, fetching nothing. Never throws on a bad service receipt: see `valid`/`reason`.
   */
  async verifyServiceReceipt(jws: string, opts: Omit<RequestOptions, 'apiKey'> = {}): Promise<ServiceReceiptVerification> {
    if (this.#pinned !== undefined) return verifyServiceReceipt(jws, this.#pinned.keys);
    const fetchKeys = async () => {
      const { keys } = await this.keys(opts);
      this.#keys = keys.map((k) => ({ kid: k.kid, publicKey: decodeBase64url(k.public_key, 'service public key') }));
      return this.#keys;
    };
    const first = verifyServiceReceipt(jws, this.#keys ?? (await fetchKeys()));
    if (first.valid || first.kid === null || this.#keys?.some((k) => k.kid === first.kid)) return first;
    return verifyServiceReceipt(jws, await fetchKeys());
  }

  // ------------------------------------------------------------ operations

  /** GET /healthz: the process answers. */
  async health(opts: Omit<RequestOptions, 'apiKey'> = {}): Promise<{ status: 'ok' }> {
    return (await this.#call<{ status: 'ok' }>({ method: 'GET', path: '/healthz', auth: 'none', answer: answers.STATUS }, opts)).body;
  }

  /** GET /readyz: whether the database answers (an unready service is an answer, not an error). */
  async ready(opts: Omit<RequestOptions, 'apiKey'> = {}): Promise<{ status: 'ready' | 'unready' }> {
    return (
      await this.#call<{ status: 'ready' | 'unready' }>(
        {
          method: 'GET',
          path: '/readyz',
          auth: 'none',
          answer: answers.STATUS,
          answerStatuses: (s, b) => s === 503 && (b as { status?: unknown } | null)?.status === 'unready',
        },
        opts,
      )
    ).body;
  }

  // ------------------------------------------------------------ transport

  #url(path: string, query?: CallSpec['query']): string {
    const params = new URLSearchParams();
    for (const [k, v] of Object.entries(query ?? {})) if (v !== undefined) params.set(k, String(v));
    const qs = params.toString();
    return `${this.baseUrl}${path}${qs ? `?${qs}` : ''}`;
  }

  /**
   * A GET whose answer is read as bytes (log tiles, checkpoint notes, entry bundles), under this
   * client's key, timeout and error mapping. A failed answer that `answerStatuses` accepts is
   * returned with its parsed body (or its text, when it is not JSON) instead of thrown.
   */
  async getBytes(
    path: string,
    opts: RequestOptions & { readonly answerStatuses?: (status: number, body: unknown) => boolean } = {},
  ): Promise<{ status: number; bytes: Uint8Array; body: unknown; requestId: string | null }> {
    // Bytes: the caller reads them (tiles, notes), so no shape is due here.
    const spec: CallSpec = { method: 'GET', path, auth: 'key', answer: null };
    const ex = await this.#exchange(spec, opts);
    if (ex.status >= 200 && ex.status < 300) return { status: ex.status, bytes: ex.bytes, body: undefined, requestId: ex.headerId ?? null };
    const text = new TextDecoder().decode(ex.bytes);
    const { parsed, parsedOk } = parseJsonText(text);
    const body = parsedOk ? parsed : text;
    if (opts.answerStatuses?.(ex.status, body)) return { status: ex.status, bytes: ex.bytes, body, requestId: ex.headerId ?? null };
    throw errorFromResponse(ex.status, parsed, parsedOk ? undefined : text, ex);
  }

  /** One request and its whole answer, as bytes; no answer (timeout, cancel, network) is a BatonApiError. */
  async #exchange(
    spec: CallSpec,
    opts: RequestOptions,
  ): Promise<{
    status: number;
    ok: boolean;
    bytes: Uint8Array;
    method: string;
    url: string;
    where: string;
    headerId: string | undefined;
    contentType: string | undefined;
    sentKey: boolean;
  }> {
    const url = this.#url(spec.path, spec.query);
    const key = spec.auth === 'none' ? undefined : opts.apiKey === null ? undefined : (opts.apiKey ?? this.#apiKey);
    const headers: Record<string, string> = { accept: 'application/json', 'user-agent': SDK_USER_AGENT, ...this.#headers };
    if (key) headers['authorization'] = `Bearer ${key}`;
    if (spec.body !== undefined) headers['content-type'] = 'application/json';

    const timeoutMs = opts.timeoutMs === undefined ? this.timeoutMs : usableTimeoutMs(opts.timeoutMs);
    const controller = new AbortController();
    // The deadline and the caller's cancel end the wait themselves, not only through the signal: a
    // fetch (or a response body) that ignores its signal is bounded too.
    let stopWaiting: (reason: unknown) => void = () => {};
    const stopped = new Promise<never>((_, reject) => (stopWaiting = reject));
    const stop = (reason: string) => {
      controller.abort();
      stopWaiting(new Error(reason));
    };
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      stop('timeout');
    }, timeoutMs);
    const onAbort = () => stop('aborted');
    if (opts.signal?.aborted) onAbort();
    else opts.signal?.addEventListener('abort', onAbort, { once: true });

    const where = `${spec.method} ${spec.path}`;
    const maxBytes = spec.maxAnswerBytes ?? MAX_ANSWER_BYTES;
    try {
      const exchange = (async () => {
        const res = await this.#fetch(url, {
          method: spec.method,
          headers,
          // Baton never redirects: a 3xx is someone else's answer (and is refused as such), and an
          // allow fetched from where a redirect points is not Baton's.
          redirect: 'manual',
          signal: controller.signal,
          ...(spec.body !== undefined ? { body: JSON.stringify(spec.body) } : {}),
        });
        // A caller's fetch may follow a redirect whatever `redirect` says (one that drops it, say): the
        // answer is then the redirect target's, not Baton's, and is refused unread like a 3xx.
        if ((res as { redirected?: unknown }).redirected === true) throw new AnswerRedirected(res.status);
        // The body is read under the same deadline (a server may stall after the headers), and up to
        // its route's limit: a server that never stops sending must not take the caller's memory.
        return { res, bytes: await bodyWithin(res, maxBytes, controller.signal) };
      })();
      exchange.catch(() => {}); // settled after a timeout or cancel, nobody waits for it any more
      const { res, bytes } = await Promise.race([exchange, stopped]);
      const headerId = res.headers.get('x-request-id') ?? undefined;
      const contentType = res.headers.get('content-type') ?? undefined;
      return { status: res.status, ok: res.ok, bytes, method: spec.method, url, where, headerId, contentType, sentKey: key !== undefined };
    } catch (cause) {
      if (cause instanceof AnswerRedirected) {
        controller.abort(); // its body is not read
        // No answer of Baton's arrived (status 0): the status is the redirect target's, which a
        // retry would reach again, so it must not read as retryable (a 503 there, say).
        throw new BatonApiError({
          status: 0,
          code: 'UNEXPECTED_RESPONSE',
          method: spec.method,
          url,
          message: `Baton answered ${where} through a redirect, which Baton never sends; the fetch used followed it, and the answer it got there (HTTP ${cause.status}) was not read.`,
          suggestion:
            'Check that the base URL points at Baton itself, not a proxy or another service; a custom fetch must not follow redirects (pass redirect: "manual" on to fetch).',
        });
      }
      if (cause instanceof AnswerNotBytes) {
        controller.abort();
        throw new BatonApiError({
          status: cause.status,
          code: 'UNEXPECTED_RESPONSE',
          method: spec.method,
          url,
          message: `Baton answered ${where} with a body whose pieces are not bytes; it was not read.`,
          suggestion: 'A custom fetch must answer a body of bytes, as fetch does.',
        });
      }
      if (cause instanceof AnswerTooLarge) {
        controller.abort(); // stops the rest of the body
        throw new BatonApiError({
          status: cause.status,
          code: 'UNEXPECTED_RESPONSE',
          method: spec.method,
          url,
          message: `Baton answered ${where} with more than ${maxBytes} bytes, more than any answer of Baton's to it; it was not read.`,
          suggestion: 'Check that the base URL points at Baton itself, not a proxy or another service.',
        });
      }
      if (timedOut) {
        throw new BatonApiError({
          status: 0,
          code: 'TIMEOUT',
          method: spec.method,
          url,
          cause,
          message: `Baton at ${this.baseUrl} did not answer ${where} within ${timeoutMs} ms.`,
          suggestion: `Check that the service is healthy (GET ${this.baseUrl}/readyz) and its database reachable, or raise timeoutMs (CLI: --timeout). Treat the call as not allowed.`,
        });
      }
      if (opts.signal?.aborted) {
        throw new BatonApiError({
          status: 0,
          code: 'ABORTED',
          method: spec.method,
          url,
          cause,
          message: `${where} was cancelled by the caller.`,
        });
      }
      throw new BatonApiError({
        status: 0,
        code: 'NETWORK_ERROR',
        method: spec.method,
        url,
        cause,
        message: `Could not reach Baton at ${this.baseUrl} for ${where}: ${describeNetworkError(cause)}.`,
        suggestion: `Check that the service is running (baton serve) and that the base URL (--server, BATON_URL or baseUrl) points at it, and that nothing blocks the connection.`,
      });
    } finally {
      clearTimeout(timer);
      opts.signal?.removeEventListener('abort', onAbort);
    }
  }

  /** An answer of the right shape that is not the one asked for (another call's allow, another chain). */
  #notTaken(answer: Answer<unknown>, method: string, path: string, message: string, check = ''): BatonApiError {
    return new BatonApiError({
      status: answer.status,
      code: 'UNEXPECTED_RESPONSE',
      method,
      url: this.#url(path),
      message,
      suggestion: `Check that the base URL points at Baton itself, not a proxy or another service${check}.`,
      requestId: answer.requestId ?? undefined,
    });
  }

  async #call<T>(spec: CallSpec, opts: RequestOptions): Promise<Answer<T>> {
    const ex = await this.#exchange(spec, opts);
    const text = new TextDecoder().decode(ex.bytes);
    const { parsed, parsedOk } = text.length === 0 ? { parsed: undefined, parsedOk: true } : parseJsonText(text);

    if (ex.ok || spec.answerStatuses?.(ex.status, parsed)) {
      const notBatons = (why: string, suggestion: string) =>
        new BatonApiError({
          status: ex.status,
          code: 'UNEXPECTED_RESPONSE',
          method: spec.method,
          url: ex.url,
          requestId: ex.headerId,
          message: `Baton answered ${ex.where} with HTTP ${ex.status} but ${why}`,
          suggestion,
        });
      const labelledJson = text.length === 0 || JSON_CONTENT_TYPE.test(ex.contentType ?? '');
      if (!parsedOk || (parsed === undefined && ex.status !== 204) || !labelledJson) {
        throw notBatons(
          `not with JSON (content type ${ex.contentType ?? 'none'}): ${snippet(text)}`,
          'Check that the base URL points at Baton itself, not a proxy or another service.',
        );
      }
      const shape = typeof spec.answer === 'function' ? spec.answer(parsed) : spec.answer;
      const problem = shape === null ? undefined : answers.shapeProblem(parsed, shape);
      if (problem !== undefined) {
        throw notBatons(
          `not with its answer: ${problem}.`,
          "Check that the base URL points at Baton itself, not a proxy or another service, and that the service is this SDK's version.",
        );
      }
      return { status: ex.status, body: parsed as T, requestId: ex.headerId ?? null };
    }
    throw errorFromResponse(ex.status, parsed, parsedOk ? undefined : text, ex);
  }
}

/** application/json, or a JSON media type (application/problem+json, say); parameters may follow. */
const JSON_CONTENT_TYPE = /^application\/([\w.+-]+\+)?json\s*(;|$)/i;

/**
 * Why an answer saying `valid: true` is not Baton's allow of this very call, or undefined when it
 * is. A tool runs on an allow, so one from a proxy, a wrong base URL or a cache (a bare
 * `{"valid":true}`, a 202, another call's allow, a dry run's) must not pass for it.
 */
function allowNotForThisCall(
  status: number,
  body: Record<string, unknown>,
  bundle: Bundle,
  opts: VerifyOptions,
  pinned: PinnedService | undefined,
): string | undefined {
  if (status !== 200) return `says valid with HTTP ${status}, where Baton answers an allow with 200`;
  const dryRun = opts.dryRun === true;
  let payload: { jti?: unknown; args?: unknown } = {};
  try {
    payload = decodeJws(bundle.invocation, 'invocation').payload as typeof payload;
  } catch {
    // No jti: refused just below.
  }
  const jti = payload.jti;
  if (typeof jti !== 'string' || body['invocation_id'] !== jti)
    return `allows invocation ${JSON.stringify(body['invocation_id'] ?? null)}, not the one sent (${JSON.stringify(jti ?? null)})`;
  if (body['dry_run'] !== dryRun) return dryRun ? 'is not the dry run asked for' : "is a dry run's, which allows nothing";
  if (typeof body['retry'] !== 'boolean') return 'does not say whether it answers a re-send ("retry")';
  // Checked here as well: an answer's `binding` is not signed, and an allow of the invocation
  // verified without the body (forwarded without it) would otherwise run a body nobody signed.
  const args = payload.args;
  const signedArgs = args !== null && typeof args === 'object' && !Array.isArray(args) ? (args as Record<string, unknown>) : undefined;
  if (opts.requireBinding === true && (signedArgs === undefined || compareBinding(signedArgs, opts.body) !== 'match'))
    return 'allows a call whose body is not the signed args, which require_binding refuses';
  // A dry run counts nothing and signs nothing: there is no receipt to hold it to.
  if (pinned === undefined || dryRun) return undefined;
  return allowReceiptProblem(body['service_receipt'], jti, bundle.invocation, pinned);
}

/** The service keys a client trusts to sign allows, and the tenant whose allows it takes. */
interface PinnedService {
  readonly keys: readonly ServiceVerificationKey[];
  readonly tenantId: string;
}

/**
 * Why an allow's service receipt does not prove that a pinned service key allowed this invocation
 * for this client's tenant: a receipt of kind invocation.allowed, naming the tenant, whose subject
 * is the jti and whose invocation_hash is the hash of the exact invocation sent (a retry's
 * original allow has the same). Undefined when it does.
 */
function allowReceiptProblem(receipt: unknown, jti: string, invocation: string, pinned: PinnedService): string | undefined {
  const jws = receipt !== null && typeof receipt === 'object' ? (receipt as { jws?: unknown }).jws : undefined;
  if (typeof jws !== 'string')
    return 'carries no service receipt, and this client takes an allow only with one a pinned service key signed';
  const checked = verifyServiceReceipt(jws, pinned.keys);
  if (!checked.valid || checked.payload === null)
    return `carries a service receipt that no pinned service key signed (${checked.reason ?? 'it does not verify'})`;
  const { baton_receipt: kind, subject, data, tenant } = checked.payload;
  if (kind !== 'invocation.allowed') return `carries a service receipt of ${JSON.stringify(kind ?? null)}, not of an allowed invocation`;
  if (tenant !== pinned.tenantId)
    return `carries the signed allow of another tenant (${JSON.stringify(tenant ?? null)}), not of ${pinned.tenantId}`;
  const hash = data !== null && typeof data === 'object' && !Array.isArray(data) ? data['invocation_hash'] : undefined;
  if (subject !== jti || hash !== recordHash(invocation))
    return `carries the signed allow of another invocation (${JSON.stringify(subject ?? null)}), not of the one sent`;
  return undefined;
}

/** The pinned service keys of `dids`, refused at construction when any is not an Ed25519 did:key. */
function pinnedServiceKeys(dids: readonly string[]): ServiceVerificationKey[] {
  if (!Array.isArray(dids) || dids.length === 0)
    throw new TypeError('serviceDids must list at least one did:key (the `did` of a key at GET /v1/keys), or be left out.');
  return dids.map((did) => {
    let publicKey: Uint8Array;
    try {
      publicKey = publicKeyFromDidKey(did);
    } catch (e) {
      throw new TypeError(
        `serviceDids: ${JSON.stringify(did)} is not an Ed25519 did:key (${e instanceof Error ? e.message : String(e)}). Copy the \`did\` of a key at GET /v1/keys.`,
      );
    }
    return { kid: serviceKid(publicKey), publicKey };
  });
}

/** Admin routes (the admin key): tenants, their trusted roots, their API keys. */
export class BatonAdmin {
  constructor(private readonly call: <T>(spec: CallSpec, opts: RequestOptions) => Promise<Answer<T>>) {}

  async createTenant(name: string, opts: RequestOptions = {}): Promise<TenantView> {
    return (
      await this.call<TenantView>({ method: 'POST', path: '/v1/admin/tenants', body: { name }, auth: 'key', answer: answers.TENANT }, opts)
    ).body;
  }

  async listTenants(opts: RequestOptions = {}): Promise<{ tenants: TenantView[] }> {
    return (
      await this.call<{ tenants: TenantView[] }>(
        { method: 'GET', path: '/v1/admin/tenants', auth: 'key', answer: answers.TENANT_LIST },
        opts,
      )
    ).body;
  }

  /** Trusts a root did:key for the tenant (idempotent: the stored row when already trusted). */
  async addRoot(tenantId: string, did: string, label?: string | null, opts: RequestOptions = {}): Promise<RootView> {
    const body = { did, ...(label !== undefined ? { label } : {}) };
    return (
      await this.call<RootView>(
        { method: 'POST', path: `/v1/admin/tenants/${enc(tenantId)}/roots`, body, auth: 'key', answer: answers.TRUSTED_ROOT },
        opts,
      )
    ).body;
  }

  async listRoots(tenantId: string, opts: RequestOptions = {}): Promise<{ roots: RootView[] }> {
    return (
      await this.call<{ roots: RootView[] }>(
        { method: 'GET', path: `/v1/admin/tenants/${enc(tenantId)}/roots`, auth: 'key', answer: answers.TRUSTED_ROOT_LIST },
        opts,
      )
    ).body;
  }

  async removeRoot(tenantId: string, did: string, opts: RequestOptions = {}): Promise<void> {
    await this.call<void>(
      { method: 'DELETE', path: `/v1/admin/tenants/${enc(tenantId)}/roots/${enc(did)}`, auth: 'key', answer: null },
      opts,
    );
  }

  /** A tenant API key; the secret is in this response only. `tool_server` binds a verify key to one tool server. */
  async createApiKey(
    tenantId: string,
    input: { scopes: readonly TenantScope[]; name?: string | null; tool_server?: string | null },
    opts: RequestOptions = {},
  ): Promise<CreatedApiKey> {
    return (
      await this.call<CreatedApiKey>(
        { method: 'POST', path: `/v1/admin/tenants/${enc(tenantId)}/api-keys`, body: input, auth: 'key', answer: answers.CREATED_API_KEY },
        opts,
      )
    ).body;
  }

  async listApiKeys(tenantId: string, opts: RequestOptions = {}): Promise<{ api_keys: ApiKeyView[] }> {
    return (
      await this.call<{ api_keys: ApiKeyView[] }>(
        { method: 'GET', path: `/v1/admin/tenants/${enc(tenantId)}/api-keys`, auth: 'key', answer: answers.API_KEY_LIST },
        opts,
      )
    ).body;
  }

  async revokeApiKey(keyId: string, opts: RequestOptions = {}): Promise<void> {
    await this.call<void>({ method: 'DELETE', path: `/v1/admin/api-keys/${enc(keyId)}`, auth: 'key', answer: null }, opts);
  }
}

// ---------------------------------------------------------------- helpers

/** A timeout a timer can keep: a positive number of milliseconds (NaN, 0 or Infinity would end every call at once as TIMEOUT). */
function usableTimeoutMs(timeoutMs: unknown): number {
  if (typeof timeoutMs !== 'number' || !Number.isFinite(timeoutMs) || timeoutMs <= 0 || timeoutMs > MAX_TIMEOUT_MS)
    throw new TypeError(`timeoutMs must be a positive number of milliseconds, at most ${MAX_TIMEOUT_MS}, got ${String(timeoutMs)}.`);
  return timeoutMs;
}

function isDenyBody(body: unknown): boolean {
  if (!body || typeof body !== 'object') return false;
  const b = body as { valid?: unknown; error?: { code?: unknown } };
  return b.valid === false && typeof b.error?.code === 'string';
}

function revocationTarget(jws: string): string {
  try {
    const payload = JSON.parse(utf8Decode(decodeBase64url(jws.split('.')[1] ?? '', 'revocation payload'))) as { target?: unknown };
    if (typeof payload.target === 'string') return payload.target;
  } catch {
    /* fall through */
  }
  throw new TypeError('The revocation record is not a compact JWS whose payload names a target hash.');
}

function parseJsonText(text: string): { parsed: unknown; parsedOk: boolean } {
  try {
    return { parsed: JSON.parse(text), parsedOk: true };
  } catch {
    return { parsed: undefined, parsedOk: false };
  }
}

function snippet(text: string): string {
  const t = text.replace(/\s+/g, ' ').trim();
  return t.length > 120 ? `${t.slice(0, 120)}...` : t || '(empty body)';
}

function describeNetworkError(cause: unknown): string {
  const seen = new Set<unknown>();
  let e: unknown = cause;
  // undici wraps the socket error: TypeError('fetch failed', {cause: {code: 'ECONNREFUSED'}}).
  while (e && typeof e === 'object' && !seen.has(e)) {
    seen.add(e);
    const code = (e as { code?: unknown }).code;
    // undici's own codes name nothing a user can act on, save a connection the server closed.
    const closed = code === 'UND_ERR_SOCKET' || code === 'UND_ERR_CLOSED';
    if (typeof code === 'string' && (closed || !code.startsWith('UND_ERR_')) && code !== 'ERR_INVALID_URL') {
      const hint: Record<string, string> = {
        ECONNREFUSED: 'connection refused (nothing listens there)',
        ENOTFOUND: 'host name not found',
        EAI_AGAIN: 'host name lookup failed',
        ECONNRESET: 'connection reset',
        UND_ERR_SOCKET: 'the server closed the connection',
        UND_ERR_CLOSED: 'the connection was closed',
        EHOSTUNREACH: 'host unreachable',
        ETIMEDOUT: 'connection timed out',
      };
      return `${code}, ${hint[code] ?? 'network error'}`;
    }
    const errors = (e as { errors?: unknown }).errors;
    if (Array.isArray(errors) && errors[0]) {
      e = errors[0];
      continue;
    }
    e = (e as { cause?: unknown }).cause;
  }
  return cause instanceof Error ? cause.message : String(cause);
}

function errorFromResponse(
  status: number,
  body: unknown,
  rawText: string | undefined,
  ctx: { method: string; url: string; where: string; headerId: string | undefined; sentKey: boolean },
): BatonApiError {
  const envelope = body as
    { error?: { code?: unknown; message?: unknown; suggestion?: unknown; details?: unknown }; request_id?: unknown } | undefined;
  const err = envelope?.error;
  // Baton never redirects: a 3xx is another server's answer, whatever envelope it carries, and
  // taken at its word it would pass as Baton's refusal with any code its sender chose.
  const redirect = status >= 300 && status < 400;
  if (redirect || !err || typeof err.code !== 'string') {
    return new BatonApiError({
      status,
      code: 'UNEXPECTED_RESPONSE',
      method: ctx.method,
      url: ctx.url,
      requestId: ctx.headerId,
      message: redirect
        ? `Baton answered ${ctx.where} with a redirect (HTTP ${status}), which Baton never sends; it was not followed.`
        : `Baton answered ${ctx.where} with HTTP ${status} and no error envelope: ${snippet(rawText ?? JSON.stringify(body) ?? '')}`,
      suggestion:
        status >= 500
          ? 'Check the service logs and health (GET /readyz).'
          : 'Check that the base URL points at Baton itself, not a proxy or another service.',
    });
  }
  const requestId = typeof envelope.request_id === 'string' ? envelope.request_id : ctx.headerId;
  let suggestion = typeof err.suggestion === 'string' ? err.suggestion : undefined;
  if (status === 401 && !ctx.sentKey) {
    suggestion =
      "This client sent no API key: pass apiKey to new BatonClient({...}) (CLI: --api-key, $BATON_API_KEY, or a context saved for this server: a context's key is never sent to another server).";
  }
  return new BatonApiError({
    status,
    code: err.code,
    message: typeof err.message === 'string' ? err.message : `HTTP ${status} ${err.code}`,
    suggestion,
    details: err.details && typeof err.details === 'object' ? (err.details as Record<string, unknown>) : undefined,
    requestId,
    method: ctx.method,
    url: ctx.url,
  });
}
