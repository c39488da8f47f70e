/**
 * Push of new pending approvals to the tenant's webhook (the `webhook_url` of
 * its current tool document): one POST per approval, when it is created.
 *
 * Best effort by design: the POST is started after the approval is stored and
 * never awaited by the verify that created it, so a slow, failing or absent
 * receiver never delays or changes a verify answer; it is abandoned after
 * WEBHOOK_TIMEOUT_MS and not retried (the pending list, GET /v1/approvals,
 * stays the source of truth). Redirects are not followed. The body carries
 * the signed approval.requested service receipt, so a receiver can check it
 * came from Baton against the service keys (GET /v1/keys).
 */
import { errorForLog } from '../store/errors.js';
import type { ApprovalJson } from './approvals.js';
import { toolDocumentOf } from './tools.js';
import type { ServiceDeps } from './types.js';

export const WEBHOOK_TIMEOUT_MS = 3_000;

export interface PendingApprovalEvent {
  readonly event: 'approval.pending';
  readonly approval: ApprovalJson;
  /** The approval.requested service receipt (JWS). */
  readonly service_receipt: string;
}

/** Where the operator reads the URL: the admin key's view of the tool document (the log shows none of it). */
const CHECK_WEBHOOK_URL =
  "Check webhook_url in the tenant's tool document (the admin key reads it whole: GET /v1/admin/tenants/{tenant}/tools), and that its receiver is up and reachable from Baton.";

/**
 * A push that did not go through, told by its code only (ENOTFOUND, ECONNREFUSED, TIMEOUT, HTTP_503)
 * and the URL's scheme (`https://…`, as tenant keys see it): a webhook URL is often its own
 * credential, in its host name (a Lambda function URL) or path (a Slack incoming webhook), and log
 * readers are not all admins. Node's own texts name the host ("getaddrinfo ENOTFOUND <host>", a
 * certificate's altnames), so none is kept.
 */
class WebhookFailure extends Error {
  constructor(
    readonly code: string,
    /** The URL as a tenant key sees it: its scheme only (`https://…`). */
    readonly shownUrl: string,
    readonly status?: number,
  ) {
    super(`the approval webhook push failed: ${code}`);
  }
}

/** Starts the push and returns at once; the promise it keeps settles within WEBHOOK_TIMEOUT_MS and never rejects. */
export function pushPendingApproval(deps: ServiceDeps, tenantId: string, event: PendingApprovalEvent): Promise<void> {
  return deliver(deps, tenantId, event).catch((err: unknown) => {
    const where = { tenant: tenantId, approval: event.approval.id };
    if (err instanceof WebhookFailure) {
      // fetch says only "fetch failed" for a refused connection, a reset or a name not found: its cause's code says which.
      deps.log.warn('approval webhook failed', {
        ...where,
        cause: err.code,
        ...(err.status === undefined ? {} : { status: err.status }),
        webhook_url: err.shownUrl,
        suggestion: CHECK_WEBHOOK_URL,
      });
    } else {
      // Reading the tool document failed (the database): no URL was read, so none can be in the error.
      deps.log.warn('approval webhook failed', { ...where, ...errorForLog(err) });
    }
  });
}

async function deliver(deps: ServiceDeps, tenantId: string, event: PendingApprovalEvent): Promise<void> {
  // The current catalog's URL: a cached copy older than the approval's catalog (or none) is read again.
  let doc = await toolDocumentOf(deps, tenantId);
  if (doc === null || doc.version < event.approval.catalog_version) doc = await toolDocumentOf(deps, tenantId, true);
  const url = doc?.settings.webhook_url;
  if (url === undefined) return;
  // As tenant keys are shown it (tools.ts): the scheme alone.
  const shownUrl = url.startsWith('https:') ? 'https://…' : 'http://…';
  let res: Response;
  try {
    res = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'user-agent': 'baton-approval-webhook' },
      body: JSON.stringify(event),
      redirect: 'manual',
      signal: AbortSignal.timeout(WEBHOOK_TIMEOUT_MS),
    });
  } catch (err) {
    throw new WebhookFailure(fetchFailureCode(err), shownUrl);
  }
  await res.body?.cancel().catch(() => undefined);
  if (!res.ok) throw new WebhookFailure(`HTTP_${res.status}`, shownUrl, res.status);
}

/**
 * The code of a failed fetch, never its text: TIMEOUT past WEBHOOK_TIMEOUT_MS, else the first code
 * on the error's cause chain (a system error's ENOTFOUND, ECONNREFUSED, ECONNRESET; undici's
 * UND_ERR_*; a TLS error's CERT_HAS_EXPIRED, ERR_TLS_CERT_ALTNAME_INVALID), else the cause's class.
 */
function fetchFailureCode(err: unknown): string {
  if (err instanceof Error && (err.name === 'TimeoutError' || err.name === 'AbortError')) return 'TIMEOUT';
  let name: string | undefined;
  for (let e: unknown = err, depth = 0; e !== null && typeof e === 'object' && depth < 5; depth++) {
    const { code, errors, cause } = e as { code?: unknown; errors?: unknown; cause?: unknown };
    if (typeof code === 'string' && /^[A-Z0-9_]{1,64}$/.test(code)) return code;
    if (e instanceof Error) name = e.name;
    // Trying each address of a host (Happy Eyeballs) fails with an AggregateError of one error each.
    const first: unknown = Array.isArray(errors) ? errors[0] : undefined;
    e = cause ?? first;
  }
  return name !== undefined && /^[A-Za-z]{1,64}$/.test(name) ? name : 'UNKNOWN';
}
