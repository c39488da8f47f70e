/** Stored chains on a live service, built with the SDK, for the SDK and CLI tests. */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Policy } from '../../src/protocol/policy.js';
import { BatonClient } from '../../src/sdk/client.js';
import { generateKeyPair, keyPairToFile, type KeyPair } from '../../src/sdk/keys.js';
import { createInvocation, createRootDelegation, createSubDelegation, makeBundle, type SignedDelegation } from '../../src/sdk/records.js';
import type { LiveService } from './live-service.js';

export const ARGS = { tool: 'search', estimated_cost_usd: 0.5, pii_access: false, write_access: false };

export interface StoredChain {
  readonly a: KeyPair;
  readonly b: KeyPair;
  readonly root: SignedDelegation;
  readonly sub: SignedDelegation;
  /** Signs and verifies (allowed) one invocation by B; returns its jti. */
  call(args?: Record<string, unknown>): Promise<string>;
}

/** operator (the tenant's trusted root) -> A -> B, submitted. */
export async function storedChain(
  live: LiveService,
  rootPolicy: Policy = { allowed_tools: ['search', 'fetch'], max_calls: 10, max_cost_usd: 1 },
  subPolicy: Policy = { allowed_tools: ['search'], max_calls: 5, max_cost_usd: 1 },
): Promise<StoredChain> {
  const a = generateKeyPair();
  const b = generateKeyPair();
  const root = createRootDelegation({ issuer: live.tenant.root, audience: a.did, policy: rootPolicy });
  const sub = createSubDelegation({ parent: root, issuer: a, audience: b.did, policy: subPolicy });
  await new BatonClient({ baseUrl: live.baseUrl }).submit([root, sub]);
  const verifier = new BatonClient({ baseUrl: live.baseUrl, apiKey: live.tenant.keys.verify });
  return {
    a,
    b,
    root,
    sub,
    async call(args = ARGS) {
      const inv = createInvocation({ chain: [root, sub], invoker: b, args, toolServer: 'mcp://search' });
      const result = await verifier.verify(makeBundle(inv, [root, sub], 'reference'));
      if (!result.valid) throw new Error(`expected an allow, got ${result.error.code}`);
      return inv.payload.jti;
    },
  };
}

export function writeKeyFile(dir: string, key: KeyPair): string {
  const file = join(dir, `key-${key.did.slice(-10)}.json`);
  writeFileSync(file, JSON.stringify(keyPairToFile(key)), { mode: 0o600 });
  return file;
}
