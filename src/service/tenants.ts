/** A tenant named by an admin route: found, or the one NOT_FOUND every admin route answers. */
import { BatonError } from '../protocol/errors.js';
import { UNKNOWN_TENANT } from '../store/errors.js';
import type { Tenant } from '../store/schema/index.js';
import { findTenant } from '../store/tenants.js';
import type { ServiceDeps } from './types.js';

export function noTenant(): BatonError {
  return new BatonError('NOT_FOUND', { message: UNKNOWN_TENANT });
}

export async function requireTenant(deps: ServiceDeps, tenantId: string): Promise<Tenant> {
  const tenant = await findTenant(deps.store.db, tenantId);
  if (!tenant) throw noTenant();
  return tenant;
}
