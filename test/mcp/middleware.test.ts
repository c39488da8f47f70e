/**
 * withBaton in front of real MCP servers (McpServer and the low-level
 * Server), talking to a real MCP client in-process, verifying against the
 * real Baton service over a real socket on real PostgreSQL.
 */
import { randomUUID } from 'node:crypto';
import { createServer as createHttpServer, type Server as HttpServer } from 'node:http';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js';
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { completable } from '@modelcontextprotocol/sdk/server/completable.js';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { CallToolRequestSchema, ListToolsRequestSchema, McpError, ReadResourceRequestSchema } from '@modelcontextprotocol/sdk/types.js';
import { describe, expect, it, vi } from 'vitest';
import { z } from 'zod';
import {
  attachBundle,
  BATON_REFUSAL_ERROR_CODE,
  batonCall,
  bundleFromMeta,
  callToolWithBundle,
  DRS_BUNDLE_META_KEY,
  DRS_BUNDLE_META_KEY_NEXT,
  encodeBundle,
  explainRefusal,
  invokeTool,
  refusalOf,
  VERIFIED_META_KEY,
  withBaton,
  type BatonMcpEvent,
  type BatonMcpOptions,
  type BatonRefusal,
  type ToolCallResult,
} from '../../src/mcp/middleware.js';
import { encodeBase64url } from '../../src/protocol/base64url.js';
import { ERROR_TABLE, isErrorCode } from '../../src/protocol/errors.js';
import { utf8Encode } from '../../src/protocol/jcs.js';
import { signJws } from '../../src/protocol/jws.js';
import { BatonClient } from '../../src/sdk/client.js';
import { generateKeyPair } from '../../src/sdk/keys.js';
import { createInvocation, createRootDelegation, createSubDelegation, makeBundle } from '../../src/sdk/records.js';
import { closedPortUrl } from '../sdk/live-service.js';
import { setupTenant } from '../support/service.js';
import { audit, batonOptions, cleanups, DECLARED, live, storedChain, useLiveBaton, type Chain } from './live-baton.js';

const TOOL_SERVER = 'mcp://test-tools';
useLiveBaton(TOOL_SERVER);

/** One web_search call through invokeTool: a freshly signed invocation by the chain's leaf holder. */
function searchOnce(client: Client, c: Chain, query = 'q'): ReturnType<typeof invokeTool> {
  return invokeTool(client, {
    chain: c.chain,
    invoker: c.b,
    toolServer: TOOL_SERVER,
    name: 'web_search',
    arguments: { query, ...DECLARED },
  });
}

/** An McpServer with spied web_search and file_write handlers, wrapped (after registration unless `wrapFirst`). */
function toolServer(options: BatonMcpOptions, setup: { wrapFirst?: boolean; searchResult?: (extra: unknown) => ToolCallResult } = {}) {
  const server = new McpServer({ name: 'test-tools', version: '1.0.0' });
  if (setup.wrapFirst) withBaton(server, options);
  const search = vi.fn(
    async ({ query }: { query: string }, extra: unknown) =>
      (setup.searchResult?.(extra) ?? {
        content: [{ type: 'text', text: `results for ${query}` }],
        _meta: { cost_usd: 0.002, source: 'api-usage' },
      }) as never,
  );
  const write = vi.fn(async () => ({ content: [{ type: 'text' as const, text: 'written' }] }));
  server.registerTool('web_search', { inputSchema: { query: z.string() } }, search);
  server.registerTool('file_write', { inputSchema: { path: z.string(), content: z.string() } }, write);
  if (!setup.wrapFirst) withBaton(server, options);
  return { server, search, write };
}

async function connect(server: McpServer | Server): Promise<Client> {
  const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
  await server.connect(serverSide);
  const client = new Client({ name: 'test-agent', version: '1.0.0' });
  await client.connect(clientSide);
  cleanups.push(
    () => client.close(),
    () => server.close(),
  );
  return client;
}

function signed(c: Chain, args: Record<string, unknown>, opts: { toolServer?: string; mode?: 'value' | 'reference'; cmd?: string } = {}) {
  const inv = createInvocation({
    chain: c.chain,
    invoker: c.b,
    args,
    toolServer: opts.toolServer ?? TOOL_SERVER,
    ...(opts.cmd !== undefined ? { cmd: opts.cmd } : {}),
  });
  return { inv, bundle: makeBundle(inv, c.chain, opts.mode ?? 'reference') };
}

/** An HTTP server in Baton's place answering every request with `status` and `body`; its base URL. Closed after the test. */
async function fakeBaton(status: number, body: unknown): Promise<string> {
  const fake: HttpServer = createHttpServer((_req, res) => {
    res.writeHead(status, { 'content-type': 'application/json' });
    res.end(JSON.stringify(body));
  });
  await new Promise<void>((resolve) => fake.listen(0, '127.0.0.1', resolve));
  cleanups.push(() => new Promise<void>((resolve) => fake.close(() => resolve())));
  return `http://127.0.0.1:${(fake.address() as { port: number }).port}`;
}

const text = (r: ToolCallResult): string => ((r as { content: { text?: string }[] }).content ?? []).map((c) => c.text ?? '').join('\n');

describe('allowed calls', () => {
  it('runs the tool with its own arguments and reports the metered cost from the result _meta', async () => {
    const c = await storedChain();
    const events: BatonMcpEvent[] = [];
    const { server, search } = toolServer(batonOptions({ onEvent: (e) => events.push(e) }));
    const client = await connect(server);

    const result = await invokeTool(client, {
      chain: c.chain,
      invoker: c.b,
      toolServer: TOOL_SERVER,
      name: 'web_search',
      arguments: { query: 'baton', ...DECLARED },
      mode: 'reference',
    });

    expect(result.isError).toBeFalsy();
    expect(text(result)).toBe('results for baton');
    expect(search).toHaveBeenCalledTimes(1);
    // The zod schema strips the policy fields: the handler sees its own arguments.
    expect(search.mock.calls[0]![0]).toEqual({ query: 'baton' });
    const verified = (result._meta as Record<string, { invocation_id: string; cost_reported: boolean }>)[VERIFIED_META_KEY]!;
    expect(verified).toMatchObject({ invocation_id: expect.stringMatching(/^inv:/), cost_reported: true });
    expect(events.map((e) => e.type)).toEqual(['allowed', 'reported']);

    const usage = (await audit.getDelegation(c.sub.hash)).usage;
    expect(usage).toMatchObject({
      calls_used: 1,
      declared_usd: 0.003,
      metered_usd: 0.002,
      metered_invocations: 1,
      unmetered_invocations: 0,
    });
    const inv = await audit.getInvocation(verified.invocation_id);
    expect(inv).toMatchObject({ decision: 'allowed', tool: 'web_search', actual: { cost_usd: 0.002, source: 'api-usage' } });
  });

  it('reports what the handler passes to batonCall(extra).reportCost, as harness-reported by default', async () => {
    const c = await storedChain();
    let seen: ReturnType<typeof batonCall>;
    const { server } = toolServer(batonOptions(), {
      wrapFirst: true, // tools registered after withBaton are gated too
      searchResult: (extra) => {
        seen = batonCall(extra);
        seen?.reportCost({ cost_usd: 0.0015, tokens_in: 120, tokens_out: 30 });
        return { content: [{ type: 'text', text: 'ok' }] };
      },
    });
    const client = await connect(server);
    const { bundle } = signed(c, { tool: 'web_search', query: 'q', ...DECLARED });
    const result = await callToolWithBundle(client, 'web_search', { tool: 'web_search', query: 'q', ...DECLARED }, bundle);
    expect(result.isError).toBeFalsy();
    expect(seen).toMatchObject({
      tool: 'web_search',
      invocationId: expect.stringMatching(/^inv:/),
      context: { tool: 'web_search', tool_server: TOOL_SERVER },
    });
    const inv = await audit.getInvocation(seen!.invocationId);
    expect(inv).toMatchObject({ actual: { cost_usd: 0.0015, tokens_in: 120, tokens_out: 30, source: 'harness-reported' } });
  });

  it('reads the bundle under every key DRS and Baton use: X-DRS-Bundle, xyz.okeyamy.drs/bundle (string or object), bundle', async () => {
    const c = await storedChain();
    const { server, search } = toolServer(batonOptions());
    const client = await connect(server);
    const args = () => ({ tool: 'web_search', query: 'k', ...DECLARED });
    const metas = [
      (b: ReturnType<typeof signed>['bundle']) => ({ [DRS_BUNDLE_META_KEY]: encodeBundle(b) }),
      (b: ReturnType<typeof signed>['bundle']) => ({ [DRS_BUNDLE_META_KEY_NEXT]: encodeBundle(b) }),
      (b: ReturnType<typeof signed>['bundle']) => ({ [DRS_BUNDLE_META_KEY_NEXT]: b }),
      (b: ReturnType<typeof signed>['bundle']) => ({ bundle: b }),
    ];
    for (const meta of metas) {
      const a = args();
      const { bundle } = signed(c, a, { mode: 'value' });
      const result = await client.callTool({ name: 'web_search', arguments: a, _meta: meta(bundle) });
      expect(result.isError, JSON.stringify(result)).toBeFalsy();
    }
    expect(search).toHaveBeenCalledTimes(4);
  });

  it('a failed cost report is logged, never a failed tool result', async () => {
    const c = await storedChain();
    const events: BatonMcpEvent[] = [];
    // The audit key has no report scope: the report is refused (403).
    const { server, search } = toolServer(
      batonOptions({
        baton: { baseUrl: live.baseUrl, verifyKey: live.tenant.keys.verify, reportKey: live.tenant.keys.audit },
        onEvent: (e) => events.push(e),
      }),
    );
    const client = await connect(server);
    const result = await searchOnce(client, c, 'x');
    expect(result.isError).toBeFalsy();
    expect(search).toHaveBeenCalledTimes(1);
    expect((result._meta as Record<string, unknown>)[VERIFIED_META_KEY]).toMatchObject({ cost_reported: false });
    const failed = events.find((e) => e.type === 'report-failed');
    expect(failed).toMatchObject({
      type: 'report-failed',
      tool: 'web_search',
      actual: { cost_usd: 0.002, source: 'api-usage' },
      error: { code: 'FORBIDDEN' },
    });
    expect((await audit.getDelegation(c.sub.hash)).usage).toMatchObject({ calls_used: 1, metered_usd: 0, unmetered_invocations: 1 });
  });
  it('a tool that fails without a cost is not reported, so its own report out of band is the one; a cost it reported first is', async () => {
    const c = await storedChain();
    const events: BatonMcpEvent[] = [];
    const billing = new BatonClient({ baseUrl: live.baseUrl, apiKey: live.tenant.keys.report });
    let billedInvocation = '';
    const failures: ((extra: unknown) => void)[] = [
      (extra) => (billedInvocation = batonCall(extra)!.invocationId),
      (extra) => batonCall(extra)!.reportCost({ cost_usd: 0.0012 }),
    ];
    const { server } = toolServer(batonOptions({ onEvent: (e) => events.push(e) }), {
      searchResult: (extra) => {
        failures.shift()?.(extra);
        throw new Error('the search engine is down');
      },
    });
    const client = await connect(server);
    // An McpServer answers a handler's exception with an isError result.
    expect((await searchOnce(client, c, 'a')).isError).toBe(true);
    // The tool server's own billing reports what the failed call cost, under its invocation id.
    await billing.reportActual(billedInvocation, { source: 'api-usage', cost_usd: 0.0009 });
    expect((await searchOnce(client, c, 'b')).isError).toBe(true);
    // A low-level Server's handler throws to the gate itself.
    const low = new Server({ name: 'low', version: '1.0.0' }, { capabilities: { tools: {} } });
    low.setRequestHandler(CallToolRequestSchema, async () => {
      throw new Error('the search engine is down');
    });
    withBaton(low, batonOptions({ onEvent: (e) => events.push(e) }));
    await expect(searchOnce(await connect(low), c, 'c')).rejects.toThrow('the search engine is down');

    expect(events.filter((e) => e.type === 'reported' || e.type === 'report-failed').map((e) => e.type === 'reported' && e.actual)).toEqual(
      [{ source: 'harness-reported', cost_usd: 0.0012 }],
    );
    expect((await audit.getDelegation(c.sub.hash)).usage).toMatchObject({ calls_used: 3, metered_usd: 0.0021, unmetered_invocations: 1 });
  });
});

describe('costs that JSON cannot carry', () => {
  it('a cost of NaN or Infinity is a failed report that says so, never a report of null', async () => {
    const c = await storedChain();
    const events: BatonMcpEvent[] = [];
    const { server, search } = toolServer(batonOptions({ onEvent: (e) => events.push(e) }), {
      searchResult: (extra) => {
        batonCall(extra)?.reportCost({ cost_usd: Number.POSITIVE_INFINITY });
        return { content: [{ type: 'text', text: 'r' }] } as ToolCallResult;
      },
    });
    const client = await connect(server);
    await searchOnce(client, c, 'one');
    const failed = events.filter((e) => e.type === 'report-failed');
    expect(failed).toHaveLength(1);
    expect(String((failed[0] as { error: Error }).error.message)).toContain('finite number');
    expect(events.some((e) => e.type === 'reported')).toBe(false);

    const fromMeta = toolServer(batonOptions({ onEvent: (e) => events.push(e) }), {
      searchResult: () => ({ content: [{ type: 'text', text: 'r' }], _meta: { cost_usd: Number.NaN } }) as ToolCallResult,
    });
    await searchOnce(await connect(fromMeta.server), c, 'two');
    expect(String((events.filter((e) => e.type === 'report-failed')[1] as { error: Error }).error.message)).toContain('finite number');
    expect(search).toHaveBeenCalledTimes(1);
    expect((await audit.getDelegation(c.sub.hash)).usage).toMatchObject({ calls_used: 2, unmetered_invocations: 2 });
  });
});

describe('refused calls never run the tool', () => {
  it("deny: the result says Baton's code, message, suggestion and every violation; nothing runs", async () => {
    const c = await storedChain();
    const events: BatonMcpEvent[] = [];
    const { server, write } = toolServer(batonOptions({ onEvent: (e) => events.push(e) }));
    const client = await connect(server);
    const result = await invokeTool(client, {
      chain: c.chain,
      invoker: c.b,
      toolServer: TOOL_SERVER,
      name: 'file_write',
      arguments: { path: '/etc/motd', content: 'hi', estimated_cost_usd: 0.001, pii_access: false, write_access: true },
    });
    expect(write).not.toHaveBeenCalled();
    expect(result.isError).toBe(true);
    const refusal = refusalOf(result)!;
    expect(refusal).toMatchObject({
      tool: 'file_write',
      code: 'POLICY_VIOLATION',
      block: 'D',
      retryable: false,
      request_id: expect.any(String),
    });
    expect(refusal.violations.map((v) => v.field).sort()).toEqual(['args.tool', 'args.write_access']);
    const t = text(result);
    expect(t).toContain('This call to "file_write" was refused: POLICY_VIOLATION (block D)');
    expect(t).toContain('args.tool: required ["web_search"], got file_write');
    expect(t).toContain('args.write_access: required false, got true');
    expect(t).toContain(`What to do: ${refusal.suggestion}`);
    // Baton decided this one: nothing may tell the agent the tool server failed to reach it.
    expect(t).not.toMatch(/could not reach Baton|Nothing in this call is at fault/);
    // Plain JavaScript may hand explainRefusal the result itself: it reads the refusal out of it.
    expect(explainRefusal(result as unknown as BatonRefusal)).toBe(explainRefusal(refusal));
    expect(() => explainRefusal({ content: [] } as unknown as BatonRefusal)).toThrow(/pass refusalOf\(result\)/);
    expect(events.map((e) => e.type)).toEqual(['refused']);
    expect((await audit.getDelegation(c.sub.hash)).usage.calls_used).toBe(0);
  });

  it('missing bundle: refused (fail closed) with how to attach one; Baton is not even asked', async () => {
    const { server, search } = toolServer(batonOptions());
    const client = await connect(server);
    const result = await client.callTool({ name: 'web_search', arguments: { tool: 'web_search', query: 'q', ...DECLARED } });
    expect(search).not.toHaveBeenCalled();
    expect(result.isError).toBe(true);
    expect(refusalOf(result)).toMatchObject({ code: 'BUNDLE_MISSING', retryable: false });
    expect(text(result)).toContain('_meta["X-DRS-Bundle"] = base64url(JSON bundle)');
    expect(text(result)).toContain('callToolWithBundle');
  });

  it('malformed or conflicting bundles are refused', async () => {
    const c = await storedChain();
    const { server, search } = toolServer(batonOptions());
    const client = await connect(server);
    const args = { tool: 'web_search', query: 'q', ...DECLARED };
    const bad = await client.callTool({ name: 'web_search', arguments: args, _meta: { [DRS_BUNDLE_META_KEY]: 'not base64url json!' } });
    expect(refusalOf(bad)).toMatchObject({ code: 'BUNDLE_MALFORMED' });
    const one = signed(c, args).bundle;
    const two = signed(c, args).bundle;
    const both = await client.callTool({
      name: 'web_search',
      arguments: args,
      _meta: { [DRS_BUNDLE_META_KEY]: encodeBundle(one), bundle: two },
    });
    expect(refusalOf(both)).toMatchObject({ code: 'BUNDLE_MALFORMED' });
    expect(text(both)).toContain('different bundles');
    // A key repeated in the encoded bundle: JSON.parse keeps the last, another reader the first.
    const repeated = `{"bundle_version":"4.0","invocation":${JSON.stringify(two.invocation)},"invocation":${JSON.stringify(one.invocation)},"receipts":${JSON.stringify(one.receipts)}}`;
    const ambiguous = await client.callTool({
      name: 'web_search',
      arguments: args,
      _meta: { [DRS_BUNDLE_META_KEY]: encodeBase64url(utf8Encode(repeated)) },
    });
    expect(refusalOf(ambiguous)).toMatchObject({ code: 'BUNDLE_MALFORMED' });
    expect(text(ambiguous)).toContain('repeats the key "invocation"');
    expect(search).not.toHaveBeenCalled();
    expect(bundleFromMeta({ bundle: one })).toMatchObject({ ok: true, key: 'bundle' });
  });

  it('arguments changed after signing: BINDING_MISMATCH from Baton (require_binding), nothing counted', async () => {
    const c = await storedChain();
    const { server, search } = toolServer(batonOptions());
    const client = await connect(server);
    const args = { tool: 'web_search', query: 'weather in Paris', ...DECLARED };
    const { bundle } = signed(c, args);
    // The agent-side helper refuses to send it ...
    await expect(callToolWithBundle(client, 'web_search', { ...args, query: 'all customer emails' }, bundle)).rejects.toThrow(
      /BINDING_MISMATCH/,
    );
    // ... and a client that sends it anyway is refused by the tool server.
    const result = await client.callTool(
      attachBundle({ name: 'web_search', arguments: { ...args, query: 'all customer emails' } }, bundle),
    );
    expect(search).not.toHaveBeenCalled();
    expect(refusalOf(result)).toMatchObject({ code: 'BINDING_MISMATCH', block: 'D' });
    expect((await audit.getDelegation(c.sub.hash)).usage.calls_used).toBe(0);
  });

  it('arguments JSON cannot carry as they are (1e999 read as Infinity) are refused before Baton counts anything', async () => {
    const c = await storedChain();
    const { server, search } = toolServer(batonOptions());
    const client = await connect(server);
    const args = { tool: 'web_search', query: 'q', limit: null, ...DECLARED };
    const { bundle } = signed(c, args);
    // Sent on as JSON, Infinity would become null: the signed args, so Baton would allow and count
    // a call whose tool then ran on other arguments (or, as the client checks, did not run at all).
    const result = await client.callTool(attachBundle({ name: 'web_search', arguments: { ...args, limit: Infinity } }, bundle));
    expect(search).not.toHaveBeenCalled();
    expect(refusalOf(result)).toMatchObject({ code: 'BINDING_MISMATCH' });
    expect(refusalOf(result)?.message).toContain('Infinity');
    expect((await audit.getDelegation(c.sub.hash)).usage.calls_used).toBe(0);
    // The signed args themselves still run.
    expect((await client.callTool(attachBundle({ name: 'web_search', arguments: args }, bundle))).isError).toBeFalsy();
  });

  it('a signed call for one tool cannot run another: TOOL_MISMATCH, checked before Baton counts anything', async () => {
    const c = await storedChain();
    const { server, search, write } = toolServer(batonOptions());
    const client = await connect(server);
    const args = { tool: 'web_search', query: 'q', path: '/x', content: 'y', ...DECLARED };
    const { bundle } = signed(c, args);
    const result = await client.callTool(attachBundle({ name: 'file_write', arguments: args }, bundle));
    expect(write).not.toHaveBeenCalled();
    expect(search).not.toHaveBeenCalled();
    expect(refusalOf(result)).toMatchObject({ code: 'TOOL_MISMATCH' });
    expect((await audit.getDelegation(c.sub.hash)).usage.calls_used).toBe(0);
    // The same bundle still works for the tool it was signed for (nothing was consumed).
    expect((await client.callTool(attachBundle({ name: 'web_search', arguments: args }, bundle))).isError).toBeFalsy();
  });

  it('an invocation signed for another tool server is refused: TOOL_SERVER_MISMATCH', async () => {
    const c = await storedChain();
    const { server, search } = toolServer(batonOptions());
    const client = await connect(server);
    const args = { tool: 'web_search', query: 'q', ...DECLARED };
    const { bundle } = signed(c, args, { toolServer: 'mcp://elsewhere' });
    const result = await client.callTool(attachBundle({ name: 'web_search', arguments: args }, bundle));
    expect(search).not.toHaveBeenCalled();
    expect(refusalOf(result)).toMatchObject({
      code: 'TOOL_SERVER_MISMATCH',
      violations: [{ required: TOOL_SERVER, actual: 'mcp://elsewhere' }],
    });
  });

  it('an invocation naming no tool server, or not as a string, is refused here: TOOL_SERVER_MISMATCH, nothing counted', async () => {
    const c = await storedChain();
    const { server, search } = toolServer(batonOptions());
    const client = await connect(server);
    const args = { tool: 'web_search', query: 'q', ...DECLARED };
    const { inv } = signed(c, args);
    const { tool_server: _named, ...unnamed } = inv.payload as Record<string, unknown>;
    for (const payload of [unnamed, { ...unnamed, tool_server: [TOOL_SERVER] }, { ...unnamed, tool_server: 7 }]) {
      const jws = signJws({ ...payload, jti: `inv:${randomUUID()}` }, c.b.seed);
      const result = await client.callTool(attachBundle({ name: 'web_search', arguments: args }, makeBundle(jws, c.chain, 'reference')));
      expect(refusalOf(result), JSON.stringify(payload.tool_server)).toMatchObject({
        code: 'TOOL_SERVER_MISMATCH',
        violations: [{ required: TOOL_SERVER }],
      });
    }
    expect(search).not.toHaveBeenCalled();
    // Refused before Baton: nothing reached the verify statement.
    expect((await audit.getDelegation(c.sub.hash)).usage.calls_used).toBe(0);
  });

  it('max_calls used up: CALLS_EXHAUSTED', async () => {
    const c = await storedChain({ allowed_tools: ['web_search'], max_calls: 1, max_cost_usd: 0.01 });
    const { server, search } = toolServer(batonOptions());
    const client = await connect(server);
    const call = () => searchOnce(client, c, 'q');
    expect((await call()).isError).toBeFalsy();
    const second = await call();
    expect(refusalOf(second)).toMatchObject({ code: 'CALLS_EXHAUSTED', block: 'G' });
    expect(search).toHaveBeenCalledTimes(1);
  });

  it('Baton unreachable: refused as retryable, the tool does not run', async () => {
    const c = await storedChain();
    const closed = await closedPortUrl();
    const events: BatonMcpEvent[] = [];
    const { server, search } = toolServer(
      batonOptions({ baton: { baseUrl: closed, verifyKey: live.tenant.keys.verify }, onEvent: (e) => events.push(e) }),
    );
    const client = await connect(server);
    const result = await searchOnce(client, c, 'q');
    expect(search).not.toHaveBeenCalled();
    // The agent is not shown where Baton is, nor how to configure the tool server; the operator's event has it.
    expect(text(result)).not.toContain(closed);
    expect(text(result)).not.toContain('BATON_URL');
    const refused = events.find((e) => e.type === 'refused');
    expect(refused).toMatchObject({ type: 'refused', refusal: { code: 'NETWORK_ERROR' } });
    expect(String((refused as { error?: Error }).error?.message)).toContain(closed);
    expect(result.isError).toBe(true);
    expect(refusalOf(result)).toMatchObject({ code: 'NETWORK_ERROR', retryable: true });
    expect(text(result)).toContain('Baton could not decide, so the tool did not run');
    expect(text(result)).toContain('temporary');
    // Baton decided nothing: the line does not say it did.
    expect(text(result)).toMatch(/^This call to "web_search" was refused: NETWORK_ERROR/);
    expect(text(result)).not.toContain('Baton refused');
    // Baton may have counted it before the answer was lost: a re-send of the same invocation would be a replay.
    expect(refusalOf(result)!.suggestion).toContain('sign a new invocation for the call');
  });

  it('serviceDids: the tool runs on an allow signed by a pinned service key, not on one it cannot check', async () => {
    const c = await storedChain();
    const { keys } = await new BatonClient({ baseUrl: live.baseUrl }).keys();
    const connection = { baseUrl: live.baseUrl, verifyKey: live.tenant.keys.verify, reportKey: live.tenant.keys.report };
    const trusting = toolServer(batonOptions({ baton: { ...connection, serviceDids: keys.map((k) => k.did), tenantId: live.tenant.id } }));
    expect((await searchOnce(await connect(trusting.server), c, 'q')).isError).toBeFalsy();
    expect(trusting.search).toHaveBeenCalledTimes(1);
    // Pinned to a key Baton does not sign with: the allow cannot be told from a forgery.
    const pinnedElsewhere = toolServer(
      batonOptions({ baton: { ...connection, serviceDids: [generateKeyPair().did], tenantId: live.tenant.id } }),
    );
    const refused = await searchOnce(await connect(pinnedElsewhere.server), c, 'q');
    expect(pinnedElsewhere.search).not.toHaveBeenCalled();
    expect(refusalOf(refused)).toMatchObject({ code: 'UNEXPECTED_RESPONSE' });
  });

  it('an invocation this server ran is not run again, whatever an answer says of it (retry is not signed)', async () => {
    const c = await storedChain();
    const { inv, bundle } = signed(c, { tool: 'web_search', query: 'q', ...DECLARED });
    // What sits between the server and Baton answers every request with the same allow, retry: false.
    const replaying: HttpServer = createHttpServer((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ valid: true, invocation_id: inv.payload.jti, dry_run: false, retry: false, counters: [], warnings: [] }));
    });
    await new Promise<void>((resolve) => replaying.listen(0, '127.0.0.1', resolve));
    cleanups.push(() => new Promise<void>((resolve) => replaying.close(() => resolve())));
    const url = `http://127.0.0.1:${(replaying.address() as { port: number }).port}`;
    const { server, search } = toolServer(batonOptions({ baton: { baseUrl: url, verifyKey: 'whatever-key' } }));
    const client = await connect(server);
    const send = () => callToolWithBundle(client, 'web_search', { tool: 'web_search', query: 'q', ...DECLARED }, bundle);
    expect((await send()).isError).toBeFalsy();
    const again = await send();
    expect(refusalOf(again)).toMatchObject({ code: 'REPLAY_DETECTED' });
    expect(search).toHaveBeenCalledTimes(1);
    // Nor by another server of the process, as tool servers that make one per session or per
    // request do (each wrapped on its own): the memory is the process's, not one server's.
    const perSession = toolServer(batonOptions({ baton: { baseUrl: url, verifyKey: 'whatever-key' } }));
    const elsewhere = await callToolWithBundle(
      await connect(perSession.server),
      'web_search',
      { tool: 'web_search', query: 'q', ...DECLARED },
      bundle,
    );
    expect(refusalOf(elsewhere)).toMatchObject({ code: 'REPLAY_DETECTED' });
    expect(perSession.search).not.toHaveBeenCalled();
    // The memory's refusal says what it knows: this process ran the call, not that Baton counted it now.
    expect(refusalOf(elsewhere)!.message).toContain('was already allowed once, and this tool server ran it then');
    // Unpinned, the memory is the connection's (base URL and verify key): another key's call with the
    // same jti is another tenant's as far as this process can tell, and Baton's to judge.
    const otherKey = toolServer(batonOptions({ baton: { baseUrl: url, verifyKey: 'another-tenants-key' } }));
    const args = { tool: 'web_search', query: 'q', ...DECLARED };
    expect((await callToolWithBundle(await connect(otherKey.server), 'web_search', args, bundle)).isError).toBeFalsy();
    expect(otherKey.search).toHaveBeenCalledTimes(1);
    // A BatonClient passed in names no tenant: the memory is that client's, shared by every server given it.
    const shared = new BatonClient({ baseUrl: url, apiKey: 'whatever-key' });
    const first = toolServer(batonOptions({ baton: shared }));
    expect((await callToolWithBundle(await connect(first.server), 'web_search', args, bundle)).isError).toBeFalsy();
    const second = toolServer(batonOptions({ baton: shared }));
    expect(refusalOf(await callToolWithBundle(await connect(second.server), 'web_search', args, bundle))).toMatchObject({
      code: 'REPLAY_DETECTED',
    });
    expect(second.search).not.toHaveBeenCalled();
  });

  it("pinned, the memory is the tenant's however the servers get their clients: an allow replayed with retry false runs once", async () => {
    const c = await storedChain();
    const { keys } = await new BatonClient({ baseUrl: live.baseUrl }).keys();
    const serviceDids = keys.map((k) => k.did);
    const args = { tool: 'web_search', query: 'q', ...DECLARED };
    const { bundle } = signed(c, args);
    // Whoever sits on the path to Baton: passes every request on, and turns the answer's retry: true to false.
    const relay: HttpServer = createHttpServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (d: Buffer) => chunks.push(d));
      req.on('end', () => {
        const headers: Record<string, string> = {};
        for (const [k, v] of Object.entries(req.headers))
          if (typeof v === 'string' && k !== 'host' && k !== 'content-length') headers[k] = v;
        void fetch(live.baseUrl + (req.url ?? '/'), {
          method: req.method,
          headers,
          ...(req.method === 'GET' ? {} : { body: Buffer.concat(chunks) }),
        })
          .then(async (answer) => {
            const body = (await answer.text()).replace('"retry":true', '"retry":false');
            res.writeHead(answer.status, { 'content-type': answer.headers.get('content-type') ?? 'application/json' });
            res.end(body);
          })
          .catch(() => res.destroy());
      });
    });
    await new Promise<void>((resolve) => relay.listen(0, '127.0.0.1', resolve));
    cleanups.push(() => new Promise<void>((resolve) => relay.close(() => resolve())));
    const url = `http://127.0.0.1:${(relay.address() as { port: number }).port}`;
    // A server per session, each with its own pinned client; then one given the pinned connection.
    const pinnedClient = () => new BatonClient({ baseUrl: url, apiKey: live.tenant.keys.verify, serviceDids, tenantId: live.tenant.id });
    const servers = [
      toolServer(batonOptions({ baton: pinnedClient() })),
      toolServer(batonOptions({ baton: pinnedClient() })),
      toolServer(batonOptions({ baton: { baseUrl: url, verifyKey: live.tenant.keys.verify, serviceDids, tenantId: live.tenant.id } })),
    ];
    const results = [];
    for (const s of servers) results.push(await callToolWithBundle(await connect(s.server), 'web_search', args, bundle));
    expect(results[0]!.isError, text(results[0]!)).toBeFalsy();
    for (const r of results.slice(1)) expect(refusalOf(r)).toMatchObject({ code: 'REPLAY_DETECTED' });
    expect(servers.reduce((n, s) => n + s.search.mock.calls.length, 0)).toBe(1);
  });

  it("an object that only says it pins a tenant does not share (or spend) that tenant's memory", async () => {
    const c = await storedChain();
    const args = { tool: 'web_search', query: 'q', ...DECLARED };
    const { inv, bundle } = signed(c, args);
    // Something that answers every verify with an allow of this invocation, and claims the tenant.
    const answering: HttpServer = createHttpServer((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ valid: true, invocation_id: inv.payload.jti, dry_run: false, retry: false, counters: [], warnings: [] }));
    });
    await new Promise<void>((resolve) => answering.listen(0, '127.0.0.1', resolve));
    cleanups.push(() => new Promise<void>((resolve) => answering.close(() => resolve())));
    const unpinned = new BatonClient({
      baseUrl: `http://127.0.0.1:${(answering.address() as { port: number }).port}`,
      apiKey: 'whatever-key',
    });
    const claiming = {
      pinnedTenantId: live.tenant.id,
      verify: (...a: Parameters<BatonClient['verify']>) => unpinned.verify(...a),
    } as unknown as BatonClient;
    const first = toolServer(batonOptions({ baton: claiming }));
    expect((await callToolWithBundle(await connect(first.server), 'web_search', args, bundle)).isError).toBeFalsy();
    // The tenant's own pinned server, the same invocation: Baton allows it once, and it runs.
    const { keys } = await new BatonClient({ baseUrl: live.baseUrl }).keys();
    const pinned = toolServer(
      batonOptions({
        baton: { baseUrl: live.baseUrl, verifyKey: live.tenant.keys.verify, serviceDids: keys.map((k) => k.did), tenantId: live.tenant.id },
      }),
    );
    const own = await callToolWithBundle(await connect(pinned.server), 'web_search', args, bundle);
    expect(own.isError, text(own)).toBeFalsy();
    expect(pinned.search).toHaveBeenCalledTimes(1);
  });

  it('the memory is kept under a versioned key: what an older release keeps under its own key is not read', async () => {
    // An older copy of the module (another shape) under the unversioned key would throw inside the gate.
    const older = Symbol.for('@baton-drs/mcp: invocations this process ran');
    const shared = globalThis as { [older]?: unknown };
    const before = shared[older];
    shared[older] = { firstRun: 'not a function' };
    cleanups.push(async () => {
      shared[older] = before;
    });
    const { server, search } = toolServer(batonOptions());
    expect((await searchOnce(await connect(server), await storedChain(), 'q')).isError).toBeFalsy();
    expect(search).toHaveBeenCalledTimes(1);
  });

  it("the memory of invocations run is per tenant, as Baton's: another tenant's call with the same jti runs", async () => {
    // Two tenants of one Baton, each server pinned to its own (serviceDids and tenantId), one jti in both.
    const other = await setupTenant(live.svc, 'other-tenant');
    const { keys } = await new BatonClient({ baseUrl: live.baseUrl }).keys();
    const serviceDids = keys.map((k) => k.did);
    const chainOf = async (rootKey: typeof other.root): Promise<Chain> => {
      const a = generateKeyPair();
      const b = generateKeyPair();
      const policy = { allowed_tools: ['web_search'], max_calls: 5, max_cost_usd: 0.01, write_access: false, pii_access: false };
      const root = createRootDelegation({ issuer: rootKey, audience: a.did, policy });
      const sub = createSubDelegation({ parent: root, issuer: a, audience: b.did, policy });
      await new BatonClient({ baseUrl: live.baseUrl }).submit([root, sub]);
      return { b, root, sub, chain: [root, sub] };
    };
    const jti = `inv:${randomUUID()}`;
    const args = { tool: 'web_search', query: 'q', ...DECLARED };
    const run = async (c: Chain, tenant: typeof other) => {
      const inv = createInvocation({ chain: c.chain, invoker: c.b, args, toolServer: TOOL_SERVER, jti });
      const server = toolServer(
        batonOptions({
          baton: { baseUrl: live.baseUrl, verifyKey: tenant.keys.verify, reportKey: tenant.keys.report, serviceDids, tenantId: tenant.id },
        }),
      );
      const result = await callToolWithBundle(await connect(server.server), 'web_search', args, makeBundle(inv, c.chain, 'reference'));
      return { result, search: server.search };
    };
    const mine = await run(await storedChain(), live.tenant);
    expect(mine.result.isError, text(mine.result)).toBeFalsy();
    const theirs = await run(await chainOf(other.root), other);
    expect(theirs.result.isError, text(theirs.result)).toBeFalsy();
    expect(theirs.search).toHaveBeenCalledTimes(1);
  });

  it('Baton answering 503 (storage down): refused, the tool does not run', async () => {
    const c = await storedChain();
    const url = await fakeBaton(503, {
      error: {
        code: 'STORAGE_UNAVAILABLE',
        message: 'The database is unavailable.',
        suggestion: 'A verify re-sent to /v1/verify as the same invocation with the same key answers its original allow (retry: true).',
      },
      request_id: 'req-503',
    });
    const { server, search } = toolServer(batonOptions({ baton: { baseUrl: url, verifyKey: 'whatever-key' } }));
    const client = await connect(server);
    const result = await searchOnce(client, c, 'q');
    expect(search).not.toHaveBeenCalled();
    expect(refusalOf(result)).toMatchObject({ code: 'STORAGE_UNAVAILABLE', retryable: true, request_id: 'req-503' });
    // Baton's advice to re-send the same invocation is the one this middleware refuses as a replay.
    expect(refusalOf(result)!.suggestion).not.toContain('same invocation');
    expect(refusalOf(result)!.suggestion).toContain('sign a new invocation for the call');
  });

  it("a request id not shaped as Baton's (a proxy's 502 may hold anything) is not passed to the agent", async () => {
    const c = await storedChain();
    const events: BatonMcpEvent[] = [];
    const hostile = 'postgres://baton:hunter2@db.internal/baton';
    const url = await fakeBaton(502, { error: { code: 'BAD_GATEWAY', message: 'upstream down' }, request_id: hostile });
    const { server } = toolServer(batonOptions({ baton: { baseUrl: url, verifyKey: 'whatever-key' }, onEvent: (e) => events.push(e) }));
    const result = await searchOnce(await connect(server), c, 'q');
    expect(refusalOf(result)).toMatchObject({ code: 'BATON_UNAVAILABLE', request_id: null });
    expect(JSON.stringify(result)).not.toContain('hunter2');
    // The operator's event keeps the answer whole.
    expect((events.find((e) => e.type === 'refused') as { error?: { requestId?: string } }).error?.requestId).toBe(hostile);
  });

  it("an answer's own text reaches the agent only from Baton refusing the request (a 4xx with one of its codes)", async () => {
    const c = await storedChain();
    const leak = 'pg: connection to db.internal failed, password=hunter2';
    const answers: [status: number, code: string, expected: { code: string; message: string }][] = [
      [500, 'INTERNAL', { code: 'INTERNAL', message: 'Baton could not decide, so the tool did not run: Baton failed unexpectedly.' }],
      [502, 'PROXY_UPSTREAM_ERROR', { code: 'BATON_UNAVAILABLE', message: 'Baton could not decide, so the tool did not run.' }],
      [400, 'PROXY_BAD_REQUEST', { code: 'BATON_UNAVAILABLE', message: 'Baton could not decide, so the tool did not run.' }],
    ];
    for (const [status, code, expected] of answers) {
      const events: BatonMcpEvent[] = [];
      const url = await fakeBaton(status, {
        error: { code, message: leak, suggestion: leak, details: { block: 'X', violations: [{ code, field: 'x', message: leak }] } },
      });
      const { server, search } = toolServer(
        batonOptions({ baton: { baseUrl: url, verifyKey: 'whatever-key' }, onEvent: (e) => events.push(e) }),
      );
      const result = await searchOnce(await connect(server), c, 'q');
      expect(search).not.toHaveBeenCalled();
      expect(JSON.stringify(result), `HTTP ${status} ${code}`).not.toContain('hunter2');
      expect(refusalOf(result)).toMatchObject({ ...expected, block: null, violations: [] });
      // The operator's event keeps the answer whole.
      expect(String((events.find((e) => e.type === 'refused') as { error?: Error }).error?.message)).toContain('hunter2');
    }
    // Baton's own refusal of the request is passed on as it wrote it.
    const url = await fakeBaton(400, { error: { code: 'INVALID_REQUEST', message: 'body.estimated_cost_usd: must be a number' } });
    const { server } = toolServer(batonOptions({ baton: { baseUrl: url, verifyKey: 'whatever-key' } }));
    const refused = await searchOnce(await connect(server), c, 'q');
    expect(refusalOf(refused)).toMatchObject({
      code: 'INVALID_REQUEST',
      message: 'Baton refused the verification request: body.estimated_cost_usd: must be a number',
    });
  });

  it("refuseAs 'protocol-error': a JSON-RPC error carrying the refusal", async () => {
    const c = await storedChain();
    const { server, write } = toolServer(batonOptions({ refuseAs: 'protocol-error' }));
    const client = await connect(server);
    const error = await invokeTool(client, {
      chain: c.chain,
      invoker: c.b,
      toolServer: TOOL_SERVER,
      name: 'file_write',
      arguments: { path: '/x', content: 'y', estimated_cost_usd: 0.001, pii_access: false, write_access: true },
    }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(McpError);
    expect((error as McpError).code).toBe(BATON_REFUSAL_ERROR_CODE);
    expect(refusalOf(error)).toMatchObject({ code: 'POLICY_VIOLATION', tool: 'file_write' });
    expect(write).not.toHaveBeenCalled();
  });
});

describe('replayed requests never run the tool', () => {
  it('the same request sent twice runs the tool once; the re-send is REPLAY_DETECTED and counts nothing', async () => {
    const c = await storedChain({ allowed_tools: ['web_search'], max_calls: 1, max_cost_usd: 0.01 });
    const events: BatonMcpEvent[] = [];
    const { server, search } = toolServer(batonOptions({ onEvent: (e) => events.push(e) }));
    const client = await connect(server);
    const args = { tool: 'web_search', query: 'q', ...DECLARED };
    const { inv, bundle } = signed(c, args);
    const request = attachBundle({ name: 'web_search', arguments: args }, bundle);

    expect((await client.callTool(request)).isError).toBeFalsy();
    // Anyone who saw the request (a proxy, a log) sends it again: Baton answers retry: true.
    const replay = await client.callTool(request);

    expect(search).toHaveBeenCalledTimes(1);
    expect(replay.isError).toBe(true);
    expect(refusalOf(replay)).toMatchObject({
      code: 'REPLAY_DETECTED',
      retryable: false,
      request_id: expect.any(String),
      violations: [{ code: 'REPLAY_DETECTED', field: 'invocation.jti', actual: inv.payload.jti }],
    });
    expect(text(replay)).toContain('already allowed once');
    expect(text(replay)).toContain('invokeTool signs one per call');
    // A replay requires nothing it can name: the line says what was found, not "required (absent)".
    expect(text(replay)).toContain(`invocation.jti: got ${inv.payload.jti}`);
    expect(text(replay)).not.toContain('required (absent)');
    expect(events.filter((e) => e.type === 'refused').map((e) => e.refusal.code)).toEqual(['REPLAY_DETECTED']);
    expect((await audit.getDelegation(c.sub.hash)).usage.calls_used).toBe(1);
  });

  it('two freshly signed invocations with the same arguments run the tool twice', async () => {
    const c = await storedChain();
    const { server, search } = toolServer(batonOptions());
    const client = await connect(server);
    const call = () => searchOnce(client, c, 'q');
    expect((await call()).isError).toBeFalsy();
    expect((await call()).isError).toBeFalsy();
    expect(search).toHaveBeenCalledTimes(2);
    expect((await audit.getDelegation(c.sub.hash)).usage.calls_used).toBe(2);
  });

  it('the default onEvent says how to fix a report key without the report scope', async () => {
    const c = await storedChain();
    const { onEvent: _quiet, ...withDefaultOnEvent } = batonOptions({
      baton: { baseUrl: live.baseUrl, verifyKey: live.tenant.keys.verify, reportKey: live.tenant.keys.audit },
    });
    const { server } = toolServer(withDefaultOnEvent);
    const client = await connect(server);
    const stderr = vi.spyOn(process.stderr, 'write').mockImplementation(() => true);
    try {
      await searchOnce(client, c, 'q');
      expect(stderr.mock.calls.map((call) => String(call[0])).join('')).toContain(
        'Give withBaton a reportKey (baton.reportKey, or reportKey beside a client) holding the report scope.',
      );
    } finally {
      stderr.mockRestore();
    }
  });

  it('the default onEvent writes a replay to stderr', async () => {
    const c = await storedChain();
    const { onEvent: _quiet, ...withDefaultOnEvent } = batonOptions();
    const { server } = toolServer(withDefaultOnEvent);
    const client = await connect(server);
    const args = { tool: 'web_search', query: 'q', ...DECLARED };
    const request = attachBundle({ name: 'web_search', arguments: args }, signed(c, args).bundle);
    await client.callTool(request);
    const stderr = vi.spyOn(process.stderr, 'write').mockImplementation(() => true);
    try {
      await client.callTool(request);
      expect(stderr.mock.calls.map((call) => String(call[0])).join('')).toContain(
        'baton-mcp: refused a re-sent call to web_search (a replay, or a retry after a lost answer)',
      );
    } finally {
      stderr.mockRestore();
    }
  });
});

describe('what the server refuses itself is refused before Baton counts it', () => {
  it("arguments the input schema refuses, an unknown tool, a disabled one: the SDK's own answer, nothing counted", async () => {
    // One call allowed in all: a single counted refusal would leave the valid call CALLS_EXHAUSTED.
    const c = await storedChain({ allowed_tools: ['web_search', 'file_write'], max_calls: 1, max_cost_usd: 0.01 });
    // web_search wants a query of 3 characters at least; file_write is not registered.
    const server = new McpServer({ name: 'strict-tools', version: '1.0.0' });
    const search = vi.fn(async () => ({ content: [{ type: 'text' as const, text: 'found' }] }));
    const webSearch = server.registerTool('web_search', { inputSchema: { query: z.string().min(3) } }, search);
    withBaton(server, batonOptions());
    const client = await connect(server);
    const call = (name: string, args: Record<string, unknown>) =>
      invokeTool(client, { chain: c.chain, invoker: c.b, toolServer: TOOL_SERVER, name, arguments: { ...args, ...DECLARED } });

    const tooShort = await call('web_search', { query: 'ab' });
    expect(tooShort.isError).toBe(true);
    expect(text(tooShort)).toContain('Input validation error: Invalid arguments for tool web_search');
    expect(tooShort._meta?.[VERIFIED_META_KEY]).toBeUndefined();
    expect(text(await call('file_write', { path: '/x' }))).toContain('Tool file_write not found');
    webSearch.disable();
    expect(text(await call('web_search', { query: 'weather' }))).toContain('Tool web_search disabled');
    webSearch.enable();
    expect(search).not.toHaveBeenCalled();
    expect((await audit.getDelegation(c.sub.hash)).usage).toMatchObject({ calls_used: 0 });

    const valid = await call('web_search', { query: 'weather' });
    expect(valid.isError).toBeFalsy();
    expect(search).toHaveBeenCalledTimes(1);
  });
});

describe("the server's own checks come after the bundle's and before the verify", () => {
  it("a tool's input schema does not run for a call without a bundle", async () => {
    const effects: string[] = [];
    const server = new McpServer({ name: 'effects', version: '1.0.0' });
    server.registerTool(
      'web_search',
      {
        inputSchema: {
          query: z.string().refine(async (q) => {
            effects.push(q);
            return true;
          }),
        },
      },
      async () => ({ content: [{ type: 'text' as const, text: 'ran' }] }),
    );
    withBaton(server, batonOptions());
    const client = await connect(server);
    const refused = await client.callTool({ name: 'web_search', arguments: { tool: 'web_search', query: 'no-bundle' } });
    expect(refusalOf(refused as ToolCallResult)).toMatchObject({ code: 'BUNDLE_MISSING' });
    expect(effects).toEqual([]);
  });

  it('a task tool called without a task request is refused before Baton counts it', async () => {
    const c = await storedChain({ allowed_tools: ['web_search'], max_calls: 1, max_cost_usd: 0.01 });
    const server = new McpServer({ name: 'tasks', version: '1.0.0' });
    withBaton(server, batonOptions());
    const createTask = vi.fn();
    server.experimental.tasks.registerToolTask('web_search', { inputSchema: { query: z.string() } }, {
      createTask,
      getTask: vi.fn(),
      getTaskResult: vi.fn(),
    } as never);
    const client = await connect(server);
    const refused = await searchOnce(client, c, 'q');
    expect(refused.isError).toBe(true);
    expect(text(refused)).toContain('requires task augmentation');
    expect(createTask).not.toHaveBeenCalled();
    expect((await audit.getDelegation(c.sub.hash)).usage).toMatchObject({ calls_used: 0 });
  });

  it("Baton refusing the tool server's own key is told to the agent without the operator's instructions", async () => {
    const c = await storedChain();
    const events: BatonMcpEvent[] = [];
    const { server, search } = toolServer(
      batonOptions({ baton: { baseUrl: live.baseUrl, verifyKey: 'bk_wrong_key', timeoutMs: 5000 }, onEvent: (e) => events.push(e) }),
    );
    const refused = await searchOnce(await connect(server), c, 'q');
    expect(search).not.toHaveBeenCalled();
    expect(refusalOf(refused)).toMatchObject({ code: 'UNAUTHORIZED', retryable: false });
    expect(refusalOf(refused)!.suggestion).not.toContain('Authorization');
    expect(refusalOf(refused)!.suggestion).toContain('operator');
    expect(events.find((e) => e.type === 'refused')).toMatchObject({ error: { code: 'UNAUTHORIZED' } });
  });
});

describe('resources, prompts and completions: refused unless served ungated', () => {
  function richServer(options: BatonMcpOptions, wrapFirst: boolean) {
    const server = new McpServer({ name: 'rich', version: '1.0.0' });
    if (wrapFirst) withBaton(server, options);
    const read = vi.fn(async (uri: URL) => ({ contents: [{ uri: uri.href, text: 'TOP SECRET' }] }));
    server.registerResource('secrets', 'file:///etc/secrets', {}, read);
    // A completable argument makes the McpServer answer completion/complete.
    server.registerPrompt('greet', { argsSchema: { name: completable(z.string(), () => ['alice']) } }, ({ name }) => ({
      messages: [{ role: 'user', content: { type: 'text', text: `hello ${name}` } }],
    }));
    if (!wrapFirst) withBaton(server, options);
    return { server, read };
  }

  for (const wrapFirst of [false, true]) {
    it(`refused by default (wrapped ${wrapFirst ? 'before' : 'after'} registering them); the lists stay open`, async () => {
      const { server, read } = richServer(batonOptions(), wrapFirst);
      const client = await connect(server);
      expect((await client.listResources()).resources.map((r) => r.uri)).toEqual(['file:///etc/secrets']);
      expect((await client.listPrompts()).prompts.map((p) => p.name)).toEqual(['greet']);
      const refusal = (p: Promise<unknown>) =>
        p.then(
          () => undefined,
          (e: unknown) => e,
        );
      const resource = await refusal(client.readResource({ uri: 'file:///etc/secrets' }));
      expect(resource).toBeInstanceOf(McpError);
      expect(resource).toMatchObject({ code: BATON_REFUSAL_ERROR_CODE, data: { code: 'UNGATED_REQUEST', method: 'resources/read' } });
      expect((resource as Error).message).toContain("ungated: 'serve'");
      // The SDK's McpError prefixes its message, and the client's does again: sent once, read once.
      expect((resource as Error).message).toMatch(/^MCP error -32003: This server checks its tool calls with Baton/);
      expect(await refusal(client.getPrompt({ name: 'greet', arguments: { name: 'x' } }))).toMatchObject({
        code: BATON_REFUSAL_ERROR_CODE,
        data: { method: 'prompts/get' },
      });
      expect(read).not.toHaveBeenCalled();
    });
  }

  it('completion/complete is refused too', async () => {
    const { server } = richServer(batonOptions(), false);
    const client = await connect(server);
    const refused = await client.complete({ ref: { type: 'ref/prompt', name: 'greet' }, argument: { name: 'name', value: 'a' } }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(refused).toMatchObject({ code: BATON_REFUSAL_ERROR_CODE, data: { code: 'UNGATED_REQUEST', method: 'completion/complete' } });
  });

  it('the refusal is a whole BatonRefusal: refusalOf and explainRefusal read it, and UNGATED_REQUEST is in ERROR_TABLE', async () => {
    const { server } = richServer(batonOptions(), false);
    const client = await connect(server);
    const refused = await client.readResource({ uri: 'file:///etc/secrets' }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(isErrorCode('UNGATED_REQUEST')).toBe(true);
    const refusal = refusalOf(refused);
    expect(refusal).toEqual({
      tool: '',
      code: 'UNGATED_REQUEST',
      method: 'resources/read',
      block: null,
      message: (refused as McpError).message.replace(/^MCP error -32003: /, ''),
      suggestion: ERROR_TABLE.UNGATED_REQUEST.suggestion,
      violations: [],
      request_id: null,
      retryable: false,
    });
    // Sent whole, not filled in by refusalOf.
    expect((refused as McpError).data).toEqual(refusal);
    const text = explainRefusal(refusal!);
    expect(text).toMatch(/^This resources\/read request was refused: UNGATED_REQUEST\. It was not served\./);
    expect(text).toContain(`What to do: ${ERROR_TABLE.UNGATED_REQUEST.suggestion}`);
  });

  it('refusalOf fills the members a partial refusal lacks, and is null without a code', () => {
    const partial = new McpError(BATON_REFUSAL_ERROR_CODE, 'refused', { code: 'UNGATED_REQUEST', method: 'prompts/get' });
    const refusal = refusalOf(partial)!;
    expect(refusal).toEqual({
      tool: '',
      code: 'UNGATED_REQUEST',
      method: 'prompts/get',
      block: null,
      message: ERROR_TABLE.UNGATED_REQUEST.message,
      suggestion: ERROR_TABLE.UNGATED_REQUEST.suggestion,
      violations: [],
      request_id: null,
      retryable: false,
    });
    expect(refusal.violations.length).toBe(0);
    expect(explainRefusal(refusal)).toContain('This prompts/get request was refused: UNGATED_REQUEST.');
    // An unknown code, with members of the wrong type: still whole.
    const odd = refusalOf({
      _meta: { 'baton/refusal': { code: 'SOMETHING_ELSE', tool: 'search', violations: 'none', retryable: 'yes' } },
    })!;
    expect(odd).toMatchObject({ code: 'SOMETHING_ELSE', tool: 'search', violations: [], retryable: false, block: null, request_id: null });
    expect(typeof odd.message).toBe('string');
    expect(typeof odd.suggestion).toBe('string');
    // explainRefusal fills a partial refusal of one of Baton's codes; anything else with a string code
    // (an unknown code, an Error's 'ECONNREFUSED') is no refusal: the TypeError its docstring promises.
    expect(explainRefusal({ code: 'UNGATED_REQUEST', method: 'prompts/get' } as unknown as BatonRefusal)).toContain(
      'This prompts/get request was refused: UNGATED_REQUEST.',
    );
    expect(() => explainRefusal({ code: 'SOMETHING_ELSE' } as unknown as BatonRefusal)).toThrow(TypeError);
    expect(() => explainRefusal({ code: 'ok' } as unknown as BatonRefusal)).toThrow(TypeError);
    const refusedConnection = Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:1'), { code: 'ECONNREFUSED' });
    expect(() => explainRefusal(refusedConnection as unknown as BatonRefusal)).toThrow(TypeError);
    // An Error is no refusal even when its code is one of Baton's (a client's TIMEOUT, say).
    expect(() => explainRefusal(Object.assign(new Error('timed out'), { code: 'TIMEOUT' }) as unknown as BatonRefusal)).toThrow(TypeError);
    expect(refusalOf(new McpError(BATON_REFUSAL_ERROR_CODE, 'other', { reason: 'not Baton' }))).toBeNull();
  });

  for (const wrapFirst of [false, true]) {
    it(`a low-level Server's own resources/read handler is refused (installed ${wrapFirst ? 'after' : 'before'} wrapping)`, async () => {
      const low = new Server({ name: 'low-resources', version: '1.0.0' }, { capabilities: { resources: {}, tools: {} } });
      const read = vi.fn(async () => ({ contents: [{ uri: 'file:///s', text: 'TOP SECRET' }] }));
      if (wrapFirst) withBaton(low, batonOptions());
      low.setRequestHandler(ReadResourceRequestSchema, read);
      if (!wrapFirst) withBaton(low, batonOptions());
      const client = await connect(low);
      const refused = await client.readResource({ uri: 'file:///s' }).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(refused).toMatchObject({ code: BATON_REFUSAL_ERROR_CODE, data: { method: 'resources/read' } });
      expect(read).not.toHaveBeenCalled();
    });
  }

  it('a fallbackRequestHandler serves neither a tool call nor a resource unchecked', async () => {
    const low = new Server({ name: 'fallback', version: '1.0.0' }, { capabilities: { resources: {}, tools: {} } });
    withBaton(low, batonOptions());
    const served: string[] = [];
    low.fallbackRequestHandler = async (request) => {
      served.push(request.method);
      return (request.method === 'tools/call' ? { content: [{ type: 'text', text: 'ran' }] } : { contents: [] }) as never;
    };
    const client = await connect(low);
    const resource = await client.readResource({ uri: 'file:///s' }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(resource).toMatchObject({ code: BATON_REFUSAL_ERROR_CODE, data: { method: 'resources/read' } });
    const tool = await client.callTool({ name: 'anything', arguments: { tool: 'anything' } });
    expect(refusalOf(tool as ToolCallResult)).toMatchObject({ code: 'BUNDLE_MISSING' });
    expect(served).toEqual([]);
  });

  it("ungated: 'serve' serves them as an unwrapped server does", async () => {
    const { server, read } = richServer(batonOptions({ ungated: 'serve' }), false);
    const client = await connect(server);
    expect((await client.readResource({ uri: 'file:///etc/secrets' })).contents).toEqual([
      { uri: 'file:///etc/secrets', text: 'TOP SECRET' },
    ]);
    expect(read).toHaveBeenCalledTimes(1);
    expect(() => withBaton(new McpServer({ name: 'x', version: '1' }), batonOptions({ ungated: 'open' as never }))).toThrow(/ungated/);
  });
});

describe("the invocation's cmd must be a tools/call", () => {
  it('a chain delegated for /mcp/resources/read runs no tool: COMMAND_MISMATCH, before Baton counts anything', async () => {
    const c = await storedChain(undefined, { cmd: '/mcp/resources/read' });
    const { server, search } = toolServer(batonOptions());
    const client = await connect(server);
    const args = { tool: 'web_search', query: 'q', ...DECLARED };
    const { bundle } = signed(c, args); // cmd: the leaf's, /mcp/resources/read
    const result = await client.callTool(attachBundle({ name: 'web_search', arguments: args }, bundle));
    expect(search).not.toHaveBeenCalled();
    expect(refusalOf(result)).toMatchObject({
      code: 'COMMAND_MISMATCH',
      retryable: false,
      violations: [
        {
          code: 'COMMAND_MISMATCH',
          field: 'invocation.cmd',
          required: '/mcp/tools/call or /mcp/tools/call/web_search',
          actual: '/mcp/resources/read',
        },
      ],
    });
    expect(text(result)).toContain('Sign the invocation with cmd "/mcp/tools/call"');
    expect((await audit.getDelegation(c.sub.hash)).usage.calls_used).toBe(0);
    // invokeTool cannot widen the chain's command either.
    const viaHelper = await searchOnce(client, c, 'q');
    expect(refusalOf(viaHelper)).toMatchObject({ code: 'COMMAND_MISMATCH' });
    expect(search).not.toHaveBeenCalled();
  });

  it('cmd /mcp/tools/call/<another tool> is refused; /mcp/tools/call and /mcp/tools/call/<this tool> run it', async () => {
    const c = await storedChain();
    const { server, search } = toolServer(batonOptions());
    const client = await connect(server);
    const args = { tool: 'web_search', query: 'q', ...DECLARED };
    const callWith = (cmd: string) =>
      client.callTool(attachBundle({ name: 'web_search', arguments: args }, signed(c, args, { cmd }).bundle));

    const other = await callWith('/mcp/tools/call/file_write');
    expect(refusalOf(other)).toMatchObject({ code: 'COMMAND_MISMATCH', violations: [{ actual: '/mcp/tools/call/file_write' }] });
    expect(search).not.toHaveBeenCalled();

    expect((await callWith('/mcp/tools/call')).isError).toBeFalsy();
    expect((await callWith('/mcp/tools/call/web_search')).isError).toBeFalsy();
    expect(search).toHaveBeenCalledTimes(2);
  });

  it("invokeTool's default cmd is accepted under a leaf granted a wider or a per-tool command", async () => {
    for (const cmd of ['/mcp', '/mcp/tools/call/web_search']) {
      const c = await storedChain(undefined, { cmd });
      const { server, search } = toolServer(batonOptions());
      const client = await connect(server);
      const result = await searchOnce(client, c, 'q');
      expect(result.isError, `${cmd}: ${text(result)}`).toBeFalsy();
      expect(search).toHaveBeenCalledTimes(1);
    }
  });
});

describe('wrapping', () => {
  it('a low-level Server with its own tools/call handler is gated too', async () => {
    const c = await storedChain();
    const server = new Server({ name: 'low', version: '1.0.0' }, { capabilities: { tools: {} } });
    withBaton(server, batonOptions());
    const handler = vi.fn(async (request: { params: { name: string } }, extra: unknown) => {
      batonCall(extra)?.reportCost({ cost_usd: 0.004 });
      return { content: [{ type: 'text' as const, text: `ran ${request.params.name}` }] };
    });
    server.setRequestHandler(ListToolsRequestSchema, async () => ({
      tools: [{ name: 'web_search', inputSchema: { type: 'object' as const } }],
    }));
    server.setRequestHandler(CallToolRequestSchema, handler);
    const client = await connect(server);

    const refused = await client.callTool({ name: 'web_search', arguments: { tool: 'web_search', query: 'q' } });
    expect(refusalOf(refused)).toMatchObject({ code: 'BUNDLE_MISSING' });
    expect(handler).not.toHaveBeenCalled();

    const ok = await searchOnce(client, c, 'q');
    expect(text(ok)).toBe('ran web_search');
    expect(handler).toHaveBeenCalledTimes(1);
    expect((await audit.getDelegation(c.sub.hash)).usage.metered_usd).toBe(0.004);
  });

  it('an McpServer whose tools/call handler was installed by its constructor is gated', async () => {
    const server = new McpServer({ name: 'early', version: '1.0.0' }, { capabilities: { tools: {} } });
    const run = vi.fn(async () => ({ content: [{ type: 'text' as const, text: 'ran' }] }));
    server.registerTool('web_search', { inputSchema: { query: z.string() } }, run);
    withBaton(server, batonOptions());
    const client = await connect(server);
    const result = await client.callTool({ name: 'web_search', arguments: { tool: 'web_search', query: 'q' } });
    expect(refusalOf(result)).toMatchObject({ code: 'BUNDLE_MISSING' });
    expect(run).not.toHaveBeenCalled();
  });

  it('wrapping twice throws (a second gate would verify each invocation twice)', () => {
    const server = new McpServer({ name: 'twice', version: '1.0.0' });
    withBaton(server, batonOptions());
    expect(() => withBaton(server, batonOptions())).toThrow(/already wrapped/);
    expect(() => withBaton(new McpServer({ name: 'x', version: '1' }), { ...batonOptions(), toolServer: '' })).toThrow(/toolServer/);
  });

  it('a request handler whose schema cannot be read is refused, never installed ungated', () => {
    const low = new Server({ name: 'opaque', version: '1.0.0' }, { capabilities: { tools: {} } });
    withBaton(low, batonOptions());
    const unreadable = new Proxy(
      {},
      {
        get() {
          throw new Error('unreadable schema');
        },
      },
    );
    expect(() => low.setRequestHandler(unreadable as never, async () => ({}) as never)).toThrow(
      /cannot tell which request a handler answers/,
    );
  });

  it('a Client is not a server: it is refused, at compile time and at run time, rather than gate nothing', () => {
    const client = new Client({ name: 'agent', version: '1.0.0' });
    // @ts-expect-error a Client has setRequestHandler, but no tools/call of its own to gate
    expect(() => withBaton(client, batonOptions())).toThrow(/expected an McpServer or a Server/);
  });
});
