/**
 * The MCP middleware and a call a tenant rule sends to a human: a clear tool
 * error carrying the approval id and how to retry; after the approval the
 * same call runs once. Real service on a socket, real PostgreSQL.
 */
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { z } from 'zod';
import { callToolWithBundle, refusalOf, withBaton, type ToolCallResult } from '../../src/mcp/middleware.js';
import { BatonClient } from '../../src/sdk/client.js';
import { generateKeyPair } from '../../src/sdk/keys.js';
import { createInvocation, createRootDelegation, makeBundle } from '../../src/sdk/records.js';
import { startLiveService, type LiveService } from '../sdk/live-service.js';
import { tool } from '../support/tools.js';

const TOOL_SERVER = 'mcp://crm-tools';
let live: LiveService;

beforeAll(async () => {
  live = await startLiveService();
});
afterAll(async () => live?.close());

const text = (r: ToolCallResult): string => ((r as { content: { text?: string }[] }).content ?? []).map((c) => c.text ?? '').join('\n');

describe('require_approval through the MCP middleware', () => {
  it('is a tool error with the approval id and how to retry; once approved the same call runs once', async () => {
    const admin = new BatonClient({ baseUrl: live.baseUrl, apiKey: live.svc.adminKey });
    await admin.tools.publish(live.tenant.id, {
      base_version: 0,
      strict: true,
      tools: [tool('crm_export', { type: 'write', blast_radius: 'organizational', action_type: 'crm:export' })],
    });
    const key = await admin.admin.createApiKey(live.tenant.id, { scopes: ['approve'], name: 'human' });
    const human = new BatonClient({ baseUrl: live.baseUrl, apiKey: key.key });

    const agent = generateKeyPair();
    const policy = { allowed_tools: ['crm_export'], max_cost_usd: 1, max_calls: 10, write_access: true };
    const root = createRootDelegation({ issuer: live.tenant.root, audience: agent.did, policy });
    const server = new McpServer({ name: 'crm-tools', version: '1.0.0' });
    const run = vi.fn(async () => ({ content: [{ type: 'text' as const, text: 'exported' }] }));
    server.registerTool('crm_export', { inputSchema: { table: z.string() } }, run);
    withBaton(server, {
      baton: { baseUrl: live.baseUrl, verifyKey: live.tenant.keys.verify, timeoutMs: 5000 },
      toolServer: TOOL_SERVER,
      onEvent: () => undefined,
    });
    const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
    await server.connect(serverSide);
    const client = new Client({ name: 'agent', version: '1.0.0' });
    await client.connect(clientSide);
    try {
      const args = { tool: 'crm_export', table: 'customers', estimated_cost_usd: 0.01, pii_access: false, write_access: true };
      const sign = () => makeBundle(createInvocation({ chain: [root], invoker: agent, args, toolServer: TOOL_SERVER }), [root]);
      const send = (bundle: ReturnType<typeof sign>) => callToolWithBundle(client, 'crm_export', args, bundle);
      const call = () => send(sign());
      const waiting = await call();
      const refusal = refusalOf(waiting)!;
      expect(refusal.code).toBe('APPROVAL_REQUIRED');
      expect(refusal.retryable).toBe(true);
      expect(refusal.approval?.id).toMatch(/^apr_/);
      expect(text(waiting)).toContain(`approval ${refusal.approval!.id}`);
      expect(text(waiting)).toContain('retry exactly the same call');
      expect(run).not.toHaveBeenCalled();

      const pending = await human.tools.approvals('pending');
      expect(pending.approvals.map((a) => a.id)).toEqual([refusal.approval!.id]);
      await human.tools.approve(refusal.approval!.id, { actor: 'carol', reason: 'Export for the audit.' });

      const approved = sign();
      const done = await send(approved);
      expect(refusalOf(done)).toBeNull();
      expect(text(done)).toContain('exported');
      expect(run).toHaveBeenCalledTimes(1);
      // The approved request, sent again by whoever saw it, does not run a second time.
      expect(refusalOf(await send(approved))?.code).toBe('REPLAY_DETECTED');
      expect(run).toHaveBeenCalledTimes(1);
      expect(refusalOf(await call())?.code).toBe('APPROVAL_REQUIRED'); // once
    } finally {
      await client.close();
      await server.close();
    }
  });
});
