/**
 * npm run bench:protocol
 *
 * Offline verification of a 3-hop chain plus invocation, cold (every DR
 * signature checked) and warm (verified DRs cached by hash), printed beside
 * the raw native Ed25519 verify rate measured in the same run. These
 * machines are noisy, so the ratios are what to compare across runs.
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
  const start = process.hrtime.bigint();
  const deadline = start + BigInt(Math.round(SECONDS * 1e9));
  let now = start;
  while (now < deadline) {
    for (let i = 0; i < 50; i++) fn();
    n += 50;
    now = process.hrtime.bigint();
  }
  const seconds = Number(now - start) / 1e9;
  return { name, ops: n / seconds, usPerOp: (seconds * 1e6) / n };
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

  const rows = [raw, ruled, noble, cold, warm];
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
}

main();
