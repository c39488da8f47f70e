/**
 * The test fixtures, in one place: the fixed clock (T0), the tool call every
 * test makes unless it needs another (ARGS, TOOL_SERVER, CMD), fixed keys,
 * signed DRS chains built through the SDK a user would use, and minimal rows
 * for store tests. The security suite builds its hostile records by hand
 * (test/security/support/fixtures.ts) but from these same constants.
 */
import { createHash, randomBytes } from 'node:crypto';
import { generateKeyPair, keyPairFromSeed, type KeyPair } from '../../src/sdk/keys.js';
import {
  createInvocation,
  createRootDelegation,
  createSubDelegation,
  makeBundle,
  type SignedDelegation,
  type SignedInvocation,
} from '../../src/sdk/records.js';
import type { Policy } from '../../src/protocol/policy.js';
import type { Bundle, DelegationPayload } from '../../src/protocol/records.js';
import { signJws } from '../../src/protocol/jws.js';
import { recordHash } from '../../src/protocol/hash.js';
import type { Db } from '../../src/store/db.js';
import { pgError, type PgErrorInfo } from '../../src/store/errors.js';
import { newId } from '../../src/store/ids.js';
import { delegations, serviceKeys, tenants, type Delegation, type NewDelegation } from '../../src/store/schema/index.js';

/** The clock of every test that does not need the real one (unix seconds). */
export const T0 = 1_800_000_000;
export const TOOL_SERVER = 'mcp://tools.example.com';
export const CMD = '/mcp/tools/call';
/** A harmless, priced call of an allowed tool. */
export const ARGS = { tool: 'web_search', estimated_cost_usd: 0.5, pii_access: false, write_access: false } as const;

export interface TestChain {
  readonly keys: readonly KeyPair[]; // keys[0] root issuer, keys[i+1] = aud of DR i
  readonly drs: readonly SignedDelegation[];
  readonly invoker: KeyPair;
  invoke(
    args?: Record<string, unknown>,
    opts?: { iat?: number; jti?: string; toolServer?: string; cmd?: string },
  ): {
    invocation: SignedInvocation;
    bundle: Bundle;
  };
}

/** A chain root -> ... -> leaf with one policy per DR (signed even if it escalates, so verification can be tested). */
export function buildChain(
  policies: readonly Policy[],
  opts: { nbf?: number; exp?: number | null; iat?: number; keys?: readonly KeyPair[] } = {},
): TestChain {
  const keys = opts.keys ?? Array.from({ length: policies.length + 1 }, () => generateKeyPair());
  const iat = opts.iat ?? T0;
  const drs: SignedDelegation[] = [];
  policies.forEach((policy, i) => {
    const common = {
      issuer: keys[i]!,
      audience: keys[i + 1]!.did,
      policy,
      iat,
      nbf: opts.nbf ?? T0 - 100,
      exp: opts.exp === undefined ? T0 + 3600 : opts.exp,
    };
    drs.push(i === 0 ? createRootDelegation(common) : createUnchecked(drs[i - 1]!, common));
  });
  const invoker = keys[policies.length]!;
  return {
    keys,
    drs,
    invoker,
    invoke(args = ARGS, o = {}) {
      const invocation = createInvocation({
        chain: drs,
        invoker,
        args,
        toolServer: o.toolServer ?? TOOL_SERVER,
        iat: o.iat ?? T0,
        ...(o.jti ? { jti: o.jti } : {}),
        ...(o.cmd ? { cmd: o.cmd } : {}),
      });
      return { invocation, bundle: makeBundle(invocation, drs) };
    },
  };
}

/** Signs a sub-delegation without the SDK's client-side attenuation check. */
function createUnchecked(parent: SignedDelegation, common: Parameters<typeof createRootDelegation>[0]): SignedDelegation {
  try {
    return createSubDelegation({ parent, ...common });
  } catch {
    return createSubDelegationUnchecked(parent, common);
  }
}

export function createSubDelegationUnchecked(
  parent: SignedDelegation,
  c: { issuer: KeyPair; audience: string; policy: Policy; iat?: number; nbf?: number; exp?: number | null },
  overrides: Record<string, unknown> = {},
): SignedDelegation {
  const payload = {
    iss: c.issuer.did,
    sub: parent.payload.sub,
    aud: c.audience,
    drs_v: '4.0',
    drs_type: 'delegation-receipt',
    cmd: parent.payload.cmd,
    policy: c.policy,
    nbf: c.nbf ?? parent.payload.nbf,
    exp: c.exp === undefined ? parent.payload.exp : c.exp,
    iat: c.iat ?? T0,
    jti: `dr:${Math.random().toString(36).slice(2)}`,
    prev_dr_hash: parent.hash,
    ...overrides,
  };
  const jws = signJws(payload, c.issuer.seed);
  return { jws, hash: recordHash(jws), payload: payload as DelegationPayload };
}

export const CONFORMANCE_KEYS = {
  alice: keyPairFromSeed(Buffer.from('9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60', 'hex')),
  bob: keyPairFromSeed(Buffer.from('4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb', 'hex')),
  charlie: keyPairFromSeed(Buffer.from('c5aa8df43f9f837bedb7442f31dcb7b166d38535076f094b85ce3a2e0b4458f7', 'hex')),
};

// ---------------------------------------------------------------- store rows
// Minimal valid rows for store tests (and for service tests that need a
// stored chain without going through the protocol layer).

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
      cmd: CMD,
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
