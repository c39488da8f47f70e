/**
 * Building and signing DRS records client-side. Sub-delegations are checked
 * against their parent before signing, with the same rules (and codes) the
 * server applies, so a client learns of an escalation without a round trip.
 */
import { randomUUID } from 'node:crypto';
import { checkTimeNesting, commandCovers, commandsCoveredBy, inBlockOrder } from '../protocol/chain.js';
import { BatonError, type Violation } from '../protocol/errors.js';
import { decodeJws, signJws } from '../protocol/jws.js';
import { checkAttenuation, type Policy } from '../protocol/policy.js';
import {
  DelegationPayloadSchema,
  InvocationPayloadSchema,
  MAX_CHAIN_DEPTH,
  parseWith,
  type Bundle,
  type DelegationPayload,
  type InvocationPayload,
} from '../protocol/records.js';
import { recordHash, type RecordHash } from '../protocol/hash.js';
import type { KeyPair } from './keys.js';
import { signDelegation, signRootDelegation, type RootDelegationInput, type SignedDelegation } from '../protocol/root-delegation.js';

const nowSeconds = (): number => Math.floor(Date.now() / 1000);

export type { RootDelegationInput, SignedDelegation };

export function createRootDelegation(input: RootDelegationInput): SignedDelegation {
  return signRootDelegation({ ...input, iat: input.iat ?? nowSeconds(), jti: input.jti ?? `dr:${randomUUID()}` });
}

export interface SubDelegationInput {
  readonly parent: SignedDelegation | string;
  /** The holder of the parent (its aud), signing the hand-off. */
  readonly issuer: KeyPair;
  readonly audience: string;
  readonly policy: Policy;
  readonly cmd?: string;
  readonly nbf?: number;
  readonly exp?: number | null;
  readonly iat?: number;
  readonly jti?: string;
}

export function createSubDelegation(input: SubDelegationInput): SignedDelegation {
  const parent = typeof input.parent === 'string' ? readDelegation(input.parent) : input.parent;
  const iat = input.iat ?? nowSeconds();
  const payload = {
    iss: input.issuer.did,
    sub: parent.payload.sub,
    aud: input.audience,
    drs_v: '4.0',
    drs_type: 'delegation-receipt',
    cmd: input.cmd ?? parent.payload.cmd,
    policy: input.policy,
    // Default: valid from when the parent is, which always nests.
    nbf: input.nbf ?? parent.payload.nbf,
    exp: input.exp === undefined ? parent.payload.exp : input.exp,
    iat,
    jti: input.jti ?? `dr:${randomUUID()}`,
    prev_dr_hash: parent.hash,
  };
  const violations = subDelegationViolations(parent.payload, payload as DelegationPayload);
  if (input.issuer.did !== parent.payload.aud) {
    // Block B, the earliest block checked here: a wrong key is the cause to name first.
    violations.unshift({
      code: 'ISSUER_AUDIENCE_GAP',
      field: 'iss',
      required: parent.payload.aud,
      actual: input.issuer.did,
      message: `Only the holder of the parent delegation (${parent.payload.aud}) can sub-delegate it.`,
    });
  }
  if (violations.length > 0) {
    const first = violations[0]!;
    throw new BatonError(first.code, { message: first.message ?? undefined, violations });
  }
  return signDelegation(payload, input.issuer);
}

/** Everything that makes `child` not a valid narrowing of `parent`, in the order the spec's blocks check it. */
export function subDelegationViolations(parent: DelegationPayload, child: DelegationPayload): Violation[] {
  const out = [...checkAttenuation(parent.policy, child.policy), ...checkTimeNesting(parent, child)];
  if (!commandCovers(parent.cmd, child.cmd)) {
    out.push({ code: 'COMMAND_MISMATCH', field: 'cmd', required: commandsCoveredBy(parent.cmd), actual: child.cmd });
  }
  return inBlockOrder(out);
}

export function readDelegation(jws: string): SignedDelegation {
  const decoded = decodeJws(jws, 'delegation record');
  return { jws, hash: decoded.hash, payload: parseWith(DelegationPayloadSchema, decoded.payload, 'delegation payload') };
}

export interface InvocationInput {
  /** The leaf delegation (or the whole chain, root first). */
  readonly chain: readonly (SignedDelegation | string)[];
  /** The holder of the leaf (its aud). */
  readonly invoker: KeyPair;
  readonly args: Record<string, unknown>;
  readonly toolServer: string;
  readonly cmd?: string;
  readonly iat?: number;
  readonly jti?: string;
}

export interface SignedInvocation {
  readonly jws: string;
  readonly hash: RecordHash;
  readonly payload: InvocationPayload;
}

export function createInvocation(input: InvocationInput): SignedInvocation {
  const chain = input.chain.map((d) => (typeof d === 'string' ? readDelegation(d) : d));
  const leaf = chain[chain.length - 1];
  if (!leaf) throw new TypeError('An invocation needs the delegation chain it acts under, root first.');
  if (chain.length > MAX_CHAIN_DEPTH) {
    throw new BatonError('CHAIN_TOO_DEEP', {
      message: `The chain has ${chain.length} delegation records; DRS chains hold at most ${MAX_CHAIN_DEPTH}.`,
    });
  }
  const payload = {
    iss: input.invoker.did,
    sub: leaf.payload.sub,
    drs_v: '4.0',
    drs_type: 'invocation-receipt',
    cmd: input.cmd ?? leaf.payload.cmd,
    args: input.args,
    dr_chain: chain.map((d) => d.hash),
    tool_server: input.toolServer,
    iat: input.iat ?? nowSeconds(),
    jti: input.jti ?? `inv:${randomUUID()}`,
  };
  const checked = parseWith(InvocationPayloadSchema, payload, 'invocation payload');
  const jws = signJws(payload, input.invoker.seed);
  return { jws, hash: recordHash(jws), payload: checked };
}

/** A bundle by value (receipts embedded) or by reference (receipts: [], chain stored in Baton). */
export function makeBundle(
  invocation: SignedInvocation | string,
  chain: readonly (SignedDelegation | string)[],
  mode: 'value' | 'reference' = 'value',
): Bundle {
  return {
    bundle_version: '4.0',
    invocation: typeof invocation === 'string' ? invocation : invocation.jws,
    receipts: mode === 'reference' ? [] : chain.map((d) => (typeof d === 'string' ? d : d.jws)),
  };
}
