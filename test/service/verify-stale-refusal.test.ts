/**
 * A refusal's reason is never decided by a stale hot-path cache. An outside differential tester
 * (dry run vs real verify) found the one class where a cache decided: a chain this node had cached
 * as live and trusted, then revoked (or its root DID removed), refused by the service for another
 * reason (the tool gate's TOOL_UNDECLARED here) and stored so: the dry run, which reads fresh, said
 * RECEIPT_REVOKED or UNTRUSTED_ROOT. The denial statement now re-checks the chain's revocation and
 * its root's trust, and when one changed it stores nothing and the verify is decided again on fresh
 * reads. The node that revokes (or removes the root) also forgets the fact at once, so it needs no
 * second round; another node learns it from the statement. On real PostgreSQL, in process.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { desc, eq } from 'drizzle-orm';
import { generateKeyPair } from '../../src/sdk/keys.js';
import { makeBundle } from '../../src/sdk/records.js';
import type { Policy } from '../../src/protocol/policy.js';
import { denials } from '../../src/store/schema/index.js';
import { observeVerifyBatches } from '../../src/store/verify-batch.js';
import { openStore } from '../../src/store/db.js';
import { createApp } from '../../src/service/app.js';
import { createServiceDeps } from '../../src/service/deps.js';
import { silentLogger } from '../../src/service/log.js';
import { buildChain, T0 } from '../support/fixtures.js';
import { secondNodeApp } from '../support/nodes.js';
import { callerOf, setupTenant, startTestService, type CallResult, type TestService } from '../support/service.js';
import { tool } from '../support/tools.js';

let svc: TestService;
const policy: Policy = { max_cost_usd: 1 };
const DECLARED = { estimated_cost_usd: 0.01, pii_access: false, write_access: false };

beforeAll(async () => {
  svc = await startTestService();
});
afterAll(async () => svc?.close());

type Call = TestService['call'];

/** A tenant with a strict catalog declaring only `lookup`, and a stored two-record chain under its root. */
async function tenantWithChain(name: string) {
  const tenant = await setupTenant(svc, name);
  const published = await svc.call('POST', `/v1/admin/tenants/${tenant.id}/tools`, {
    key: svc.adminKey,
    json: { base_version: 0, strict: true, tools: [tool('lookup')], rules: [] },
  });
  expect(published.status, JSON.stringify(published.body)).toBe(201);
  const chain = buildChain([policy, policy], { keys: [tenant.root, generateKeyPair(), generateKeyPair()] });
  const stored = await svc.call('POST', '/v1/delegations', { key: tenant.keys.issue, json: { receipts: chain.drs.map((d) => d.jws) } });
  expect(stored.status, JSON.stringify(stored.body)).toBe(201);
  let seq = 0;
  /** A fresh invocation of `not_declared` through the chain, real or dry run, on `call`'s node. */
  const verify = (call: Call, dryRun = false): Promise<CallResult> => {
    const { bundle } = chain.invoke({ tool: 'not_declared', ...DECLARED }, { iat: T0, jti: `inv:${name}:${++seq}` });
    return call('POST', dryRun ? '/v1/verify/dry-run' : '/v1/verify', { key: tenant.keys.verify, json: bundle });
  };
  return { tenant, chain, verify };
}

async function lastDenial(tenantId: string) {
  const [row] = await svc.store.db.select().from(denials).where(eq(denials.tenantId, tenantId)).orderBy(desc(denials.id)).limit(1);
  return row!;
}

/** The real verify answers, and stores, what the dry run answers. */
async function expectRealAsDryRun(tenantId: string, real: CallResult, dry: CallResult, code: string, block: string): Promise<void> {
  expect(dry.status).toBe(403);
  expect(dry.body.error).toMatchObject({ code, block });
  expect(real.status).toBe(403);
  expect({ code: real.body.error.code, block: real.body.error.block, violations: real.body.violations }).toEqual({
    code: dry.body.error.code,
    block: dry.body.error.block,
    violations: dry.body.violations,
  });
  const row = await lastDenial(tenantId);
  expect({ code: row.code, block: row.block, violations: row.violations }).toEqual({ code, block, violations: dry.body.violations });
}

/** Verify items the statements of `run` sent (each denial stored is one). */
async function statementItems(run: () => Promise<unknown>): Promise<number> {
  let items = 0;
  const stop = observeVerifyBatches((b) => (items += b.items));
  try {
    await run();
  } finally {
    stop();
  }
  return items;
}

describe('a refusal after the chain changed under this node’s cache', () => {
  it('revoked on the same node: RECEIPT_REVOKED (block F), stored so, in one statement', async () => {
    const { tenant, chain, verify } = await tenantWithChain('revoked-here');
    const first = await verify(svc.call);
    expect(first.status).toBe(403);
    expect(first.body.error.code).toBe('TOOL_UNDECLARED'); // caches the chain's records and the tenant's roots
    const revoked = await svc.call('POST', `/v1/delegations/${chain.drs[0]!.hash}/revoke`, {
      key: tenant.keys.issue,
      json: { confirm: true, reason: 'compromised' },
    });
    expect(revoked.status).toBe(200);

    let real: CallResult | undefined;
    // The revoking node forgot the record at once: the refusal is decided fresh, and stored by one statement.
    expect(await statementItems(async () => (real = await verify(svc.call)))).toBe(1);
    await expectRealAsDryRun(tenant.id, real!, await verify(svc.call, true), 'RECEIPT_REVOKED', 'F');
  });

  it('root DID removed on the same node: UNTRUSTED_ROOT (block C), stored so, in one statement', async () => {
    const { tenant, verify } = await tenantWithChain('untrusted-here');
    expect((await verify(svc.call)).body.error.code).toBe('TOOL_UNDECLARED');
    const removed = await svc.call('DELETE', `/v1/admin/tenants/${tenant.id}/roots/${tenant.root.did}`, { key: svc.adminKey });
    expect(removed.status).toBe(204);

    let real: CallResult | undefined;
    expect(await statementItems(async () => (real = await verify(svc.call)))).toBe(1);
    await expectRealAsDryRun(tenant.id, real!, await verify(svc.call, true), 'UNTRUSTED_ROOT', 'C');
  });

  it('revoked on another node: this node’s denial statement finds it, and the verify is decided again', async () => {
    const { tenant, chain, verify } = await tenantWithChain('revoked-elsewhere');
    const other = await secondNodeApp(svc);
    try {
      const node2 = callerOf(other.app);
      expect((await verify(node2)).body.error.code).toBe('TOOL_UNDECLARED'); // node 2 caches the chain
      const revoked = await svc.call('POST', `/v1/delegations/${chain.drs[0]!.hash}/revoke`, {
        key: tenant.keys.issue,
        json: { confirm: true, reason: 'compromised' },
      });
      expect(revoked.status).toBe(200);
      const denialsBefore = (await lastDenial(tenant.id)).id;
      await expectRealAsDryRun(tenant.id, await verify(node2), await verify(node2, true), 'RECEIPT_REVOKED', 'F');
      // One denial stored, not the stale one as well.
      const [, ...older] = await svc.store.db
        .select({ id: denials.id })
        .from(denials)
        .where(eq(denials.tenantId, tenant.id))
        .orderBy(desc(denials.id));
      expect(older[0]!.id).toBe(denialsBefore);
      // Once learnt, node 2 refuses fresh: one statement.
      expect(await statementItems(() => verify(node2))).toBe(1);
    } finally {
      await other.close();
    }
  });

  it('root DID removed through another node: this node’s denial statement finds it, and the verify is decided again', async () => {
    const { tenant, verify } = await tenantWithChain('untrusted-elsewhere');
    const other = await secondNodeApp(svc);
    try {
      const node2 = callerOf(other.app);
      expect((await verify(node2)).body.error.code).toBe('TOOL_UNDECLARED');
      const removed = await svc.call('DELETE', `/v1/admin/tenants/${tenant.id}/roots/${tenant.root.did}`, { key: svc.adminKey });
      expect(removed.status).toBe(204);
      await expectRealAsDryRun(tenant.id, await verify(node2), await verify(node2, true), 'UNTRUSTED_ROOT', 'C');
    } finally {
      await other.close();
    }
  });

  it('a key bound to another tool server, revoked on another node: RECEIPT_REVOKED, not TOOL_SERVER_MISMATCH', async () => {
    const { tenant, chain } = await tenantWithChain('bound-elsewhere');
    const bound = await svc.call('POST', `/v1/admin/tenants/${tenant.id}/api-keys`, {
      key: svc.adminKey,
      json: { scopes: ['verify'], tool_server: 'mcp://another-server' },
    });
    expect(bound.status).toBe(201);
    let seq = 0;
    const verify = (call: Call, dryRun = false) => {
      const { bundle } = chain.invoke({ tool: 'lookup', ...DECLARED }, { iat: T0, jti: `inv:bound:${++seq}` });
      return call('POST', dryRun ? '/v1/verify/dry-run' : '/v1/verify', { key: bound.body.key as string, json: bundle });
    };
    const other = await secondNodeApp(svc);
    try {
      const node2 = callerOf(other.app);
      expect((await verify(node2)).body.error.code).toBe('TOOL_SERVER_MISMATCH');
      const revoked = await svc.call('POST', `/v1/delegations/${chain.drs[1]!.hash}/revoke`, {
        key: tenant.keys.issue,
        json: { confirm: true, reason: 'compromised' },
      });
      expect(revoked.status).toBe(200);
      await expectRealAsDryRun(tenant.id, await verify(node2), await verify(node2, true), 'RECEIPT_REVOKED', 'F');
    } finally {
      await other.close();
    }
  });

  it('a refusal of the chain itself (blocks A-C) is stored as before, whatever the chain’s state', async () => {
    const { tenant, chain } = await tenantWithChain('bad-signature');
    const revoked = await svc.call('POST', `/v1/delegations/${chain.drs[0]!.hash}/revoke`, {
      key: tenant.keys.issue,
      json: { confirm: true, reason: 'compromised' },
    });
    expect(revoked.status).toBe(200);
    // An invocation signed by a key that is not the chain's holder: refused before block D.
    const forged = buildChain([policy, policy], { keys: [tenant.root, generateKeyPair(), generateKeyPair()] });
    const { invocation } = forged.invoke({ tool: 'lookup', ...DECLARED }, { iat: T0, jti: 'inv:forged' });
    const r = await svc.call('POST', '/v1/verify', {
      key: tenant.keys.verify,
      json: makeBundle(invocation, chain.drs),
    });
    expect(r.status).toBe(403);
    const row = await lastDenial(tenant.id);
    expect(row.code).toBe(r.body.error.code);
    expect(['A', 'B', 'C']).toContain(row.block);
  });
});

describe('a chain that changes again during the round decided on fresh facts', () => {
  for (const change of ['a record revoked', 'the root removed'] as const) {
    it(`(${change}) answers 503, stores nothing, and forgets it: the resend needs one statement`, async () => {
      const { tenant, chain, verify } = await tenantWithChain(`stale-twice-${change.split(' ')[1]}`);
      // Node 2's statements are watched: after the first STALE answer, the chain changes again.
      const store = await openStore({ databaseUrl: svc.url, max: 4 });
      const query = store.query;
      let statements = 0;
      let changed = false;
      (store as { query: typeof query }).query = async (text, params) => {
        const rows = await query(text, params);
        if (text.includes('baton_verify_batch')) {
          statements++;
          if (!changed && JSON.stringify(rows).includes('STALE')) {
            changed = true;
            if (change === 'a record revoked')
              await query('update delegations set revoked_at = now() where tenant_id = $1 and hash = $2', [tenant.id, chain.drs[1]!.hash]);
            else await query('delete from trusted_roots where tenant_id = $1', [tenant.id]);
          }
        }
        return rows;
      };
      const deps = await createServiceDeps({
        store,
        config: svc.deps.config,
        log: silentLogger,
        masterKey: svc.deps.masterKey,
        now: svc.deps.now,
      });
      const node2 = callerOf(createApp(deps));
      try {
        expect((await verify(node2)).body.error.code).toBe('TOOL_UNDECLARED'); // node 2 caches the chain
        const revoked = await svc.call('POST', `/v1/delegations/${chain.drs[0]!.hash}/revoke`, {
          key: tenant.keys.issue,
          json: { confirm: true, reason: 'compromised' },
        });
        expect(revoked.status).toBe(200);
        const before = await denialCount(tenant.id);
        statements = 0;
        const raced = await verify(node2);
        expect([raced.status, raced.body.error.code]).toEqual([503, 'STORAGE_UNAVAILABLE']);
        expect(statements).toBe(2);
        expect(await denialCount(tenant.id)).toBe(before);
        // What the last round found stale was forgotten too: the resend is decided in one statement.
        statements = 0;
        const resent = await verify(node2);
        expect(resent.status).toBe(403);
        expect(['RECEIPT_REVOKED', 'UNTRUSTED_ROOT']).toContain(resent.body.error.code);
        expect(statements).toBe(1);
      } finally {
        await store.close();
      }
    });
  }
});

async function denialCount(tenantId: string): Promise<number> {
  return (await svc.store.db.select().from(denials).where(eq(denials.tenantId, tenantId))).length;
}
