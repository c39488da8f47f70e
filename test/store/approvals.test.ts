/**
 * Approval pages on real PostgreSQL: a page of a tenant's approvals is read in
 * index order (migration 0029), with and without a status filter, so its cost
 * does not grow with every approval the tenant ever opened.
 */
import { sql } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Store } from '../../src/store/db.js';
import { approvals } from '../../src/store/schema/index.js';
import { approvalsPage, listApprovals, pendingUnderRootQuery } from '../../src/store/approvals.js';
import type { ApprovalStatus } from '../../src/protocol/lists.js';
import { freshDatabase } from '../setup/db.js';
import { seedTenant } from '../support/fixtures.js';

interface PlanNode {
  'Node Type': string;
  'Index Name'?: string;
  'Relation Name'?: string;
  'Index Cond'?: string;
  Plans?: PlanNode[];
}
const nodesOf = (n: PlanNode): PlanNode[] => [n, ...(n.Plans ?? []).flatMap(nodesOf)];

/** The plan of a query as drizzle renders it, planned as if the table were large (no sequential or bitmap scans). */
async function explained(text: string, params: unknown[]): Promise<PlanNode> {
  return store.db.transaction(async (tx) => {
    await tx.execute(sql`set local enable_seqscan = off`);
    await tx.execute(sql`set local enable_bitmapscan = off`);
    const literal = params.map((p) => (typeof p === 'number' ? String(p) : `'${String(p).replace(/'/g, "''")}'`));
    const query = text.replace(/\$(\d+)/g, (_, n: string) => literal[Number(n) - 1]!);
    const result = await tx.execute(sql.raw(`explain (format json) ${query}`));
    return (result as unknown as { 'QUERY PLAN': { Plan: PlanNode }[] }[])[0]!['QUERY PLAN'][0]!.Plan;
  });
}

let store: Store;
let drop: () => Promise<void>;
let tenantId: string;

beforeAll(async () => {
  ({ store, drop } = await freshDatabase());
  tenantId = await seedTenant(store.db, 'paged');
  const statuses: ApprovalStatus[] = ['pending', 'rejected', 'expired'];
  await store.db.insert(approvals).values(
    Array.from({ length: 300 }, (_, i) => ({
      tenantId,
      id: `apr_${String(i).padStart(4, '0')}`,
      binding: `sha256:${i}`,
      status: statuses[i % 3]!,
      requestedBy: 'did:key:zAgent',
      invocationJti: `inv-${i}`,
      drChain: ['sha256:root'],
      toolServer: 'mcp://crm',
      catalogVersion: 1,
      rule: 'write',
      explanation: 'a write needs a human',
      createdAt: 1_800_000_000 + Math.floor(i / 4), // ties on created_at: the id orders them
      expiresAt: 1_800_003_600,
      ...(i % 3 === 1 ? { decidedBy: 'key_h', actor: 'alice', reason: 'no', decidedAt: 1_800_000_100 } : {}),
    })),
  );
  await store.db.execute(sql`analyze approvals`);
});
afterAll(() => drop?.());

describe('a page of approvals', () => {
  it.each([undefined, 'rejected', 'pending'] as const)(
    'status %s: read from an index in page order, no sort of the tenant rows',
    async (status) => {
      const from = { createdAt: 1_800_000_010, id: 'apr_0040' };
      const { sql: text, params } = approvalsPage(store.db, tenantId, status, from, 100, 1_800_000_000).toSQL();
      // Whatever the table's size, the planner must be able to read a page in order; a Sort would read it all.
      const plan = await explained(text, params);
      const nodes = nodesOf(plan);
      expect(nodes.map((n) => n['Node Type'])).not.toContain('Sort');
      expect(nodes.map((n) => n['Node Type'])).not.toContain('Incremental Sort');
      expect(nodes.some((n) => n['Index Name'] === (status ? 'approvals_tenant_status_idx' : 'approvals_tenant_created_idx'))).toBe(true);
    },
  );

  it('pages follow (created_at, id) across ties, each approval once', async () => {
    const seen: string[] = [];
    let after: string | undefined;
    for (;;) {
      const page = await listApprovals(store.db, tenantId, undefined, after, 37, 1_800_000_000);
      if (!page || page.length === 0) break;
      seen.push(...page.map((a) => a.id));
      after = page[page.length - 1]!.id;
    }
    expect(seen).toEqual(Array.from({ length: 300 }, (_, i) => `apr_${String(i).padStart(4, '0')}`));
  });
});

describe('the count of approvals waiting under a root (the cap)', () => {
  it('reads the live ones by index, the deadline part of the index condition: rows past it are not read', async () => {
    const { sql: text, params } = pendingUnderRootQuery(store.db, tenantId, 'sha256:root', 1_800_000_100, 1).toSQL();
    const plan = await explained(text, params);
    const scans = nodesOf(plan).filter((n) => n['Index Name'] === 'approvals_pending_by_root');
    expect(scans).toHaveLength(1);
    expect(scans[0]!['Index Cond']).toMatch(/expires_at/);
  });

  it("reads no delegation, with or without a delegation to count through: a revocation ends the approvals through it, and a deadline is at most the chain's exp", async () => {
    for (const through of [undefined, 'sha256:dr']) {
      const { sql: text, params } = pendingUnderRootQuery(store.db, tenantId, 'sha256:root', 1_800_000_100, 1, through).toSQL();
      const nodes = nodesOf(await explained(text, params));
      expect(nodes.filter((n) => n['Relation Name'] !== undefined && n['Relation Name'] !== 'approvals')).toEqual([]);
      expect(nodes.filter((n) => n['Index Name'] === 'approvals_pending_by_root')).toHaveLength(1);
    }
  });
});
