// Minimal valid rows for store tests (and for service tests that need a
// stored chain without going through the protocol layer).
import { createHash, randomBytes } from 'node:crypto';
import type { Db } from '../../src/store/db.js';
import { newId } from '../../src/store/ids.js';
import { delegations, serviceKeys, tenants, type Delegation, type NewDelegation } from '../../src/store/schema/index.js';
import { pgError, type PgErrorInfo } from '../../src/store/errors.js';

/** 'sha256:' + hex, as the protocol computes a record hash. */
export function fakeHash(seed: string = randomBytes(8).toString('hex')): string {
  return `sha256:${createHash('sha256').update(seed).digest('hex')}`;
}

export async function seedTenant(db: Db, name = 'acme'): Promise<string> {
  const id = newId('ten');
  await db.insert(tenants).values({ id, name });
  return id;
}

export async function seedServiceKey(db: Db, kid = `svc-${randomBytes(4).toString('hex')}`): Promise<string> {
  await db.insert(serviceKeys).values({ kid, publicKey: 'pk', encryptedSeed: 'sealed' });
  return kid;
}

/** Inserts a DR under `parent` (or a root when parent is undefined). */
export async function seedDelegation(
  db: Db,
  tenantId: string,
  parent?: Pick<Delegation, 'hash' | 'rootHash' | 'depth' | 'ancestors'>,
  overrides: Partial<NewDelegation> = {},
): Promise<Delegation> {
  const hash = overrides.hash ?? fakeHash();
  const [row] = await db
    .insert(delegations)
    .values({
      tenantId,
      hash,
      jws: 'h.p.s',
      jti: `dr:${randomBytes(8).toString('hex')}`,
      iss: 'did:key:zIss',
      sub: 'did:key:zSub',
      aud: 'did:key:zAud',
      cmd: '/mcp/tools/call',
      policy: {},
      nbf: 1_700_000_000,
      exp: null,
      iat: 1_700_000_000,
      parentHash: parent?.hash ?? null,
      rootHash: parent?.rootHash ?? hash,
      depth: parent ? parent.depth + 1 : 0,
      ancestors: parent ? [...parent.ancestors, parent.hash] : [],
      ...overrides,
    })
    .returning();
  if (!row) throw new Error('insert returned nothing');
  return row;
}

/** Awaits a promise that must fail in the database; returns the SQLSTATE etc. */
export async function dbFailure(p: Promise<unknown>): Promise<PgErrorInfo> {
  try {
    await p;
  } catch (err) {
    const info = pgError(err);
    if (!info) throw new Error(`expected a database error, got: ${String(err)}`);
    return info;
  }
  throw new Error('expected the statement to fail, it succeeded');
}
