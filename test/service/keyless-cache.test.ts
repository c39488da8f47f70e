/**
 * The process-wide verified-DR cache holds only records of chains established under a root a
 * tenant trusts. An outside probe sent 1,200 keyless submissions of fresh chains signed by
 * throwaway keys (each record ~62 KB): every one was refused UNTRUSTED_ROOT, yet their records
 * stayed cached (~406 MB of heap), and the process died of heap exhaustion under a 384 MB limit.
 * On real PostgreSQL, in process.
 */
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import type * as JwsModule from '../../src/protocol/jws.js';

const signatures = vi.hoisted(() => ({ checked: 0 }));
vi.mock('../../src/protocol/jws.js', async (importOriginal) => {
  const actual = await importOriginal<typeof JwsModule>();
  return {
    ...actual,
    signatureValid: (...args: Parameters<typeof actual.signatureValid>) => {
      signatures.checked++;
      return actual.signatureValid(...args);
    },
  };
});

const { generateKeyPair } = await import('../../src/sdk/keys.js');
const { createInvocation, createRootDelegation, createSubDelegation, makeBundle } = await import('../../src/sdk/records.js');
const { setupTenant, startTestService } = await import('../support/service.js');
const { ARGS, T0, TOOL_SERVER } = await import('../support/fixtures.js');

type Service = Awaited<ReturnType<typeof startTestService>>;
type Tenant = Awaited<ReturnType<typeof setupTenant>>;
type KeyPair = ReturnType<typeof generateKeyPair>;

let svc: Service;
let tenant: Tenant;

beforeAll(async () => {
  svc = await startTestService();
  tenant = await setupTenant(svc);
});
afterAll(async () => svc?.close());

/** A root (issued by `rootKey`) and two hand-offs below it, each record carrying `tools`. */
function chainOf(rootKey: KeyPair, tools: readonly string[]) {
  const [a, b, c] = [generateKeyPair(), generateKeyPair(), generateKeyPair()];
  const policy = { allowed_tools: [...tools], max_cost_usd: 10 };
  const root = createRootDelegation({ issuer: rootKey, audience: a.did, policy, iat: T0, nbf: T0 - 10, exp: T0 + 3600 });
  const mid = createSubDelegation({ parent: root, issuer: a, audience: b.did, policy, iat: T0 });
  const leaf = createSubDelegation({ parent: mid, issuer: b, audience: c.did, policy, iat: T0 });
  return Object.assign([root, mid, leaf], { invoker: c });
}

const bigTools = (n: number) => Array.from({ length: 200 }, (_, k) => `tool_${n}_${k}_`.padEnd(200, 'x'));

describe('keyless submissions and the process-wide delegation cache', () => {
  it('chains under a root no tenant trusts are refused and leave the cache as it was', async () => {
    const cache = svc.deps.drCache;
    const before = { size: cache.size, bytes: cache.bytes };
    for (let n = 0; n < 4; n++) {
      const chain = chainOf(generateKeyPair(), bigTools(n));
      const r = await svc.call('POST', '/v1/delegations', { json: { receipts: chain.map((d) => d.jws) } });
      expect(r.status).toBe(422);
      expect(r.body.error.code).toBe('UNTRUSTED_ROOT');
      for (const dr of chain) expect(cache.getByJws(dr.jws)).toBeUndefined();
    }
    // Records below a parent nobody holds for their issuer: refused before any trust is established.
    const orphan = chainOf(generateKeyPair(), ['web_search']).slice(1);
    const r = await svc.call('POST', '/v1/delegations', { json: { receipts: orphan.map((d) => d.jws) } });
    expect(r.status).toBe(422);
    expect(r.body.error.code).toBe('BUNDLE_INCOMPLETE');
    expect({ size: cache.size, bytes: cache.bytes }).toEqual(before);
  });

  it('a chain under a trusted root is cached, each signature checked once, and a verify through it checks only the invocation', async () => {
    const cache = svc.deps.drCache;
    const sizeBefore = cache.size;
    const chain = chainOf(tenant.root, ['web_search', 'file_read']);
    signatures.checked = 0;
    const r = await svc.call('POST', '/v1/delegations', { json: { receipts: chain.map((d) => d.jws) } });
    expect(r.status).toBe(201);
    expect(signatures.checked).toBe(chain.length);
    expect(cache.size).toBe(sizeBefore + chain.length);
    for (const dr of chain) expect(cache.getByJws(dr.jws)?.hash).toBe(dr.hash);
    expect(cache.bytes).toBeGreaterThan(0);

    // The hot path: a verify by reference finds every record cached.
    const invocation = createInvocation({ chain, invoker: chain.invoker, args: ARGS, toolServer: TOOL_SERVER, iat: T0 });
    signatures.checked = 0;
    const v = await svc.call('POST', '/v1/verify', { key: tenant.keys.verify, json: makeBundle(invocation, chain, 'reference') });
    expect(v.status).toBe(200);
    expect(signatures.checked).toBe(1);
  });
});
