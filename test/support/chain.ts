/** Builds signed DRS chains for tests, through the SDK a user would use. */
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

export const T0 = 1_800_000_000;

export const SAFE_ARGS = { tool: 'web_search', estimated_cost_usd: 0.5, pii_access: false, write_access: false };

export interface TestChain {
  readonly keys: readonly KeyPair[]; // keys[0] root issuer, keys[i+1] = aud of DR i
  readonly drs: readonly SignedDelegation[];
  readonly invoker: KeyPair;
  invoke(
    args?: Record<string, unknown>,
    opts?: { iat?: number; jti?: string; toolServer?: string },
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
    invoke(args = SAFE_ARGS, o = {}) {
      const invocation = createInvocation({
        chain: drs,
        invoker,
        args,
        toolServer: o.toolServer ?? 'mcp://tools.example.com',
        iat: o.iat ?? T0,
        ...(o.jti ? { jti: o.jti } : {}),
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
