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

/** Starts the push and returns at once; the promise it keeps settles within WEBHOOK_TIMEOUT_MS and never rejects. */
export function pushPendingApproval(deps: ServiceDeps, tenantId: string, event: PendingApprovalEvent): Promise<void> {
  return deliver(deps, tenantId, event).catch((err: unknown) => {
    // With its cause: fetch says only "fetch failed" for a refused connection, a reset or a name not found.
    deps.log.warn('approval webhook failed', { tenant: tenantId, approval: event.approval.id, ...errorForLog(err) });
  });
}

async function deliver(deps: ServiceDeps, tenantId: string, event: PendingApprovalEvent): Promise<void> {
  // The current catalog's URL: a cached copy older than the approval's catalog (or none) is read again.
  let doc = await toolDocumentOf(deps, tenantId);
  if (doc === null || doc.version < event.approval.catalog_version) doc = await toolDocumentOf(deps, tenantId, true);
  const url = doc?.settings.webhook_url;
  if (url === undefined) return;
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'user-agent': 'baton-approval-webhook' },
    body: JSON.stringify(event),
    redirect: 'manual',
    signal: AbortSignal.timeout(WEBHOOK_TIMEOUT_MS),
  });
  await res.body?.cancel();
  if (!res.ok) throw new Error(`the receiver answered ${res.status}`);
}
