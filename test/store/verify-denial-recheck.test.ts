/**
 * The denial statement (baton_denial_item, 0041) re-checks the facts of the chain a refusal was
 * decided on, which a node's cache may hold stale: every record of the chain not revoked unless a
 * violation names it so, and the root record's issuer still trusted unless a violation says it is
 * not. When one no longer holds it stores nothing and answers STALE, naming what changed. A denial
 * stored with no chain (blocks A-C of verifyChain: its claims are unverified) is stored as before.
 * Through recordDenial, on both drivers.
 */
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Store } from '../../src/store/db.js';
import { recordDenial, type DenialToRecord } from '../../src/store/runtime.js';
import type { Delegation } from '../../src/store/schema/index.js';
import { seedDelegation } from '../support/fixtures.js';
import { seedVerifyCaller, type VerifyCaller } from '../support/verify-statement.js';
import { drivers } from '../setup/drivers.js';

describe.each(drivers)('a denial re-checks the chain it was decided on ($name)', ({ open }) => {
  let store: Store;
  let drop: () => Promise<void>;
  let caller: VerifyCaller;

  beforeAll(async () => {
    ({ store, drop } = await open());
    caller = await seedVerifyCaller(store, 'denial-recheck', 'did:key:zDenialRecheckRoot');
  });
  afterAll(() => drop());

  /** A stored chain under the caller's trusted root (or `rootIss`), `revoked` marking records by depth. */
  const seedChain = async (depth: number, o: { revoked?: readonly number[]; rootIss?: string } = {}): Promise<Delegation[]> => {
    const chain: Delegation[] = [];
    for (let i = 0; i < depth; i++)
      chain.push(
        await seedDelegation(store.db, caller.tenantId, chain.at(-1), {
          ...(i === 0 ? { iss: o.rootIss ?? caller.rootDid } : {}),
          revokedAt: o.revoked?.includes(i) ? new Date() : null,
        }),
      );
    return chain;
  };
  const denial = (chain: readonly string[], code: string, block: string | null, violations: unknown[] = []): DenialToRecord => {
    const jti = `inv-${randomBytes(6).toString('hex')}`;
    return {
      tenantId: caller.tenantId,
      callerKeyId: caller.keyId,
      jti,
      invocationHash: null,
      code,
      block,
      drChain: chain,
      violations,
      serviceReceipt: { subject: jti, jws: `receipt-of-${jti}`, kid: caller.kid },
    };
  };
  const record = (d: DenialToRecord) => recordDenial(store.query, d, new Date(Date.now() + 5_000));
  const stored = async (d: DenialToRecord): Promise<number> =>
    Number((await store.query('select count(*)::int as n from denials where jti = $1', [d.jti]))[0]!['n']);
  const undeclared = [{ code: 'TOOL_UNDECLARED', field: 'args.tool', actual: 'not_declared' }];
  const revokedAt = (chain: readonly Delegation[], i: number) => ({
    code: 'RECEIPT_REVOKED',
    dr_index: i,
    dr_hash: chain[i]!.hash,
    field: 'status',
    required: 'active',
    actual: 'revoked',
  });

  it('a live chain under a trusted root: stored', async () => {
    const chain = await seedChain(16);
    const d = denial(
      chain.map((x) => x.hash),
      'TOOL_UNDECLARED',
      'D',
      undeclared,
    );
    expect(await record(d)).toMatchObject({ o: 'DENIED', serviceReceiptId: expect.any(Number) });
    expect(await stored(d)).toBe(1);
  });

  it('records revoked since the node cached them: STALE naming each, nothing stored', async () => {
    const chain = await seedChain(3, { revoked: [0, 2] });
    for (const [code, block] of [
      ['TOOL_UNDECLARED', 'D'],
      ['TOOL_SERVER_MISMATCH', 'C'],
      ['RECEIPT_EXPIRED', 'E'],
      ['APPROVAL_REJECTED', 'G'],
    ] as const) {
      const d = denial(
        chain.map((x) => x.hash),
        code,
        block,
      );
      expect(await record(d), code).toEqual({ o: 'STALE', revoked: [chain[0]!.hash, chain[2]!.hash], untrusted: false });
      expect(await stored(d)).toBe(0);
    }
    // A refusal naming one revoked record but not the other was decided on a stale fact too.
    const partly = denial(
      chain.map((x) => x.hash),
      'RECEIPT_REVOKED',
      'F',
      [revokedAt(chain, 2)],
    );
    expect(await record(partly)).toEqual({ o: 'STALE', revoked: [chain[0]!.hash], untrusted: false });
    expect(await stored(partly)).toBe(0);
  });

  it('a refusal that names every revoked record already: stored', async () => {
    const chain = await seedChain(3, { revoked: [0, 2] });
    const d = denial(
      chain.map((x) => x.hash),
      'RECEIPT_REVOKED',
      'F',
      [revokedAt(chain, 0), revokedAt(chain, 2)],
    );
    expect((await record(d)).o).toBe('DENIED');
    expect(await stored(d)).toBe(1);
  });

  it('a root no longer trusted: STALE, unless the refusal says so already', async () => {
    const chain = await seedChain(2, { rootIss: 'did:key:zNoLongerTrusted', revoked: [1] });
    const hashes = chain.map((x) => x.hash);
    const stale = denial(hashes, 'POLICY_VIOLATION', 'D');
    expect(await record(stale)).toEqual({ o: 'STALE', revoked: [chain[1]!.hash], untrusted: true });
    expect(await stored(stale)).toBe(0);
    // The statement's own UNTRUSTED_ROOT (a chain stored with its claims: block C after block D's checks).
    const untrusted = { code: 'UNTRUSTED_ROOT', dr_index: 0, dr_hash: chain[0]!.hash, field: 'iss', actual: 'did:key:zNoLongerTrusted' };
    const said = denial(hashes, 'UNTRUSTED_ROOT', 'C', [untrusted, revokedAt(chain, 1)]);
    expect((await record(said)).o).toBe('DENIED');
    expect(await stored(said)).toBe(1);
  });

  it('blocks A-C of verifyChain (stored with no chain) and an unstored chain: stored as before', async () => {
    const forged = denial([], 'SIGNATURE_INVALID', 'C', [{ code: 'SIGNATURE_INVALID' }]);
    expect((await record(forged)).o).toBe('DENIED');
    expect(await stored(forged)).toBe(1);
    // Not stored: the node read the tenant's roots fresh for it (it knew no root DID to look for).
    const unstored = denial([`sha256:${'ab'.repeat(32)}`, `sha256:${'cd'.repeat(32)}`], 'TOOL_UNDECLARED', 'D', undeclared);
    expect((await record(unstored)).o).toBe('DENIED');
    expect(await stored(unstored)).toBe(1);
  });

  it('a revoked API key is still refused first', async () => {
    const chain = await seedChain(2, { revoked: [0] });
    const keyId = `key_${randomBytes(6).toString('hex')}`;
    await store.query(`insert into api_keys (id, tenant_id, secret_hash, scopes, revoked_at) values ($1, $2, $3, '{verify}', now())`, [
      keyId,
      caller.tenantId,
      'cd'.repeat(32),
    ]);
    const d = {
      ...denial(
        chain.map((x) => x.hash),
        'TOOL_UNDECLARED',
        'D',
      ),
      callerKeyId: keyId,
    };
    expect(await record(d)).toEqual({ o: 'KEY_REVOKED' });
    expect(await stored(d)).toBe(0);
  });
});
