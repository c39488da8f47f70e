/**
 * What the MCP middleware tests share: one real Baton service per test file (real socket, real
 * PostgreSQL), the MCP clients and servers of each test closed after it, and chains stored there.
 * `live` and `audit` are live bindings, set once the file's beforeAll has run.
 */
import { afterAll, afterEach, beforeAll } from 'vitest';
import type { BatonMcpOptions } from '../../src/mcp/middleware.js';
import type { Policy } from '../../src/protocol/policy.js';
import { BatonClient } from '../../src/sdk/client.js';
import { generateKeyPair, type KeyPair } from '../../src/sdk/keys.js';
import { createRootDelegation, createSubDelegation, type SignedDelegation } from '../../src/sdk/records.js';
import { startLiveService, type LiveService } from '../sdk/live-service.js';

/** What every call's arguments declare under the chains' policies. */
export const DECLARED = { estimated_cost_usd: 0.003, pii_access: false, write_access: false };

export let live: LiveService;
/** An audit key's client of the live service: reads what the middleware reported. */
export let audit: BatonClient;
/** Closed after each test, last first. */
export const cleanups: (() => Promise<unknown>)[] = [];
let toolServerName = 'mcp://test-tools';

/** Starts the live service for this file, as `toolServer` (the name the middleware's options give). */
export function useLiveBaton(toolServer: string): void {
  toolServerName = toolServer;
  beforeAll(async () => {
    live = await startLiveService();
    audit = new BatonClient({ baseUrl: live.baseUrl, apiKey: live.tenant.keys.audit });
  });
  afterEach(async () => {
    while (cleanups.length > 0) await cleanups.pop()!().catch(() => undefined);
  });
  afterAll(async () => {
    await live?.close();
  });
}

export interface Chain {
  readonly b: KeyPair;
  readonly root: SignedDelegation;
  readonly sub: SignedDelegation;
  readonly chain: readonly SignedDelegation[];
}

/**
 * operator (trusted root) -> A -> B, stored in Baton. The root's policy is wider than the default
 * sub's (file_write, write access); `cmd` is the root's (the sub inherits it), default /mcp/tools/call.
 */
export async function storedChain(
  subPolicy: Policy = { allowed_tools: ['web_search'], max_calls: 5, max_cost_usd: 0.01, write_access: false, pii_access: false },
  opts: { cmd?: string; rootPolicy?: Policy } = {},
): Promise<Chain> {
  const a = generateKeyPair();
  const b = generateKeyPair();
  const root = createRootDelegation({
    issuer: live.tenant.root,
    audience: a.did,
    policy: opts.rootPolicy ?? {
      allowed_tools: ['web_search', 'file_write'],
      max_calls: 10,
      max_cost_usd: 0.05,
      write_access: true,
      pii_access: false,
    },
    ...(opts.cmd !== undefined ? { cmd: opts.cmd } : {}),
  });
  const sub = createSubDelegation({ parent: root, issuer: a, audience: b.did, policy: subPolicy });
  await new BatonClient({ baseUrl: live.baseUrl }).submit([root, sub]);
  return { b, root, sub, chain: [root, sub] };
}

/** withBaton's options against the live service, as this file's tool server. */
export function batonOptions(overrides: Partial<BatonMcpOptions> = {}): BatonMcpOptions {
  return {
    baton: { baseUrl: live.baseUrl, verifyKey: live.tenant.keys.verify, reportKey: live.tenant.keys.report, timeoutMs: 5000 },
    toolServer: toolServerName,
    onEvent: () => undefined,
    ...overrides,
  };
}
