/**
 * Custodial root issuance: the service signs a root DR with a root key it
 * holds for the tenant (sealed at rest with the master key), then stores it
 * through the same path as any submitted DR.
 */
import type { z } from 'zod';
import type { IssueRequest as IssueRequestBody } from '../api/delegations.js';
import { publicKeyFromDidKey } from '../protocol/did-key.js';
import { BatonError } from '../protocol/errors.js';
import { randomUUID } from 'node:crypto';
import { refuseDrsWiderPolicy, signRootDelegation } from '../protocol/root-delegation.js';
import { custodialRootKey } from './custodial.js';
import { SubmissionRefusal } from './error-status.js';
import { submitDelegations } from './delegation-submission.js';
import type { CommitCheck } from '../store/db.js';
import type { ServiceDeps } from './types.js';

const DEFAULT_LIFETIME_SECONDS = 24 * 3600;
export type IssueRequest = z.output<typeof IssueRequestBody>;

export async function issueCustodialRoot(
  deps: ServiceDeps,
  tenantId: string,
  req: IssueRequest,
  issuedByKey: string,
  gate: CommitCheck | undefined,
) {
  for (const [field, did] of [
    ['audience', req.audience],
    ['subject', req.subject],
  ] as const) {
    if (did === undefined) continue;
    try {
      publicKeyFromDidKey(did);
    } catch (e) {
      if (e instanceof BatonError) throw new BatonError(e.code, { message: `${field}: ${e.message}`, details: { field } });
      throw e;
    }
  }
  // Before the tenant's custodial key is made: a refused request stores nothing.
  refuseDrsWiderPolicy(req.policy);
  const now = deps.now();
  // Said as what it is, as the stored record's check says it (422 RECEIPT_EXPIRED), before the
  // custodial key is made: with no nbf (now, by default) a past exp read "exp must not be before
  // nbf", of an nbf the caller never sent (outside probe).
  // exp is the last second the record is valid (the chain's check: expired once now > exp).
  if (req.exp !== undefined && req.exp !== null && req.exp < now)
    throw new SubmissionRefusal('RECEIPT_EXPIRED', {
      message: `exp (${req.exp}) is before now (${now}, the service's clock): the delegation would be expired when issued.`,
      suggestion: `Give an exp of now or later, or leave it out for the default lifetime (${DEFAULT_LIFETIME_SECONDS} s).`,
      violations: [{ code: 'RECEIPT_EXPIRED', field: 'exp', required: `>= ${now}`, actual: req.exp }],
    });
  const nbf = req.nbf ?? now;
  // At most the largest time a record may carry: an nbf near it leaves less than the default lifetime.
  const exp = req.exp === undefined ? Math.min(Number.MAX_SAFE_INTEGER, Math.max(nbf, now) + DEFAULT_LIFETIME_SECONDS) : req.exp;
  // Before the tenant's custodial key is made, as the past exp above: a refused request stores nothing.
  if (exp !== null && exp < nbf)
    throw new BatonError('INVALID_FIELD', {
      message: `exp (${exp}) is before nbf (${nbf}): the delegation would never be valid.`,
      suggestion: 'Give an exp at or after nbf, or leave exp out for the default lifetime.',
      details: { field: 'exp' },
    });
  const issuer = await custodialRootKey(deps.store.db, tenantId, deps.masterKey, gate);
  const signed = signRootDelegation({
    issuer,
    audience: req.audience,
    policy: req.policy,
    iat: now,
    nbf,
    // The default lifetime runs from when the record starts to be valid: from now + 24 h, an nbf
    // two days ahead read "exp must not be before nbf", of an exp the caller never sent.
    exp,
    rootType: req.root_type ?? 'organisation',
    ...(req.subject ? { subject: req.subject } : {}),
    ...(req.cmd ? { cmd: req.cmd } : {}),
    ...(req.consent ? { consent: req.consent } : {}),
    jti: req.jti ?? `dr:${randomUUID()}`,
  });
  const result = await submitDelegations(deps, tenantId, [signed.jws], issuedByKey, gate);
  // The same request with a fixed jti in the same second signs the same bytes: stored already.
  return { created: result.created, body: { tenant_id: tenantId, custodial_did: issuer.did, delegation: result.delegations[0]! } };
}
