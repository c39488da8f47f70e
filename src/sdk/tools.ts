/**
 * Client methods for tool governance: the tenant's versioned tool catalog
 * (with its approval settings) and human approvals of calls.
 */
import { catalogHash, ToolDeclarationSchema, type ToolDeclaration } from '../protocol/tool-catalog.js';
import { DEFAULT_COST_CALIBRATION, type ApprovalRule, type RuleDecision } from '../protocol/approval-rules.js';
import type { ApprovalStatus, GrantStatus } from '../protocol/lists.js';
import { APPROVAL_DECISION_TYPE, ApprovalDecisionPayloadSchema, type ApprovalDecisionPayload } from '../protocol/approval-decision.js';
import { decodeBase64url } from '../protocol/base64url.js';
import { recordHash, sha256Hex, type RecordHash } from '../protocol/hash.js';
import { canonicalJson, utf8Decode } from '../protocol/jcs.js';
import { signJws } from '../protocol/jws.js';
import { DRS_VERSION, parseWith } from '../protocol/records.js';
// client.js imports this module too; followCursorOnce is only called when a method runs, after both loaded.
import { APPROVAL, GRANT, pageOf, TOOL_DOCUMENT, type Shape } from './answer-shape.js';
import { followCursorOnce } from './client.js';
import type { KeyPair } from './keys.js';

/** Mirrors the call function BatonClient hands its sub-clients. */
export type SubCall = <T>(
  spec: {
    method: 'GET' | 'POST' | 'DELETE';
    path: string;
    query?: Record<string, string | number | undefined>;
    body?: unknown;
    auth: 'key' | 'none';
    /** What the answer must hold (answer-shape.ts): the client refuses any other as UNEXPECTED_RESPONSE. */
    answer: Shape;
  },
  opts: Record<string, unknown>,
) => Promise<{ status: number; body: T; requestId?: string | null }>;

export interface ToolDocumentView {
  readonly version: number;
  readonly strict: boolean;
  readonly default_decision: RuleDecision;
  readonly rules: readonly ApprovalRule[];
  readonly approvers: readonly string[];
  /** Where new pending approvals are POSTed, or null; a tenant key sees only that one is set (`https://…`). */
  readonly webhook_url: string | null;
  readonly cost_calibration: { readonly ratio_above: number; readonly min_metered_invocations: number };
  /** True when the version set no cost_calibration: the defaults shown apply, and `hash` does not cover them. */
  readonly cost_calibration_default: boolean;
  readonly tools: readonly ToolDeclaration[];
  readonly hash: string;
  readonly catalog_hash: string;
  readonly created_by: string;
  readonly created_at: string;
}

/** The webhook URL as a tenant key is served it: only its scheme (`https://…`). */
const MASKED_WEBHOOK = /^[a-z][a-z0-9+.-]*:\/\/\u2026$/;

/** The members a tool declaration may have: `catalog_hash` covers these, and an answer showing any other is refused. */
const TOOL_MEMBERS: ReadonlySet<string> = new Set(Object.keys(ToolDeclarationSchema.shape));

/** What a tenant key is served of `url`: its scheme only, as the service masks it. */
function maskedWebhook(url: string): string {
  try {
    return `${new URL(url).protocol}//…`;
  } catch {
    throw new TypeError(`webhook_url ${JSON.stringify(url)} is not a URL: pass the whole URL you believe is set (https://…).`);
  }
}

/**
 * Recomputes a served tool document version's `hash` and `catalog_hash` from the answer, as the
 * service computed them when it was published: compare them with the answer's own to check that
 * what was served is what was published (and recorded in its `tools.catalog.published` receipt).
 *
 * `catalog_hash` is over the canonical `{version, tools}`; `hash` over `{catalog_hash, settings}`,
 * with the settings as published: `webhook_url` only when one is set, `cost_calibration` only when
 * `cost_calibration_default` is false. Covered: `version`, `tools` (each member a declaration has;
 * a tool showing any other member is refused, as the service would never serve it), `strict`,
 * `rules`, `default_decision`, `approvers`, `webhook_url`, and `cost_calibration` with its flag. Not
 * covered: the answer's other members (`created_at`, `created_by`, ...).
 *
 * When `cost_calibration_default` is true the calibration shown is not hashed, yet decides which
 * delegations are flagged: it must equal this SDK build's defaults (DEFAULT_COST_CALIBRATION), or
 * this throws. Those defaults are this build's, signed by nothing: a server built with other defaults
 * is refused here. An answer without `cost_calibration_default` (a server older than it) cannot be
 * recomputed: this throws rather than report a mismatch for an honest answer.
 *
 * An admin key's answer holds everything. A tenant key is served only the webhook's scheme
 * (`https://…`): pass the URL you believe is set as `webhook_url`, and the recomputed `hash` equals
 * the served one only if the guess is right. A guess the answer contradicts (no webhook, another
 * URL, another scheme) is refused.
 */
export function toolDocumentHashes(
  served: Pick<
    ToolDocumentView,
    | 'version'
    | 'strict'
    | 'default_decision'
    | 'rules'
    | 'approvers'
    | 'webhook_url'
    | 'cost_calibration'
    | 'cost_calibration_default'
    | 'tools'
  >,
  opts: { readonly webhook_url?: string } = {},
): { hash: string; catalog_hash: string } {
  const calibrationDefault: unknown = served.cost_calibration_default;
  if (typeof calibrationDefault !== 'boolean')
    throw new TypeError(
      'This answer has no cost_calibration_default (a Baton server older than it): it does not say whether cost_calibration was published, so its hash cannot be recomputed. Read the version from an up-to-date server.',
    );
  // Not hashed when default, yet the flagging reads it: only the defaults themselves may be shown.
  if (calibrationDefault && canonicalJson(served.cost_calibration) !== canonicalJson(DEFAULT_COST_CALIBRATION))
    throw new TypeError(
      `This answer says cost_calibration_default but shows cost_calibration ${canonicalJson(served.cost_calibration)}, not this SDK's defaults ${canonicalJson(DEFAULT_COST_CALIBRATION)}: the hash does not cover it, so it cannot be checked. Do not rely on this answer's calibration; read the version again, or from a server of this build.`,
    );
  if (opts.webhook_url !== undefined && served.webhook_url !== opts.webhook_url && served.webhook_url !== maskedWebhook(opts.webhook_url))
    throw new TypeError(
      `This answer shows webhook_url ${JSON.stringify(served.webhook_url)}, which the webhook_url passed (${opts.webhook_url}) cannot be: pass a guess the answer shows masked (${maskedWebhook(opts.webhook_url)}), or none.`,
    );
  const webhook = opts.webhook_url ?? served.webhook_url;
  if (opts.webhook_url === undefined && webhook !== null && MASKED_WEBHOOK.test(webhook))
    throw new TypeError(
      `This answer shows only the webhook URL's scheme (${webhook}), which the hash does not cover: pass the URL you believe is set as webhook_url, or read the version with the admin key.`,
    );
  served.tools.forEach((tool, i) => {
    const unknown = Object.keys(tool).filter((k) => !TOOL_MEMBERS.has(k));
    if (unknown.length > 0)
      throw new TypeError(
        `This answer's tools[${i}] has member${unknown.length === 1 ? '' : 's'} ${unknown.join(', ')}, which no tool declaration has and catalog_hash does not cover: the answer is not a version as published.`,
      );
  });
  const catalog_hash = catalogHash({ version: served.version, tools: [...served.tools] });
  const settings = {
    strict: served.strict,
    rules: served.rules,
    default_decision: served.default_decision,
    approvers: served.approvers,
    ...(webhook === null ? {} : { webhook_url: webhook }),
    ...(calibrationDefault ? {} : { cost_calibration: served.cost_calibration }),
  };
  return { hash: `sha256:${sha256Hex(canonicalJson({ catalog_hash, settings }))}`, catalog_hash };
}

export interface PublishToolsInput {
  /** The version read before changing it (0 for the first publish). */
  readonly base_version: number;
  readonly strict: boolean;
  readonly tools: readonly ToolDeclaration[];
  readonly rules?: readonly ApprovalRule[];
  readonly default_decision?: RuleDecision;
  readonly approvers?: readonly string[];
  /** Each new pending approval is POSTed here (best effort, a few seconds at most). */
  readonly webhook_url?: string;
  readonly cost_calibration?: { readonly ratio_above: number; readonly min_metered_invocations: number };
}

export type { ApprovalStatus, GrantStatus } from '../protocol/lists.js';

export interface ApprovalView {
  readonly id: string;
  readonly status: ApprovalStatus;
  readonly tool: string | null;
  readonly tool_server: string;
  /** The call's command and its args exactly as signed: what the approver allows (null on approvals made before Baton kept them). */
  readonly cmd: string | null;
  readonly args: Record<string, unknown> | null;
  readonly dr_chain: string[];
  readonly invocation_jti: string;
  readonly requested_by: string;
  readonly catalog_version: number;
  readonly rule: string;
  readonly explanation: string;
  readonly created_at: number;
  readonly expires_at: number;
  /** `record`: the decision record an approver DID signed (compact JWS), for a signed decision only (verifyApprovalDecision). */
  readonly decision: { actor: string; decided_by: string; reason: string; at: number; record?: string } | null;
  readonly used_at: number | null;
  /** Why the call cannot run now, whatever is decided, while pending or approved: its root untrusted (trust can come back), or a record of its chain expired or revoked (for good). */
  readonly cannot_run?: { code: 'RECEIPT_REVOKED' | 'RECEIPT_EXPIRED' | 'UNTRUSTED_ROOT'; dr_hash: string; message: string };
}

export interface GrantView {
  readonly dr_hash: string;
  readonly status: GrantStatus;
  readonly explanation: string;
  readonly catalog_version: number;
  readonly decision: { actor: string; decided_by: string; reason: string; at: number } | null;
}

/** The guardrail triple without `confirm`, which the client always sends as true. */
export interface DecisionInput {
  readonly actor: string;
  readonly reason: string;
}

export interface ApprovalDecisionInput {
  /** An approver DID the tenant lists in its tool document's `approvers`. */
  readonly signer: KeyPair;
  readonly approvalId: string;
  readonly decision: 'approve' | 'reject';
  /** Why, in words an auditor will read (at most 500 characters, with a letter or digit). */
  readonly reason: string;
  /** Unix seconds; now unless told. The service accepts a record at most 5 minutes old. */
  readonly iat?: number;
  readonly jti?: string;
}

export interface SignedApprovalDecision {
  readonly jws: string;
  readonly hash: RecordHash;
  readonly payload: ApprovalDecisionPayload;
}

/** Builds and signs an approval decision record (confirm: true); the payload is checked against the service's schema first. */
export function createApprovalDecision(input: ApprovalDecisionInput): SignedApprovalDecision {
  const payload = {
    iss: input.signer.did,
    drs_v: DRS_VERSION,
    drs_type: APPROVAL_DECISION_TYPE,
    approval_id: input.approvalId,
    decision: input.decision,
    confirm: true,
    reason: input.reason,
    iat: input.iat ?? Math.floor(Date.now() / 1000),
    jti: input.jti ?? `apd:${globalThis.crypto.randomUUID()}`,
  };
  const checked = parseWith(ApprovalDecisionPayloadSchema, payload, 'approval decision payload');
  const jws = signJws(payload, input.signer.seed);
  return { jws, hash: recordHash(jws), payload: checked };
}

const enc = encodeURIComponent;

export class BatonTools {
  constructor(private readonly call: SubCall) {}

  /** GET /v1/tools: the current catalog and approval settings of the key's tenant. */
  async current(opts: Record<string, unknown> = {}): Promise<ToolDocumentView> {
    return (await this.call<ToolDocumentView>({ method: 'GET', path: '/v1/tools', auth: 'key', answer: TOOL_DOCUMENT }, opts)).body;
  }

  /** GET /v1/tools/versions/{version}: one immutable version. */
  async version(version: number, opts: Record<string, unknown> = {}): Promise<ToolDocumentView> {
    return (
      await this.call<ToolDocumentView>({ method: 'GET', path: `/v1/tools/versions/${version}`, auth: 'key', answer: TOOL_DOCUMENT }, opts)
    ).body;
  }

  /** GET /v1/admin/tenants/{tenant}/tools (admin key): a tenant's current version, whose `version` is the next base_version. */
  async currentOf(tenantId: string, opts: Record<string, unknown> = {}): Promise<ToolDocumentView> {
    return (
      await this.call<ToolDocumentView>(
        { method: 'GET', path: `/v1/admin/tenants/${enc(tenantId)}/tools`, auth: 'key', answer: TOOL_DOCUMENT },
        opts,
      )
    ).body;
  }

  /** POST /v1/admin/tenants/{tenant}/tools (admin key): publishes base_version + 1. */
  async publish(tenantId: string, input: PublishToolsInput, opts: Record<string, unknown> = {}): Promise<ToolDocumentView> {
    const path = `/v1/admin/tenants/${enc(tenantId)}/tools`;
    return (await this.call<ToolDocumentView>({ method: 'POST', path, body: input, auth: 'key', answer: TOOL_DOCUMENT }, opts)).body;
  }

  /** GET /v1/approvals (approve or audit scope), oldest first: every page, followed to the last. */
  async approvals(status?: ApprovalStatus, opts: Record<string, unknown> = {}): Promise<{ approvals: ApprovalView[] }> {
    return { approvals: await this.#everyPage<ApprovalView>('/v1/approvals', 'approvals', APPROVAL, status, opts) };
  }

  async approval(id: string, opts: Record<string, unknown> = {}): Promise<ApprovalView> {
    return (await this.call<ApprovalView>({ method: 'GET', path: `/v1/approvals/${enc(id)}`, auth: 'key', answer: APPROVAL }, opts)).body;
  }

  /** POST /v1/approvals/{id}/approve (approve scope) with {actor, confirm: true, reason}. */
  async approve(id: string, input: DecisionInput, opts: Record<string, unknown> = {}): Promise<ApprovalView> {
    return this.#decide(id, 'approve', input, opts);
  }

  /** POST /v1/approvals/{id}/reject (approve scope) with {actor, confirm: true, reason}. */
  async reject(id: string, input: DecisionInput, opts: Record<string, unknown> = {}): Promise<ApprovalView> {
    return this.#decide(id, 'reject', input, opts);
  }

  /**
   * POST /v1/approvals/{id}/signed-decision, without an API key: approve or
   * reject as an approver DID with a record from createApprovalDecision.
   */
  async decideSigned(decision: SignedApprovalDecision | string, opts: Record<string, unknown> = {}): Promise<ApprovalView> {
    const jws = typeof decision === 'string' ? decision : decision.jws;
    const id = typeof decision === 'string' ? approvalIdOf(jws) : decision.payload.approval_id;
    const path = `/v1/approvals/${enc(id)}/signed-decision`;
    return (await this.call<ApprovalView>({ method: 'POST', path, body: { signed_decision: jws }, auth: 'none', answer: APPROVAL }, opts))
      .body;
  }

  /** GET /v1/grants (approve or audit scope): delegations held because their tools form the lethal trifecta, every page. */
  async grants(status?: GrantView['status'], opts: Record<string, unknown> = {}): Promise<{ grants: GrantView[] }> {
    return { grants: await this.#everyPage<GrantView>('/v1/grants', 'grants', GRANT, status, opts) };
  }

  /**
   * A keyset-paged list, every page: `next_cursor` passed back as `cursor` until it is null. A
   * cursor the server already returned would page in a circle, collecting forever: that answer
   * is refused (UNEXPECTED_RESPONSE) instead.
   */
  async #everyPage<T>(path: string, field: string, item: Shape, status: string | undefined, opts: Record<string, unknown>): Promise<T[]> {
    const items: T[] = [];
    const seen = new Set<string>();
    for (let cursor: string | undefined; ;) {
      const answer = await this.call<Record<string, unknown>>(
        { method: 'GET', path, query: { status, cursor }, auth: 'key', answer: pageOf(field, item) },
        opts,
      );
      const page = answer.body;
      items.push(...(page[field] as T[]));
      const next = page['next_cursor'];
      if (typeof next !== 'string') return items;
      cursor = followCursorOnce(seen, next, path, (page[field] as T[]).length, answer);
    }
  }

  /** POST /v1/grants/{hash}/approve|reject (approve scope) with {actor, confirm: true, reason}. */
  async decideGrant(
    hash: string,
    what: 'approve' | 'reject',
    input: DecisionInput,
    opts: Record<string, unknown> = {},
  ): Promise<GrantView> {
    const body = { actor: input.actor, confirm: true, reason: input.reason };
    return (await this.call<GrantView>({ method: 'POST', path: `/v1/grants/${enc(hash)}/${what}`, body, auth: 'key', answer: GRANT }, opts))
      .body;
  }

  async #decide(id: string, what: 'approve' | 'reject', input: DecisionInput, opts: Record<string, unknown>): Promise<ApprovalView> {
    const body = { actor: input.actor, confirm: true, reason: input.reason };
    return (
      await this.call<ApprovalView>({ method: 'POST', path: `/v1/approvals/${enc(id)}/${what}`, body, auth: 'key', answer: APPROVAL }, opts)
    ).body;
  }
}

/** The approval a signed decision record names (read, not verified: the service verifies). */
function approvalIdOf(jws: string): string {
  const payload = jws.split('.')[1];
  const parsed: unknown = payload === undefined ? undefined : JSON.parse(utf8Decode(decodeBase64url(payload, 'decision record payload')));
  const id = typeof parsed === 'object' && parsed !== null ? (parsed as Record<string, unknown>)['approval_id'] : undefined;
  if (typeof id !== 'string') throw new TypeError('The decision record names no approval_id.');
  return id;
}
