/**
 * Custodial root keys: one Ed25519 root key per tenant, held by the service
 * for POST /v1/delegations/issue. Generated on first use, sealed with the
 * master key under the context 'custodial:<tenant>' (so a sealed seed cannot
 * be moved to another tenant's row), and trusted as a root of that tenant
 * (label 'custodial') in the same transaction, so there is never a custodial
 * key the tenant does not trust.
 *
 * Removing the custodial root from the tenant's trusted roots afterwards is
 * an operator decision and is not undone here: roots issued with the key
 * then fail verification as UNTRUSTED_ROOT.
 */
import { BatonError } from '../protocol/errors.js';
import { generateSeed } from '../protocol/ed25519.js';
import { keyPairFromSeed, type KeyPair } from '../protocol/key-pair.js';
import { transactionBehind, type CommitCheck, type Db } from '../store/db.js';
import type { CustodialKey } from '../store/schema/index.js';
import { findCustodialKey, insertCustodialKeyIfAbsent, trustRoot } from '../store/service-keys.js';
import { openSecret, sealSecret } from './secrets.js';

export const CUSTODIAL_ROOT_LABEL = 'custodial';
const context = (tenantId: string) => `custodial:${tenantId}`;

function fromRow(row: CustodialKey, masterKey: Uint8Array): KeyPair {
  const seed = openSecret(row.encryptedSeed, masterKey, context(row.tenantId));
  try {
    if (seed.length !== 32) throw inconsistent(row.tenantId, 'the sealed seed is not 32 bytes');
    const key = keyPairFromSeed(seed);
    if (key.did !== row.did) throw inconsistent(row.tenantId, 'the sealed seed does not belong to the stored DID');
    return key;
  } finally {
    seed.fill(0);
  }
}

function inconsistent(tenantId: string, reason: string): BatonError {
  return new BatonError('INTERNAL', {
    message: `The custodial root key of tenant ${tenantId} is inconsistent: ${reason}.`,
    suggestion: 'Restore custodial_keys from a backup; do not edit key rows by hand.',
    details: { tenant: tenantId, reason },
  });
}

/**
 * The tenant's custodial root key: loaded and decrypted, or generated on
 * first use. Concurrent first uses converge on one key (the insert that
 * loses the race on the tenant_id primary key reads the winner's).
 */
export async function custodialRootKey(db: Db, tenantId: string, masterKey: Uint8Array, gate?: CommitCheck): Promise<KeyPair> {
  const existing = await findCustodialKey(db, tenantId);
  if (existing) return fromRow(existing, masterKey);

  const seed = generateSeed();
  let created: KeyPair;
  try {
    created = keyPairFromSeed(seed);
    const encryptedSeed = sealSecret(seed, masterKey, context(tenantId));
    const won = await transactionBehind(db, gate, async (tx) => {
      const inserted = await insertCustodialKeyIfAbsent(tx, { tenantId, did: created.did, encryptedSeed });
      if (!inserted) return false;
      await trustRoot(tx, tenantId, created.did, CUSTODIAL_ROOT_LABEL);
      return true;
    });
    if (won) return created;
  } finally {
    seed.fill(0);
  }
  // Another request created it first and has committed: use theirs.
  const winner = await findCustodialKey(db, tenantId);
  if (!winner) throw new BatonError('INTERNAL', { message: 'The custodial root key was created concurrently but cannot be read back.' });
  return fromRow(winner, masterKey);
}
