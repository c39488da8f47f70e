/** `baton revoke`: by API key (--reason) and by signed revocation (--key); cascade, idempotency, refusals. */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BatonClient } from '../../src/sdk/client.js';
import { startLiveService, type LiveService } from '../sdk/live-service.js';
import { storedChain, writeKeyFile } from '../sdk/chains.js';
import { run, tempDir } from './helpers.js';

let live: LiveService;
let dir: string;
let S: string[];
beforeAll(async () => {
  live = await startLiveService();
  dir = tempDir();
  S = ['--server', live.baseUrl];
});
afterAll(async () => {
  await live?.close();
});

const audit = () => new BatonClient({ baseUrl: live.baseUrl, apiKey: live.tenant.keys.audit });

describe('baton revoke', () => {
  it('with an API key and --reason: revokes, cascades, and is idempotent', async () => {
    const c = await storedChain(live);
    const r = await run(['revoke', c.root.hash, '--reason', 'agent A compromised', ...S, '--api-key', live.tenant.keys.issue]);
    expect(r.code, r.err).toBe(0);
    expect(r.out).toMatch(/^REVOKED: sha256:/);
    expect(r.out).toMatch(/reason {11}agent A compromised/);
    expect(r.out).toMatch(/descendants {6}1 more delegation record/);
    expect(r.out).toMatch(/service receipt {2}#\d+/);
    expect((await audit().getDelegation(c.sub.hash)).status).toBe('revoked');

    const again = await run(['revoke', c.root.hash, '--reason', 'again', ...S, '--api-key', live.tenant.keys.issue, '--json']);
    expect(again.code).toBe(0);
    expect(JSON.parse(again.out)).toMatchObject({
      hash: c.root.hash,
      already_revoked: true,
      reason: 'agent A compromised',
      descendants: 1,
    });
  });

  it('prints a reason carrying terminal controls as visible escapes, never raw', async () => {
    const c = await storedChain(live);
    const reason = 'a\u001b[2J\u001b[31mred\u202e';
    const r = await run(['revoke', c.root.hash, '--reason', reason, ...S, '--api-key', live.tenant.keys.issue]);
    expect(r.code, r.err).toBe(0);
    expect(r.out).toContain('a\\u001b[2J\\u001b[31mred\\u202e');
    expect(r.out).not.toMatch(/[\u001b\u202e]/);
    const json = await run(['revoke', c.root.hash, '--reason', 'again', ...S, '--api-key', live.tenant.keys.issue, '--json']);
    expect(JSON.parse(json.out).reason).toBe(reason);
    expect(json.out).not.toMatch(/[\u001b\u202e]/);
  });

  it('a reason with a newline stays on its line, in the revoke answer and in baton chain', async () => {
    const c = await storedChain(live);
    const reason = 'compromised\n  descendants      0 more (a line the reason wrote)';
    const r = await run(['revoke', c.root.hash, '--reason', reason, ...S, '--api-key', live.tenant.keys.issue]);
    expect(r.code, r.err).toBe(0);
    expect(r.out).toContain('  reason           compromised\\u000a  descendants      0 more (a line the reason wrote)');
    expect(r.out.split('\n').filter((l) => l.startsWith('  descendants'))).toEqual([
      '  descendants      1 more delegation record(s) under it are denied too',
    ]);
    const chain = await run(['chain', c.sub.hash, ...S, '--api-key', live.tenant.keys.audit]);
    expect(chain.code, chain.err).toBe(0);
    expect(chain.out).toMatch(/revoked .*: compromised\\u000a {2}descendants {6}0 more \(a line the reason wrote\)/);
    expect(chain.out).not.toMatch(/^ *descendants/m);
  });

  it('with --key: signs a revocation record; the DR holder itself is refused (exit 1)', async () => {
    const c = await storedChain(live);
    const holder = await run(['revoke', c.sub.hash, '--key', writeKeyFile(dir, c.b), ...S]);
    expect(holder.code).toBe(1);
    expect(holder.err).toMatch(/FORBIDDEN \[HTTP 403\]/);
    expect(holder.err).toMatch(/cannot revoke the grant it received/);

    // BATON_API_KEY in the environment is not sent on this path.
    const r = await run(['revoke', c.sub.hash, '--key', writeKeyFile(dir, c.a), '--reason', 'no longer needed', ...S], {
      BATON_API_KEY: live.tenant.keys.audit,
    });
    expect(r.code, r.err).toBe(0);
    expect(r.out).toContain(`by               ${c.a.did}`);
    expect(r.err).toMatch(/signing a revocation/);
    expect((await audit().getDelegation(c.sub.hash)).revoked_reason).toBe('no longer needed');
  });

  it("with --key on a record a key revoked first: names the revoker by kind, not the tenant's reason or key id", async () => {
    const c = await storedChain(live);
    const byKey = await run(['revoke', c.sub.hash, '--reason', 'ticket SEC-77', ...S, '--api-key', live.tenant.keys.issue, '--json']);
    expect(byKey.code, byKey.err).toBe(0);
    const keyId = (JSON.parse(byKey.out) as { revoked_by: { id: string } }).revoked_by.id;
    const r = await run(['revoke', c.sub.hash, '--key', writeKeyFile(dir, c.a), ...S]);
    expect(r.code, r.err).toBe(0);
    expect(r.out).toMatch(/^ALREADY REVOKED: sha256:/);
    expect(r.out).toContain('by               an API key of the tenant');
    // The reason was given and withheld from this caller, not absent.
    expect(r.out).toContain('reason           (not shown to this caller: revoked by an API key of the tenant)');
    expect(r.out).not.toContain('none given');
    expect(r.out).not.toContain(keyId);
    expect(r.out).not.toContain('SEC-77');
  });

  it("a record the admin key revoked is the operator's doing, not the tenant's, with the key and without it", async () => {
    const c = await storedChain(live);
    const byAdmin = await run(['revoke', c.sub.hash, '--reason', 'operator sweep', ...S, '--api-key', live.svc.adminKey]);
    expect(byAdmin.code, byAdmin.err).toBe(0);
    expect(byAdmin.out).toMatch(/by {15}the operator's admin key \(.+\)/);
    expect(byAdmin.out).toContain('reason           operator sweep');
    expect(byAdmin.out).not.toContain('of the tenant');

    const r = await run(['revoke', c.sub.hash, '--key', writeKeyFile(dir, c.a), ...S]);
    expect(r.code, r.err).toBe(0);
    expect(r.out).toMatch(/^ALREADY REVOKED: sha256:/);
    expect(r.out).toContain("by               the operator's admin key\n");
    expect(r.out).toContain("reason           (not shown to this caller: revoked by the operator's admin key)");
    expect(r.out).not.toContain('of the tenant');
    expect(r.out).not.toContain('none given');
    expect(r.out).not.toContain('operator sweep');
  });

  it('a signed revocation without a reason has none: "(none given)", not "not shown"', async () => {
    const c = await storedChain(live);
    const r = await run(['revoke', c.sub.hash, '--key', writeKeyFile(dir, c.a), ...S]);
    expect(r.code, r.err).toBe(0);
    expect(r.out).toContain(`by               ${c.a.did}`);
    expect(r.out).toContain('reason           (none given)');
  });

  it('refusals exit 1: unknown DR (404), a key without issue scope (403), no key at all (401)', async () => {
    const c = await storedChain(live);
    const unknown = await run(['revoke', `sha256:${'1'.repeat(64)}`, '--reason', 'x', ...S, '--api-key', live.tenant.keys.issue]);
    expect(unknown.code).toBe(1);
    expect(unknown.err).toMatch(/NOT_FOUND \[HTTP 404\]/);
    const scope = await run(['revoke', c.sub.hash, '--reason', 'x', ...S, '--api-key', live.tenant.keys.audit, '--json']);
    expect(scope.code).toBe(1);
    expect(JSON.parse(scope.out)).toMatchObject({ error: { code: 'FORBIDDEN' }, status: 403 });
    const none = await run(['revoke', c.sub.hash, '--reason', 'x', ...S]);
    expect(none.code).toBe(1);
    expect(none.err).toMatch(/UNAUTHORIZED/);
  });

  it('unusable input exits 2: no hash, a bad hash, no --reason and no --key, a blank reason', async () => {
    const c = await storedChain(live);
    for (const argv of [
      ['revoke'],
      ['revoke', 'dr:abc', '--reason', 'x'],
      ['revoke', c.sub.hash],
      ['revoke', c.sub.hash, '--reason', '  '],
    ]) {
      const r = await run([...argv, ...S]);
      expect(r.code, argv.join(' ')).toBe(2);
    }
    expect((await run(['revoke', c.sub.hash, ...S])).err).toMatch(/--reason .*or --key/);
  });
});
