/**
 * Custodial root issuance: the service signs a root DR with a root key it
 * holds for the tenant (sealed at rest with the master key), then stores it
 * through the same path as any submitted DR.
 */
import { z } from 'zod';
import { publicKeyFromDidKey } from '../protocol/did-key.js';
import { BatonError } from '../protocol/errors.js';
import { PolicySchema } from '../protocol/policy.js';
import { CommandSchema, ConsentSchema, DidKeySchema, RootTypeSchema } from '../protocol/records.js';
import { randomUUID } from 'node:crypto';
import { signRootDelegation } from '../protocol/root-delegation.js';
import { custodialRootKey } from './custodial.js';
import { submitDelegations } from './delegation-submission.js';
import type { ServiceDeps } from './types.js';

const DEFAULT_LIFETIME_SECONDS = 24 * 3600;
const unixSeconds = z.number().int().min(0).max(Number.MAX_SAFE_INTEGER);

export const IssueRequestSchema = z.strictObject({
  audience: DidKeySchema,
  policy: PolicySchema,
  cmd: CommandSchema.optional(),
  subject: DidKeySchema.optional(),
  nbf: unixSeconds.optional(),
  exp: unixSeconds.nullable().optional(),
  root_type: RootTypeSchema.optional(),
  consent: ConsentSchema.optional(),
  jti: z.string().min(4).max(160).startsWith('dr:').optional(),
});

export type IssueRequest = z.infer<typeof IssueRequestSchema>;

export async function issueCustodialRoot(deps: ServiceDeps, tenantId: string, req: IssueRequest) {
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
  const issuer = await custodialRootKey(deps.store.db, tenantId, deps.masterKey);
  const now = deps.now();
  const signed = signRootDelegation({
    issuer,
    audience: req.audience,
    policy: req.policy,
    iat: now,
    nbf: req.nbf ?? now,
    exp: req.exp === undefined ? now + DEFAULT_LIFETIME_SECONDS : req.exp,
    rootType: req.root_type ?? 'organisation',
    ...(req.subject ? { subject: req.subject } : {}),
    ...(req.cmd ? { cmd: req.cmd } : {}),
    ...(req.consent ? { consent: req.consent } : {}),
    jti: req.jti ?? `dr:${randomUUID()}`,
  });
  const result = await submitDelegations(deps, tenantId, [signed.jws]);
  return { tenant_id: tenantId, custodial_did: issuer.did, delegation: result.delegations[0]! };
}
