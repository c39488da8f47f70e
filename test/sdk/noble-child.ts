/**
 * Runs the SDK where native Ed25519 is missing: node:crypto is hidden from
 * src/protocol/ed25519.ts (it finds it through process.getBuiltinModule), so
 * @noble/ed25519 generates, signs and verifies. Run by noble.test.ts as
 *   node --import tsx/esm noble-child.ts <baseUrl> <root seed hex> <verify key>
 * and prints one JSON line.
 */
delete (process as { getBuiltinModule?: unknown }).getBuiltinModule;

const [baseUrl, rootSeedHex, verifyKey] = process.argv.slice(2) as [string, string, string];
const sdk = await import('../../src/sdk/index.js');

const root = sdk.keyPairFromSeed(Uint8Array.from(Buffer.from(rootSeedHex, 'hex')));
const a = sdk.generateKeyPair();
const b = sdk.generateKeyPair();
const rootDr = sdk.createRootDelegation({ issuer: root, audience: a.did, policy: { allowed_tools: ['search'], max_calls: 3 } });
const sub = sdk.createSubDelegation({ parent: rootDr, issuer: a, audience: b.did, policy: { allowed_tools: ['search'], max_calls: 1 } });
const client = new sdk.BatonClient({ baseUrl, apiKey: verifyKey });
await client.submit([rootDr, sub], { apiKey: null });
const inv = sdk.createInvocation({
  chain: [rootDr, sub],
  invoker: b,
  args: { tool: 'search', pii_access: false, write_access: false },
  toolServer: 'mcp://search',
});
const bundle = sdk.makeBundle(inv, [rootDr, sub]);
const offline = sdk.verifyChain(bundle, { now: Math.floor(Date.now() / 1000), trustedRoots: [root.did] });
const online = await client.verify(bundle);
const fixed = sdk.createRootDelegation({ issuer: root, audience: a.did, policy: {}, iat: 1_800_000_000, jti: 'dr:fixed' });

process.stdout.write(
  `${JSON.stringify({
    backend: sdk.defaultEd25519Backend,
    offline: offline.valid,
    online: online.valid,
    serviceReceipt: online.valid ? online.service_receipt?.jws : null,
    serviceReceiptValid:
      online.valid && online.service_receipt ? (await client.verifyServiceReceipt(online.service_receipt.jws)).valid : null,
    fixedJws: fixed.jws,
    aDid: a.did,
  })}\n`,
);
