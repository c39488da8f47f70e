/** DRS 4.0 conformance fixtures, reproduced byte for byte and judged by Baton's rules. */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { temporalStatus, verifyChain } from '../../src/protocol/chain.js';
import { recordHash } from '../../src/protocol/hash.js';
import { signJws } from '../../src/protocol/jws.js';
import { createInvocation, makeBundle, readDelegation } from '../../src/sdk/records.js';
import { CONFORMANCE_KEYS } from '../support/fixtures.js';

const dir = new URL('../vectors/drs-conformance/', import.meta.url);
const load = (path: string) => JSON.parse(readFileSync(new URL(path, dir), 'utf8'));

describe('DRS conformance: chain-hash', () => {
  for (const v of load('chain-hash/vectors.json').vectors) {
    it(v.id, () => expect(recordHash(v.input)).toBe(v.expected));
  }
});

describe('DRS conformance: signed delegation receipts reproduce byte for byte', () => {
  const cases: [string, keyof typeof CONFORMANCE_KEYS][] = [
    ['receipts/root-delegation.json', 'alice'],
    ['receipts/sub-delegation.json', 'bob'],
    ['receipts/invocation.json', 'charlie'],
  ];
  for (const [file, signer] of cases) {
    it(`${file} signed by ${signer}`, () => {
      const fixture = load(file);
      expect(CONFORMANCE_KEYS[signer].did).toBe(fixture.keys[signer].did);
      const jws = signJws(fixture.payload, CONFORMANCE_KEYS[signer].seed);
      expect(jws).toBe(fixture.jwt);
      if (fixture.chain_hash) expect(recordHash(jws)).toBe(fixture.chain_hash);
    });
  }

  it('sub-delegation points at the root hash', () => {
    const sub = load('receipts/sub-delegation.json');
    expect(recordHash(sub.parent_jwt)).toBe(sub.parent_hash);
    expect(sub.payload.prev_dr_hash).toBe(sub.parent_hash);
  });
});

describe('DRS conformance: full-chain bundle', () => {
  const fixture = load('receipts/full-chain-bundle.json');
  const alice = fixture.keys.alice.did as string;
  const now = 1_700_000_010;

  it('is denied because its args omit pii_access and write_access, which its policies constrain', () => {
    const decision = verifyChain(fixture.bundle, { now, trustedRoots: [alice] });
    expect(decision.valid).toBe(false);
    if (decision.valid) return;
    expect(decision.error.code).toBe('POLICY_VIOLATION');
    expect(decision.error.block).toBe('D');
    const fields = decision.violations.map((v) => `${v.dr_index}:${v.field}`).sort();
    expect(fields).toEqual(['0:args.pii_access', '0:args.write_access', '1:args.pii_access', '1:args.write_access']);
    expect(decision.violations.every((v) => v.code === 'POLICY_VIOLATION')).toBe(true);
  });

  it('the same chain with both fields declared false is allowed, with the DRS context', () => {
    const chain = fixture.bundle.receipts.map(readDelegation);
    const invocation = createInvocation({
      chain,
      invoker: CONFORMANCE_KEYS.charlie,
      args: { tool: 'web_search', query: 'DRS specification', estimated_cost_usd: 0.5, pii_access: false, write_access: false },
      toolServer: 'mcp://tools.example.com',
      iat: 1_700_000_003,
      jti: 'inv:conformance-inv-002',
    });
    const decision = verifyChain(makeBundle(invocation, chain), { now, trustedRoots: [alice] });
    expect(decision.valid).toBe(true);
    if (!decision.valid) return;
    const expected = fixture.expected_result.context;
    expect(decision.context.root_principal).toBe(expected.root_principal);
    expect(decision.context.root_type).toBe(expected.root_type);
    expect(decision.context.chain_depth).toBe(expected.chain_depth);
    expect(decision.context.leaf_policy).toEqual(expected.leaf_policy);
  });

  it('is denied UNTRUSTED_ROOT when alice is not trusted', () => {
    const decision = verifyChain(fixture.bundle, { now, trustedRoots: [fixture.keys.bob.did] });
    expect(decision.valid).toBe(false);
    if (decision.valid) return;
    expect(decision.violations.map((v) => v.code)).toContain('UNTRUSTED_ROOT');
  });
});

describe('DRS conformance: temporal', () => {
  const codes: Record<string, string> = { NOT_YET_VALID: 'RECEIPT_NOT_YET_VALID', EXPIRED: 'RECEIPT_EXPIRED' };
  for (const v of load('temporal/vectors.json').vectors) {
    it(v.id, () => {
      const verdict = temporalStatus(v.nbf, v.exp, v.now);
      expect(verdict).toBe(v.valid ? 'valid' : codes[v.expected_code]);
    });
  }
});

describe('DRS conformance: revocation status-list lookup', () => {
  // The vectors say which status-list indices a store marks revoked; a DR
  // carrying that index must be denied RECEIPT_REVOKED, the others allowed.
  const vectors = load('revocation/vectors.json').vectors as { id: string; status_list_index: number; is_revoked: boolean }[];
  const revokedIndices = new Set(vectors.filter((v) => v.is_revoked).map((v) => v.status_list_index));
  const { alice, bob } = CONFORMANCE_KEYS;
  for (const v of vectors) {
    it(v.id, () => {
      const root = signJws(
        {
          iss: alice.did,
          sub: alice.did,
          aud: bob.did,
          drs_v: '4.0',
          drs_type: 'delegation-receipt',
          cmd: '/mcp/tools/call',
          policy: { allowed_tools: ['web_search'] },
          nbf: 1_700_000_000,
          exp: 1_800_000_000,
          iat: 1_700_000_001,
          jti: `dr:${v.id}`,
          drs_root_type: 'organisation',
          drs_status_list_index: v.status_list_index,
        },
        alice.seed,
      );
      const chain = [readDelegation(root)];
      const invocation = createInvocation({
        chain,
        invoker: bob,
        args: { tool: 'web_search', pii_access: false, write_access: false },
        toolServer: 't',
        iat: 1_700_000_003,
      });
      const indexOf = new Map(chain.map((d) => [d.hash as string, d.payload.drs_status_list_index]));
      const decision = verifyChain(makeBundle(invocation, chain), {
        now: 1_700_000_010,
        trustedRoots: [alice.did],
        isRevoked: (hash) => revokedIndices.has(indexOf.get(hash) ?? -1),
      });
      expect(decision.valid).toBe(!v.is_revoked);
      if (!decision.valid) expect(decision.error.code).toBe('RECEIPT_REVOKED');
    });
  }
});
