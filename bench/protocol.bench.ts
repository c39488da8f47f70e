/**
 * npm run bench:protocol
 *
 * Offline verification of a 3-hop chain plus invocation, cold (every DR
 * signature checked) and warm (verified DRs cached by hash), printed beside
 * the raw native Ed25519 verify rate measured in the same run, and a 16-hop
 * chain sent by reference with its DRs cached (the hot path's per-link work).
 * Times are CPU time of this process (process.cpuUsage), so other work on a
 * shared machine inflates them less; the ratios are still what to compare.
 */
import { createPublicKey, verify as nodeVerify } from 'node:crypto';
import { DelegationCache, verifyChain } from '../src/protocol/chain.js';
import { signEd25519, verifyEd25519 } from '../src/protocol/ed25519.js';
import { generateKeyPair } from '../src/sdk/keys.js';
import { createInvocation, createRootDelegation, createSubDelegation, makeBundle } from '../src/sdk/records.js';

const SECONDS = Number(process.env['BENCH_SECONDS'] ?? 2);

interface Result {
  name: string;
  ops: number;
  usPerOp: number;
}

function measure(name: string, fn: () => void): Result {
  for (let i = 0; i < 200; i++) fn(); // warm up the JIT
  let n = 0;
  const cpuMicros = () => {
    const u = process.cpuUsage();
    return u.user + u.system;
  };
  const start = cpuMicros();
  const budget = SECONDS * 1e6;
  let used = 0;
  while (used < budget) {
    for (let i = 0; i < 50; i++) fn();
    n += 50;
    used = cpuMicros() - start;
  }
  return { name, ops: (n * 1e6) / used, usPerOp: used / n };
}

function buildBundle() {
  const [operator, a, b, c] = [generateKeyPair(), generateKeyPair(), generateKeyPair(), generateKeyPair()];
  const iat = Math.floor(Date.now() / 1000);
  const policy = { allowed_tools: ['web_search', 'file_read'], max_cost_usd: 10, max_calls: 1000 };
  const root = createRootDelegation({ issuer: operator!, audience: a!.did, policy, iat });
  const hop2 = createSubDelegation({ parent: root, issuer: a!, audience: b!.did, policy: { ...policy, max_cost_usd: 5 }, iat });
  const hop3 = createSubDelegation({
    parent: hop2,
    issuer: b!,
    audience: c!.did,
    policy: { ...policy, allowed_tools: ['web_search'], max_cost_usd: 1 },
    iat,
  });
  const chain = [root, hop2, hop3];
  const invocation = createInvocation({
    chain,
    invoker: c!,
    args: { tool: 'web_search', query: 'baton', estimated_cost_usd: 0.25, pii_access: false, write_access: false },
    toolServer: 'mcp://bench',
    iat,
  });
  return { bundle: makeBundle(invocation, chain), root: operator!.did, now: iat };
}

/** A chain of `hops` DRs sent by reference (receipts empty), resolved from a map as the service resolves stored DRs. */
function buildDeepBundle(hops: number) {
  const keys = Array.from({ length: hops + 1 }, () => generateKeyPair());
  const iat = Math.floor(Date.now() / 1000);
  const policy = { allowed_tools: ['web_search', 'file_read'], max_cost_usd: 10, max_calls: 1000 };
  const chain = [createRootDelegation({ issuer: keys[0]!, audience: keys[1]!.did, policy, iat })];
  for (let i = 1; i < hops; i++) {
    chain.push(createSubDelegation({ parent: chain[i - 1]!, issuer: keys[i]!, audience: keys[i + 1]!.did, policy, iat }));
  }
  const invocation = createInvocation({
    chain,
    invoker: keys[hops]!,
    args: { tool: 'web_search', query: 'baton', estimated_cost_usd: 0.25, pii_access: false, write_access: false },
    toolServer: 'mcp://bench',
    iat,
  });
  const stored = new Map(chain.map((d) => [d.hash as string, d.jws]));
  return {
    bundle: makeBundle(invocation, chain, 'reference'),
    root: keys[0]!.did,
    now: iat,
    resolveDelegation: (h: string) => stored.get(h),
  };
}

function main(): void {
  const { bundle, root, now } = buildBundle();
  const opts = { now, trustedRoots: [root] };
  if (!verifyChain(bundle, opts).valid) throw new Error('benchmark bundle does not verify; fix the bench before trusting numbers');

  // Baseline: Node's own Ed25519 verify on one 200-byte message, no pre-checks.
  const key = generateKeyPair();
  const message = new Uint8Array(200).fill(7);
  const signature = signEd25519(key.seed, message);
  const keyObject = createPublicKey({
    key: { kty: 'OKP', crv: 'Ed25519', x: Buffer.from(key.publicKey).toString('base64url') },
    format: 'jwk',
  });
  const raw = measure('raw node:crypto Ed25519 verify', () => {
    if (!nodeVerify(null, message, keyObject, signature)) throw new Error('raw verify failed');
  });
  const ruled = measure('Baton Ed25519 rule (native path)', () => {
    if (!verifyEd25519(key.publicKey, message, signature, 'native')) throw new Error('verify failed');
  });
  const noble = measure('Baton Ed25519 rule (noble path)', () => {
    if (!verifyEd25519(key.publicKey, message, signature, 'noble')) throw new Error('verify failed');
  });
  const cold = measure('verifyChain 3-hop, cold (4 signatures)', () => {
    if (!verifyChain(bundle, opts).valid) throw new Error('denied');
  });
  const cache = new DelegationCache();
  const warm = measure('verifyChain 3-hop, DRs cached (1 signature)', () => {
    if (!verifyChain(bundle, { ...opts, cache }).valid) throw new Error('denied');
  });

  const deep = buildDeepBundle(16);
  const deepCache = new DelegationCache();
  const deepOpts = { now: deep.now, trustedRoots: [deep.root], resolveDelegation: deep.resolveDelegation, cache: deepCache };
  const deepWarm = measure('verifyChain 16-hop by reference, DRs cached', () => {
    const d = verifyChain(deep.bundle, deepOpts);
    if (!d.valid) throw new Error(`denied: ${JSON.stringify(d.violations)}`);
  });

  const rows = [raw, ruled, noble, cold, warm, deepWarm];
  console.log(`\nbench:protocol (${SECONDS}s per case, node ${process.version})\n`);
  console.log(`${'case'.padEnd(46)} ${'ops/s'.padStart(10)} ${'us/op'.padStart(9)}`);
  for (const r of rows) console.log(`${r.name.padEnd(46)} ${r.ops.toFixed(0).padStart(10)} ${r.usPerOp.toFixed(1).padStart(9)}`);
  console.log('\nratios against raw native verify measured above:');
  console.log(`  rule overhead (native path)      ${(raw.ops / ruled.ops).toFixed(2)}x the cost of a raw verify`);
  console.log(`  noble path                       ${(raw.ops / noble.ops).toFixed(1)}x slower than native`);
  console.log(
    `  cold chain (ideal = 4 verifies)  ${((raw.usPerOp * 4) / cold.usPerOp).toFixed(2)} of the ideal rate (${(cold.usPerOp / raw.usPerOp).toFixed(1)} raw verifies per op)`,
  );
  console.log(
    `  warm chain (ideal = 1 verify)    ${(raw.usPerOp / warm.usPerOp).toFixed(2)} of the ideal rate (${(warm.usPerOp / raw.usPerOp).toFixed(1)} raw verifies per op)`,
  );
  console.log(
    `  16-hop warm (ideal = 1 verify)   ${(raw.usPerOp / deepWarm.usPerOp).toFixed(2)} of the ideal rate (${(deepWarm.usPerOp / raw.usPerOp).toFixed(1)} raw verifies per op)`,
  );
}

main();
