/**
 * withBaton at its edges, against the real Baton service on real PostgreSQL: a bundle in `_meta`
 * is read as strictly as Baton reads the X-DRS-Bundle header, a task tool's cost is reported when
 * its task completes, and an oversized call is explained to the agent without the operator's
 * settings.
 */
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { InMemoryTaskStore } from '@modelcontextprotocol/sdk/experimental/tasks/stores/in-memory.js';
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { z } from 'zod';
import {
  attachBundle,
  batonCall,
  bundleFromMeta,
  DRS_BUNDLE_META_KEY,
  DRS_BUNDLE_META_KEY_NEXT,
  encodeBundle,
  refusalOf,
  withBaton,
  type BatonMcpEvent,
  type BatonMcpOptions,
  type ToolCallResult,
} from '../../src/mcp/middleware.js';
import { BatonClient } from '../../src/sdk/client.js';
import { generateKeyPair, type KeyPair } from '../../src/sdk/keys.js';
import { createInvocation, createRootDelegation, createSubDelegation, makeBundle, type SignedDelegation } from '../../src/sdk/records.js';
import { startLiveService, type LiveService } from '../sdk/live-service.js';

const TOOL_SERVER = 'mcp://edge-tools';
const DECLARED = { estimated_cost_usd: 0.003, pii_access: false, write_access: false };

let live: LiveService;
let audit: BatonClient;
const cleanups: (() => Promise<unknown>)[] = [];

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

interface Chain {
  readonly b: KeyPair;
  readonly sub: SignedDelegation;
  readonly chain: readonly SignedDelegation[];
}

async function storedChain(): Promise<Chain> {
  const a = generateKeyPair();
  const b = generateKeyPair();
  const policy = { allowed_tools: ['web_search'], max_calls: 10, max_cost_usd: 0.05, write_access: false, pii_access: false };
  const root = createRootDelegation({ issuer: live.tenant.root, audience: a.did, policy });
  const sub = createSubDelegation({ parent: root, issuer: a, audience: b.did, policy });
  await new BatonClient({ baseUrl: live.baseUrl }).submit([root, sub]);
  return { b, sub, chain: [root, sub] };
}

function signed(c: Chain, args: Record<string, unknown>) {
  const inv = createInvocation({ chain: c.chain, invoker: c.b, args, toolServer: TOOL_SERVER });
  return makeBundle(inv, c.chain, 'reference');
}

function batonOptions(overrides: Partial<BatonMcpOptions> = {}): BatonMcpOptions {
  return {
    baton: { baseUrl: live.baseUrl, verifyKey: live.tenant.keys.verify, reportKey: live.tenant.keys.report, timeoutMs: 5000 },
    toolServer: TOOL_SERVER,
    onEvent: () => undefined,
    ...overrides,
  };
}

async function connect(server: McpServer): Promise<Client> {
  const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
  await server.connect(serverSide);
  const client = new Client({ name: 'edge-agent', version: '1.0.0' });
  await client.connect(clientSide);
  cleanups.push(
    () => client.close(),
    () => server.close(),
  );
  return client;
}

const text = (r: ToolCallResult): string => ((r as { content: { text?: string }[] }).content ?? []).map((c) => c.text ?? '').join('\n');

describe('a bundle in _meta is read as strictly as the X-DRS-Bundle header', () => {
  it('padded base64url is refused in _meta, as Baton refuses it in the header; unpadded runs', async () => {
    const c = await storedChain();
    const server = new McpServer({ name: 'edge', version: '1.0.0' });
    const search = vi.fn(async () => ({ content: [{ type: 'text' as const, text: 'ok' }] }));
    server.registerTool('web_search', { inputSchema: { query: z.string() } }, search);
    withBaton(server, batonOptions());
    const client = await connect(server);
    // Arguments whose encoded bundle needs padding, so the padded form is what a padding encoder writes.
    let args: Record<string, unknown> = { tool: 'web_search', query: 'q', ...DECLARED };
    let bundle = signed(c, args);
    while (encodeBundle(bundle).length % 4 === 0) bundle = signed(c, (args = { ...args, query: `${String(args['query'])}q` }));
    const encoded = encodeBundle(bundle);
    const padded = encoded + '='.repeat(4 - (encoded.length % 4));

    // The header path: Baton refuses the padded header.
    const header = await live.svc.call('POST', '/v1/verify', {
      key: live.tenant.keys.verify,
      json: { body: args, require_binding: true },
      headers: { 'x-drs-bundle': padded },
    });
    expect(header.status, JSON.stringify(header.body)).toBe(400);
    expect(JSON.stringify(header.body)).toContain('not base64url');

    for (const key of [DRS_BUNDLE_META_KEY, DRS_BUNDLE_META_KEY_NEXT]) {
      expect(bundleFromMeta({ [key]: padded })).toMatchObject({ ok: false, code: 'BUNDLE_MALFORMED' });
      const refused = await client.callTool({ name: 'web_search', arguments: args, _meta: { [key]: padded } });
      expect(refusalOf(refused)).toMatchObject({ code: 'BUNDLE_MALFORMED' });
    }
    expect(search).not.toHaveBeenCalled();
    const ran = await client.callTool(attachBundle({ name: 'web_search', arguments: args }, bundle));
    expect(ran.isError, JSON.stringify(ran)).toBeFalsy();
    expect(search).toHaveBeenCalledTimes(1);
  });
});

describe('a task tool reports its cost when the task completes', () => {
  /** An McpServer with a task store and a web_search task tool, whose work `finish` does later. */
  function taskServer(
    options: BatonMcpOptions,
    finish: (extra: never, taskId: string, store: InMemoryTaskStore) => Promise<void>,
    taskSupport: 'required' | 'optional' = 'required',
  ) {
    const taskStore = new InMemoryTaskStore();
    const server = new McpServer(
      { name: 'tasks', version: '1.0.0' },
      { capabilities: { tasks: { requests: { tools: { call: {} } } } }, taskStore },
    );
    server.experimental.tasks.registerToolTask('web_search', { inputSchema: { query: z.string() }, execution: { taskSupport } }, {
      createTask: async (
        _args: unknown,
        extra: { taskStore: { createTask(p: { ttl: number; pollInterval: number }): Promise<{ taskId: string }> } },
      ) => {
        const task = await extra.taskStore.createTask({ ttl: 60_000, pollInterval: 20 });
        setTimeout(() => void finish(extra as never, task.taskId, taskStore), 30);
        return { task };
      },
      getTask: async (_args: unknown, extra: { taskId: string; taskStore: { getTask(id: string): Promise<unknown> } }) =>
        extra.taskStore.getTask(extra.taskId),
      getTaskResult: async (_args: unknown, extra: { taskId: string; taskStore: { getTaskResult(id: string): Promise<unknown> } }) =>
        extra.taskStore.getTaskResult(extra.taskId),
    } as never);
    withBaton(server, options);
    return server;
  }

  async function runTask(client: Client, c: Chain) {
    const args = { tool: 'web_search', query: 'slow', ...DECLARED };
    const params = attachBundle({ name: 'web_search', arguments: args }, signed(c, args));
    const messages: { type: string }[] = [];
    for await (const m of client.experimental.tasks.callToolStream(params as never, undefined, { task: { ttl: 60_000 } })) messages.push(m);
    return messages;
  }

  async function reported(events: BatonMcpEvent[]) {
    await vi.waitFor(() => expect(events.some((e) => e.type === 'reported' || e.type === 'report-failed')).toBe(true), { timeout: 5000 });
    return events.find((e) => e.type === 'reported' || e.type === 'report-failed')!;
  }

  it("the cost in the task result's _meta, stored through the request's task store", async () => {
    const c = await storedChain();
    const events: BatonMcpEvent[] = [];
    const server = taskServer(batonOptions({ onEvent: (e) => events.push(e) }), async (extra, taskId) => {
      const store = (extra as { taskStore: { storeTaskResult(id: string, s: string, r: unknown): Promise<void> } }).taskStore;
      await store.storeTaskResult(taskId, 'completed', {
        content: [{ type: 'text', text: 'done' }],
        _meta: { cost_usd: 0.0021, source: 'api-usage' },
      });
    });
    const messages = await runTask(await connect(server), c);
    expect(messages.at(-1)).toMatchObject({ type: 'result' });
    const event = await reported(events);
    expect(event).toMatchObject({ type: 'reported', tool: 'web_search', actual: { cost_usd: 0.0021, source: 'api-usage' } });
    const inv = await audit.getInvocation((event as { invocationId: string }).invocationId);
    expect(inv).toMatchObject({ actual: { cost_usd: 0.0021, source: 'api-usage' } });
  });

  it('a cost given to batonCall(extra).reportCost after the handler returned', async () => {
    const c = await storedChain();
    const events: BatonMcpEvent[] = [];
    const server = taskServer(batonOptions({ onEvent: (e) => events.push(e) }), async (extra, taskId, store) => {
      batonCall(extra)!.reportCost({ cost_usd: 0.0013, tokens_in: 10 });
      // Stored through the server's own store, which the middleware does not see.
      await store.storeTaskResult(taskId, 'completed', { content: [{ type: 'text', text: 'done' }] });
    });
    await runTask(await connect(server), c);
    const event = await reported(events);
    expect(event).toMatchObject({ type: 'reported', actual: { cost_usd: 0.0013, tokens_in: 10, source: 'harness-reported' } });
    const inv = await audit.getInvocation((event as { invocationId: string }).invocationId);
    expect(inv).toMatchObject({ actual: { cost_usd: 0.0013, tokens_in: 10 } });
  });
});

describe('a task tool called without a task request (taskSupport optional)', () => {
  it('answers once the task is done, with its cost reported once, before the answer', async () => {
    const c = await storedChain();
    const events: BatonMcpEvent[] = [];
    const taskStore = new InMemoryTaskStore();
    const server = new McpServer(
      { name: 'tasks', version: '1.0.0' },
      { capabilities: { tasks: { requests: { tools: { call: {} } } } }, taskStore },
    );
    server.experimental.tasks.registerToolTask(
      'web_search',
      { inputSchema: { query: z.string() }, execution: { taskSupport: 'optional' } },
      {
        createTask: async (
          _args: unknown,
          extra: { taskStore: InMemoryTaskStore & { createTask(p: object): Promise<{ taskId: string }> } },
        ) => {
          const task = await extra.taskStore.createTask({ ttl: 60_000, pollInterval: 20 });
          setTimeout(
            () =>
              void (extra.taskStore as unknown as { storeTaskResult(id: string, s: string, r: unknown): Promise<void> }).storeTaskResult(
                task.taskId,
                'completed',
                { content: [{ type: 'text', text: 'done' }], _meta: { cost_usd: 0.0017 } },
              ),
            30,
          );
          return { task };
        },
        getTask: async () => undefined,
        getTaskResult: async () => undefined,
      } as never,
    );
    withBaton(server, batonOptions({ onEvent: (e) => events.push(e) }));
    const client = await connect(server);
    const args = { tool: 'web_search', query: 'polled', ...DECLARED };
    const result = await client.callTool(attachBundle({ name: 'web_search', arguments: args }, signed(c, args)));
    expect(result.isError, JSON.stringify(result)).toBeFalsy();
    expect(text(result)).toBe('done');
    expect((result._meta as Record<string, unknown>)['baton/verified']).toMatchObject({ cost_reported: true });
    await new Promise((r) => setTimeout(r, 100));
    expect(events.filter((e) => e.type === 'reported')).toHaveLength(1);
    expect(events.filter((e) => e.type === 'report-failed')).toHaveLength(0);
  });
});

describe('a call too large for Baton', () => {
  it("is explained to the agent without the operator's settings; the operator's event has them", async () => {
    const c = await storedChain();
    const events: BatonMcpEvent[] = [];
    const server = new McpServer({ name: 'edge', version: '1.0.0' });
    const search = vi.fn(async () => ({ content: [{ type: 'text' as const, text: 'ok' }] }));
    server.registerTool('web_search', { inputSchema: { query: z.string() } }, search);
    withBaton(server, batonOptions({ onEvent: (e) => events.push(e) }));
    const client = await connect(server);
    const args = { tool: 'web_search', query: 'x'.repeat(256 * 1024), ...DECLARED };
    const refused = await client.callTool(attachBundle({ name: 'web_search', arguments: args }, signed(c, args)));
    expect(search).not.toHaveBeenCalled();
    expect(refusalOf(refused)).toMatchObject({ code: 'PAYLOAD_TOO_LARGE', retryable: false });
    expect(text(refused)).not.toMatch(/BATON_MAX_BODY_BYTES|256 KiB/);
    expect(JSON.stringify(refusalOf(refused))).not.toContain('BATON_MAX_BODY_BYTES');
    expect(refusalOf(refused)!.suggestion).toMatch(/smaller arguments/);
    const event = events.find((e) => e.type === 'refused') as Extract<BatonMcpEvent, { type: 'refused' }>;
    expect((event.error as { suggestion?: string }).suggestion).toContain('BATON_MAX_BODY_BYTES');
  });
});
