/** `baton audit` over real HTTP: a clean log passes; a receipt deleted behind the service is reported (exit 1). */
import { join } from 'node:path';
import { readFileSync, writeFileSync } from 'node:fs';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { integrateOnce } from '../../src/service/log-integrator.js';
import { silentLogger } from '../../src/service/log.js';
import { recordServiceReceipt } from '../../src/service/service-receipts.js';
import { startLiveService, type LiveService } from '../sdk/live-service.js';
import { run, tempDir } from './helpers.js';

let live: LiveService;
let A: string[];
const ids: number[] = [];

beforeAll(async () => {
  live = await startLiveService();
  A = ['--server', live.baseUrl, '--api-key', live.tenant.keys.audit];
  for (let i = 0; i < 40; i++) {
    const r = await recordServiceReceipt(live.svc.store.db, live.svc.deps.signer, {
      tenantId: live.tenant.id,
      kind: 'invocation.denied',
      subject: `inv:${i}`,
      data: { i },
      now: live.svc.clock.now,
    });
    ids.push(r.id);
  }
  await integrateOnce({ store: live.svc.store, signer: live.svc.deps.signer, log: silentLogger, logName: live.svc.deps.config.tlogName });
});
afterAll(async () => {
  await live?.close();
});

describe('baton audit', () => {
  it('--help explains what is checked', async () => {
    const r = await run(['audit', '--help']);
    expect(r.code).toBe(0);
    expect(r.out).toMatch(/recomputes the Merkle root/);
    expect(r.out).toMatch(/re-verifies every decision's delegation chain/);
    expect((await run(['help'])).out + (await run(['--help'])).out).toMatch(/audit/);
  });

  it('passes on an intact log, with progress, pinned trust and a saved checkpoint', async () => {
    const dir = tempDir();
    const res = await fetch(`${live.baseUrl}/v1/log`, { headers: { authorization: `Bearer ${live.tenant.keys.audit}` } });
    const info = (await res.json()) as { origin: string; verifier_keys: string[] };
    writeFileSync(join(dir, 'trust.json'), JSON.stringify({ origin: info.origin, logKeys: info.verifier_keys }));
    const r = await run(['audit', ...A, '--trust', join(dir, 'trust.json'), '--save-checkpoint', join(dir, 'cp.txt')]);
    expect(r.code, r.out + r.err).toBe(0);
    expect(r.out).toMatch(/^OK: log .*, 40 entries/);
    expect(r.err).toMatch(/audit: 40\/40 entries checked/);
    expect(r.out).toMatch(/decisions checked +40/);
    expect(r.out).toMatch(/not checked +revocation, call counters and spend budgets/);
    expect(r.out).toMatch(/decision roots not checked for trust; pin them with --root/);
    expect(readFileSync(join(dir, 'cp.txt'), 'utf8')).toContain('\n40\n');
  });

  it('reports a service receipt deleted by a superuser behind the service (exit 1)', async () => {
    const su = postgres(live.svc.url, { max: 1, onnotice: () => {} });
    try {
      await su.begin(async (tx) => {
        await tx`set local session_replication_role = replica`;
        await tx`delete from receipts where id = ${ids[7]!}`;
      });
    } finally {
      await su.end();
    }
    const r = await run(['audit', ...A, '--json']);
    expect(r.code).toBe(1);
    const report = JSON.parse(r.out);
    expect(report.ok).toBe(false);
    expect(report.findings).toContainEqual(expect.objectContaining({ kind: 'missing', index: 7 }));
    const text = await run(['audit', ...A, '--quiet']);
    expect(text.out).toMatch(/missing +entry 7/);
    expect(text.err).toBe('');
  });

  it('needs an API key', async () => {
    const r = await run(['audit', '--server', live.baseUrl]);
    expect(r.code).toBe(2);
  });
});
