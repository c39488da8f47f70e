/**
 * Tenant setup through the admin API, delegation chains built and signed
 * with the SDK (registered through POST /v1/delegations, as an agent
 * would), and invocations pre-signed and pre-serialised before a phase.
 */
import { generateKeyPair, type KeyPair } from '../../src/sdk/keys.js';
import { createInvocation, createRootDelegation, createSubDelegation, makeBundle, type SignedDelegation } from '../../src/sdk/records.js';
import type { Policy } from '../../src/protocol/policy.js';

export interface Tenant {
  readonly id: string;
  readonly operator: KeyPair;
  readonly verifyKey: string;
  readonly verifyKeyId: string;
}

async function call(
  url: string,
  method: string,
  path: string,
  key: string | undefined,
  json: unknown,
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- admin responses are read ad hoc by the bench
): Promise<{ status: number; body: any }> {
  const send = () =>
    fetch(`${url}${path}`, {
      method,
      headers: { 'content-type': 'application/json', ...(key ? { authorization: `Bearer ${key}` } : {}) },
      body: JSON.stringify(json),
    });
  // A keep-alive socket the server closed while idle (e.g. while the bench signed chains)
  // fails before any answer; every call here is idempotent, so send it once more.
  const res = await send().catch(send);
  const text = await res.text();
  let body: unknown = text;
  try {
    body = JSON.parse(text);
  } catch {
    // keep text
  }
  return { status: res.status, body };
}

/** A tenant, one trusted root (the operator key) and a `verify` API key, all through the admin API. */
export async function setupTenant(url: string, adminKey: string, name: string): Promise<Tenant> {
  const t = await call(url, 'POST', '/v1/admin/tenants', adminKey, { name });
  if (t.status !== 201) throw new Error(`create tenant: HTTP ${t.status} ${JSON.stringify(t.body)}`);
  const id = t.body.id as string;
  const operator = generateKeyPair();
  const r = await call(url, 'POST', `/v1/admin/tenants/${id}/roots`, adminKey, { did: operator.did, label: 'bench operator' });
  if (r.status !== 201) throw new Error(`add root: HTTP ${r.status} ${JSON.stringify(r.body)}`);
  const k = await call(url, 'POST', `/v1/admin/tenants/${id}/api-keys`, adminKey, { scopes: ['verify'], name: 'bench verify' });
  if (k.status !== 201) throw new Error(`api key: HTTP ${k.status} ${JSON.stringify(k.body)}`);
  return { id, operator, verifyKey: k.body.key as string, verifyKeyId: k.body.id as string };
}

export interface Chain {
  /** Root first. */
  readonly drs: readonly SignedDelegation[];
  /** Holder of the leaf: signs the invocations. */
  readonly holder: KeyPair;
}

/** Every hop counted (max_calls far above what a run can use) and a tool list to evaluate. */
export const BENCH_POLICY: Policy = { allowed_tools: ['web_search', 'file_read'], max_calls: 1_000_000_000 };
export const BENCH_ARGS = { tool: 'web_search', query: 'baton bench', pii_access: false, write_access: false };
export const TOOL_SERVER = 'mcp://bench';

/** Extends `from` (or starts at the operator) by `hops` delegations. */
function extend(operator: KeyPair, from: Chain | undefined, hops: number, policy: Policy): Chain {
  const drs = [...(from?.drs ?? [])];
  let holder = from?.holder;
  for (let i = 0; i < hops; i++) {
    const next = generateKeyPair();
    const parent = drs[drs.length - 1];
    drs.push(
      parent === undefined || holder === undefined
        ? createRootDelegation({
            issuer: operator,
            audience: next.did,
            policy,
            nbf: Math.floor(Date.now() / 1000) - 60,
            exp: Math.floor(Date.now() / 1000) + 6 * 3600,
          })
        : createSubDelegation({ parent, issuer: holder, audience: next.did, policy }),
    );
    holder = next;
  }
  return { drs, holder: holder! };
}

/** `n` chains of `depth` DRs sharing nothing. */
export function independentChains(operator: KeyPair, n: number, depth: number, policy = BENCH_POLICY): Chain[] {
  return Array.from({ length: n }, () => extend(operator, undefined, depth, policy));
}

/** `n` chains of `depth` DRs that share only their root (a counted DR every call increments). */
export function siblingChains(operator: KeyPair, n: number, depth: number, policy = BENCH_POLICY): Chain[] {
  const root = extend(operator, undefined, 1, policy);
  return Array.from({ length: n }, () => extend(operator, root, depth - 1, policy));
}

/** Stores the chains through POST /v1/delegations (no key: the trusted root picks the tenant). */
export async function registerChains(url: string, chains: readonly Chain[]): Promise<void> {
  const seen = new Set<string>();
  for (const c of chains) {
    const fresh = c.drs.filter((d) => !seen.has(d.hash));
    if (fresh.length === 0) continue;
    // The stored ancestors plus the submitted tail must form the chain: send the whole chain.
    const r = await call(url, 'POST', '/v1/delegations', undefined, { receipts: c.drs.map((d) => d.jws) });
    if (r.status !== 201 && r.status !== 200) throw new Error(`register chain: HTTP ${r.status} ${JSON.stringify(r.body).slice(0, 500)}`);
    for (const d of c.drs) seen.add(d.hash);
  }
}

/**
 * `count` signed invocations through `chain` with `args`, serialised as by-reference verify
 * bodies. About 0.7 ms each on this machine: the SDK imports the invoker's key for every
 * signature (a reused native key signs in ~50 us), so a bench signs before it measures.
 */
export function presign(chain: Chain, count: number, args: Record<string, unknown> = BENCH_ARGS): Buffer[] {
  const out: Buffer[] = new Array(count);
  const iat = Math.floor(Date.now() / 1000);
  for (let i = 0; i < count; i++) {
    const inv = createInvocation({ chain: chain.drs, invoker: chain.holder, args, toolServer: TOOL_SERVER, iat });
    out[i] = Buffer.from(JSON.stringify(makeBundle(inv, chain.drs, 'reference')));
  }
  return out;
}

/** Pre-signs for every chain (one worker each): `perWorker` bodies, timing the work. */
export function presignAll(chains: readonly Chain[], perWorker: number): { bodies: Buffer[][]; signPerSecond: number } {
  const t0 = performance.now();
  const bodies = chains.map((c) => presign(c, perWorker));
  const s = (performance.now() - t0) / 1000;
  return { bodies, signPerSecond: (chains.length * perWorker) / s };
}
