/**
 * withBaton at its edges, against the real Baton service on real PostgreSQL: a bundle in `_meta`
 * is read as strictly as Baton reads the X-DRS-Bundle header, a task tool's cost is reported when
 * its task completes, an oversized call is explained to the agent without the operator's
 * settings, and a refusal thrown as an error is read by its shape, whichever class carries it.
 */
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { InMemoryTaskStore } from '@modelcontextprotocol/sdk/experimental/tasks/stores/in-memory.js';
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { CreateTaskResultSchema, McpError } from '@modelcontextprotocol/sdk/types.js';
import { describe, expect, it, vi } from 'vitest';
import { z } from 'zod';
import {
  attachBundle,
  BATON_REFUSAL_ERROR_CODE,
  batonCall,
  bundleFromMeta,
  DRS_BUNDLE_META_KEY,
  DRS_BUNDLE_META_KEY_NEXT,
  encodeBundle,
  explainRefusal,
  refusalOf,
  withBaton,
  type BatonMcpEvent,
  type BatonMcpOptions,
  type ToolCallResult,
} from '../../src/mcp/middleware.js';
import { createInvocation, makeBundle } from '../../src/sdk/records.js';
import { audit, batonOptions, cleanups, DECLARED, live, storedChain, useLiveBaton, type Chain } from './live-baton.js';

const TOOL_SERVER = 'mcp://edge-tools';
useLiveBaton(TOOL_SERVER);

const EDGE_POLICY = { allowed_tools: ['web_search'], max_calls: 10, max_cost_usd: 0.05, write_access: false, pii_access: false };
const edgeChain = () => storedChain(EDGE_POLICY, { rootPolicy: EDGE_POLICY });

function signed(c: Chain, args: Record<string, unknown>) {
  const inv = createInvocation({ chain: c.chain, invoker: c.b, args, toolServer: TOOL_SERVER });
  return makeBundle(inv, c.chain, 'reference');
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
    const c = await edgeChain();
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
  /**
   * An McpServer with a task store and a web_search task tool, whose work `finish` does later. The
   * task is created through the request's task store (extra.taskStore, as the SDK's examples do),
   * or with `createdThrough: 'server'` through the server's own store, which the middleware does not see.
   */
  function taskServer(
    options: BatonMcpOptions,
    finish: (extra: never, taskId: string, store: InMemoryTaskStore) => Promise<void>,
    taskSupport: 'required' | 'optional' = 'required',
    createdThrough: 'request' | 'server' = 'request',
  ) {
    const taskStore = new InMemoryTaskStore();
    const server = new McpServer(
      { name: 'tasks', version: '1.0.0' },
      { capabilities: { tasks: { requests: { tools: { call: {} } }, list: {}, cancel: {} } }, taskStore },
    );
    server.experimental.tasks.registerToolTask('web_search', { inputSchema: { query: z.string() }, execution: { taskSupport } }, {
      createTask: async (
        _args: unknown,
        extra: {
          taskStore: { createTask(p: { ttl: number; pollInterval: number }): Promise<{ taskId: string }> };
          requestId: string | number;
          sessionId?: string;
        },
      ) => {
        const task =
          createdThrough === 'request'
            ? await extra.taskStore.createTask({ ttl: 60_000, pollInterval: 20 })
            : await taskStore.createTask({ ttl: 60_000, pollInterval: 20 }, extra.requestId, { method: 'tools/call' }, extra.sessionId);
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

  /** The call's one cost report: `actual` reported, and what Baton then holds for the invocation. */
  async function expectCostReported(events: BatonMcpEvent[], actual: Record<string, unknown>) {
    const event = await reported(events);
    expect(event).toMatchObject({ type: 'reported', tool: 'web_search', actual });
    expect(await audit.getInvocation((event as { invocationId: string }).invocationId)).toMatchObject({ actual });
    return event;
  }

  /** A task store as a task tool's work uses it (extra.taskStore). */
  type WorkStore = {
    getTask(id: string): Promise<{ status: string }>;
    storeTaskResult(id: string, s: string, r: unknown): Promise<void>;
    updateTaskStatus(id: string, s: string, m?: string): Promise<void>;
  };
  const workStore = (extra: never) => (extra as { taskStore: WorkStore }).taskStore;

  /** Asks for a task of web_search; its task id. */
  async function createTask(client: Client, c: Chain, query: string): Promise<string> {
    const args = { tool: 'web_search', query, ...DECLARED };
    const params = attachBundle({ name: 'web_search', arguments: args }, signed(c, args));
    return (await client.request({ method: 'tools/call', params: { ...params, task: { ttl: 60_000 } } }, CreateTaskResultSchema)).task
      .taskId;
  }

  const costEvents = (events: BatonMcpEvent[]) => events.filter((e) => e.type === 'reported' || e.type === 'report-failed');

  it("the cost in the task result's _meta, stored through the request's task store", async () => {
    const c = await edgeChain();
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
    await expectCostReported(events, { cost_usd: 0.0021, source: 'api-usage' });
  });

  it('the last cost given to batonCall(extra).reportCost before the result is stored', async () => {
    const c = await edgeChain();
    const events: BatonMcpEvent[] = [];
    const server = taskServer(batonOptions({ onEvent: (e) => events.push(e) }), async (extra, taskId) => {
      const call = batonCall(extra)!;
      call.reportCost({ cost_usd: 0.001 });
      call.reportCost({ cost_usd: 0.04, tokens_in: 40 });
      const store = (extra as { taskStore: { storeTaskResult(id: string, s: string, r: unknown): Promise<void> } }).taskStore;
      await store.storeTaskResult(taskId, 'completed', { content: [{ type: 'text', text: 'done' }], _meta: { cost_usd: 0.002 } });
    });
    await runTask(await connect(server), c);
    const event = await reported(events);
    expect(event).toMatchObject({ type: 'reported', actual: { cost_usd: 0.04, tokens_in: 40, source: 'harness-reported' } });
    const inv = await audit.getInvocation((event as { invocationId: string }).invocationId);
    expect(inv).toMatchObject({ actual: { cost_usd: 0.04, tokens_in: 40 } });
    await new Promise((r) => setTimeout(r, 100));
    expect(events.filter((e) => e.type === 'reported' || e.type === 'report-failed')).toHaveLength(1);
  });

  it('a task that fails with no result stored: the cost given to reportCost is reported when its status is set', async () => {
    const c = await edgeChain();
    const events: BatonMcpEvent[] = [];
    const server = taskServer(batonOptions({ onEvent: (e) => events.push(e) }), async (extra, taskId) => {
      batonCall(extra)!.reportCost({ cost_usd: 0.0025 });
      const store = (extra as { taskStore: { updateTaskStatus(id: string, s: string, m?: string): Promise<void> } }).taskStore;
      await store.updateTaskStatus(taskId, 'failed', 'the search engine is down');
    });
    await runTask(await connect(server), c);
    await expectCostReported(events, { cost_usd: 0.0025 });
  });

  it('a task the agent cancelled: the cost in the result the store refuses is still reported', async () => {
    const c = await edgeChain();
    const events: BatonMcpEvent[] = [];
    let cancelled!: () => void;
    const cancelledNow = new Promise<void>((r) => (cancelled = r));
    let refusal: unknown;
    const server = taskServer(batonOptions({ onEvent: (e) => events.push(e) }), async (extra, taskId) => {
      await cancelledNow;
      // The work ran to the end, and cost what it says; the store refuses its result.
      const store = (extra as { taskStore: { storeTaskResult(id: string, s: string, r: unknown): Promise<void> } }).taskStore;
      await store
        .storeTaskResult(taskId, 'completed', {
          content: [{ type: 'text', text: 'done' }],
          _meta: { cost_usd: 0.0031, source: 'api-usage' },
        })
        .catch((e: unknown) => (refusal = e));
    });
    const client = await connect(server);
    const args = { tool: 'web_search', query: 'cancelled', ...DECLARED };
    const params = attachBundle({ name: 'web_search', arguments: args }, signed(c, args));
    const created = await client.request({ method: 'tools/call', params: { ...params, task: { ttl: 60_000 } } }, CreateTaskResultSchema);
    await client.experimental.tasks.cancelTask(created.task.taskId);
    cancelled();
    await expectCostReported(events, { cost_usd: 0.0031, source: 'api-usage' });
    expect(String(refusal)).toContain("terminal status 'cancelled'");
  });

  it('a task created where the middleware cannot see it: the last reportCost, taskEndGraceMs after it', async () => {
    const c = await edgeChain();
    const events: BatonMcpEvent[] = [];
    const server = taskServer(
      batonOptions({ onEvent: (e) => events.push(e), taskEndGraceMs: 1_000 }),
      async (extra, taskId, store) => {
        batonCall(extra)!.reportCost({ cost_usd: 0.0013, tokens_in: 10 });
        // Its result may never be seen: this one is stored through the server's own store.
        await store.storeTaskResult(taskId, 'completed', { content: [{ type: 'text', text: 'done' }] });
        batonCall(extra)!.reportCost({ cost_usd: 0.002, tokens_in: 10 });
      },
      'required',
      'server',
    );
    await runTask(await connect(server), c);
    const event = await reported(events);
    expect(event).toMatchObject({ type: 'reported', actual: { cost_usd: 0.002, tokens_in: 10, source: 'harness-reported' } });
    const inv = await audit.getInvocation((event as { invocationId: string }).invocationId);
    expect(inv).toMatchObject({ actual: { cost_usd: 0.002, tokens_in: 10 } });
    expect(costEvents(events)).toHaveLength(1);
  });

  it('a task the agent cancels, whose work stops on seeing it: the cost recorded is reported, for that task only', async () => {
    const c = await edgeChain();
    const events: BatonMcpEvent[] = [];
    let release!: () => void;
    const released = new Promise<void>((r) => (release = r));
    /** What the n-th task's work costs: after its first part, and in all if it runs to the end. */
    const costs = [
      { firstPart: 0.001, whole: 0.0015 },
      { firstPart: 0.002, whole: 0.0025 },
    ];
    const invocationOf = new Map<string, { jti: string; cost: (typeof costs)[number] }>();
    const server = taskServer(batonOptions({ onEvent: (e) => events.push(e), taskEndGraceMs: 100 }), async (extra, taskId) => {
      const call = batonCall(extra)!;
      const cost = costs[invocationOf.size]!;
      invocationOf.set(taskId, { jti: call.invocationId, cost });
      call.reportCost({ cost_usd: cost.firstPart }); // the expensive part ran, metered
      await released;
      // A task that honours tasks/cancel learns of it from the store, and stops: no result, no status.
      if ((await workStore(extra).getTask(taskId)).status === 'cancelled') return;
      call.reportCost({ cost_usd: cost.whole });
      await workStore(extra).storeTaskResult(taskId, 'completed', { content: [{ type: 'text', text: 'done' }] });
    });
    const client = await connect(server);
    const cancelled = await createTask(client, c, 'one');
    const running = await createTask(client, c, 'two');
    await vi.waitFor(() => expect(invocationOf.size).toBe(2));
    await client.experimental.tasks.cancelTask(cancelled);
    // The cancel reports nothing of the other task, still running.
    await new Promise((r) => setTimeout(r, 150));
    expect(costEvents(events).map((e) => e.invocationId)).not.toContain(invocationOf.get(running)!.jti);
    release();
    await vi.waitFor(() => expect(costEvents(events)).toHaveLength(2), { timeout: 5000 });
    const stored = async (taskId: string) => ((await audit.getInvocation(invocationOf.get(taskId)!.jti)) as { actual?: unknown }).actual;
    expect(await stored(cancelled)).toMatchObject({ cost_usd: invocationOf.get(cancelled)!.cost.firstPart });
    expect(await stored(running)).toMatchObject({ cost_usd: invocationOf.get(running)!.cost.whole });
    expect(costEvents(events).every((e) => e.type === 'reported')).toBe(true);
    await new Promise((r) => setTimeout(r, 200));
    expect(costEvents(events)).toHaveLength(2);
  });

  it('a task the agent cancels, whose work says nothing more: the cost recorded is reported after taskEndGraceMs', async () => {
    const c = await edgeChain();
    const events: BatonMcpEvent[] = [];
    let recorded!: () => void;
    const costRecorded = new Promise<void>((r) => (recorded = r));
    const server = taskServer(batonOptions({ onEvent: (e) => events.push(e), taskEndGraceMs: 50 }), async (extra) => {
      batonCall(extra)!.reportCost({ cost_usd: 0.0019 });
      recorded(); // and nothing more: only the agent's tasks/cancel ends the task
    });
    const client = await connect(server);
    const taskId = await createTask(client, c, 'cancel-silent');
    await costRecorded;
    await client.experimental.tasks.cancelTask(taskId);
    await expectCostReported(events, { cost_usd: 0.0019 });
  });

  it('a task cancelled before any cost, and again: the running total its work reports within taskEndGraceMs is reported, once', async () => {
    const c = await edgeChain();
    const events: BatonMcpEvent[] = [];
    let cancelled!: () => void;
    const cancelledNow = new Promise<void>((r) => (cancelled = r));
    // The grace is long beside the work's steps, so that a loaded machine's late timers cannot end
    // it between two of them (a 100 ms grace against a 60 ms step failed so under load).
    const server = taskServer(batonOptions({ onEvent: (e) => events.push(e), taskEndGraceMs: 1_000 }), async (extra, taskId) => {
      await cancelledNow;
      expect((await workStore(extra).getTask(taskId)).status).toBe('cancelled');
      // What ran before the work stopped, as a running total: each value restarts the grace.
      batonCall(extra)!.reportCost({ cost_usd: 0.0001 });
      await new Promise((r) => setTimeout(r, 20));
      batonCall(extra)!.reportCost({ cost_usd: 0.0016 });
      await vi.waitFor(() => expect(costEvents(events)).toHaveLength(1), { timeout: 5000 });
      batonCall(extra)!.reportCost({ cost_usd: 0.0018 }); // after the cost was read: refused
    });
    const client = await connect(server);
    const taskId = await createTask(client, c, 'cancel-early');
    await client.experimental.tasks.cancelTask(taskId);
    await expect(client.experimental.tasks.cancelTask(taskId)).rejects.toThrow(/terminal status/);
    await expect(client.experimental.tasks.cancelTask('no-such-task')).rejects.toThrow(/not found/i);
    cancelled();
    await vi.waitFor(() => expect(costEvents(events)).toHaveLength(2), { timeout: 5000 });
    expect(costEvents(events)).toMatchObject([
      { type: 'reported', actual: { cost_usd: 0.0016 } },
      { type: 'report-failed', error: { message: expect.stringContaining('was not reported') } },
    ]);
    const inv = await audit.getInvocation(costEvents(events)[0]!.invocationId);
    expect(inv).toMatchObject({ actual: { cost_usd: 0.0016 } });
  });

  it('a task cancelled mid-way whose work goes on: the last running total, read when it stores its result', async () => {
    const c = await edgeChain();
    const events: BatonMcpEvent[] = [];
    let cancelled!: () => void;
    const cancelledNow = new Promise<void>((r) => (cancelled = r));
    let firstStepDone!: () => void;
    const firstStep = new Promise<void>((r) => (firstStepDone = r));
    let refusal: unknown;
    // The default grace (30 s) is not waited for: storing the result reads the cost.
    const server = taskServer(batonOptions({ onEvent: (e) => events.push(e) }), async (extra, taskId) => {
      const call = batonCall(extra)!;
      call.reportCost({ cost_usd: 0.0001 });
      firstStepDone();
      await cancelledNow; // the work does not look for the cancel, and runs its next steps
      call.reportCost({ cost_usd: 0.003 });
      await new Promise((r) => setTimeout(r, 20));
      call.reportCost({ cost_usd: 0.0045 });
      await workStore(extra)
        .storeTaskResult(taskId, 'completed', { content: [{ type: 'text', text: 'done' }] })
        .catch((e: unknown) => (refusal = e));
    });
    const client = await connect(server);
    const taskId = await createTask(client, c, 'cancel-mid-way');
    await firstStep;
    await client.experimental.tasks.cancelTask(taskId);
    cancelled();
    await expectCostReported(events, { cost_usd: 0.0045 });
    expect(String(refusal)).toContain("terminal status 'cancelled'");
    await new Promise((r) => setTimeout(r, 100));
    expect(costEvents(events)).toHaveLength(1);
  });

  it('a task its work sets failed with no cost: the call ends unreported, and a later reportCost is refused', async () => {
    const c = await edgeChain();
    const events: BatonMcpEvent[] = [];
    let jti = '';
    const server = taskServer(batonOptions({ onEvent: (e) => events.push(e) }), async (extra, taskId) => {
      jti = batonCall(extra)!.invocationId;
      await workStore(extra).updateTaskStatus(taskId, 'failed', 'the search engine is down');
      batonCall(extra)!.reportCost({ cost_usd: 0.0012 });
    });
    await createTask(await connect(server), c, 'failed-unmetered');
    await vi.waitFor(() => expect(costEvents(events)).toHaveLength(1), { timeout: 5000 });
    expect(costEvents(events)).toMatchObject([
      { type: 'report-failed', actual: null, error: { message: expect.stringContaining('was not reported') } },
    ]);
    expect(await audit.getInvocation(jti)).toMatchObject({ actual: null });
  });

  it('a task ended where the middleware does not see it: the last cost reported after its end, taskEndGraceMs after it', async () => {
    const c = await edgeChain();
    const events: BatonMcpEvent[] = [];
    const server = taskServer(batonOptions({ onEvent: (e) => events.push(e), taskEndGraceMs: 1_000 }), async (extra, taskId, store) => {
      // The server's own store, not extra.taskStore: the middleware is not told.
      await store.updateTaskStatus(taskId, 'failed', 'the search engine is down');
      batonCall(extra)!.reportCost({ cost_usd: 0.0017 });
      await new Promise((r) => setTimeout(r, 20));
      batonCall(extra)!.reportCost({ cost_usd: 0.0019 });
    });
    await createTask(await connect(server), c, 'unseen-end');
    await expectCostReported(events, { cost_usd: 0.0019 });
  });

  it('the agent closing its session reads no cost early: the work goes on, and what it stores afterwards is reported', async () => {
    const c = await edgeChain();
    const events: BatonMcpEvent[] = [];
    let closed!: () => void;
    const sessionClosed = new Promise<void>((r) => (closed = r));
    const server = taskServer(batonOptions({ onEvent: (e) => events.push(e) }), async (extra, taskId) => {
      await sessionClosed; // the paid step, in flight when the agent hangs up
      await workStore(extra)
        .storeTaskResult(taskId, 'completed', { content: [{ type: 'text', text: 'done' }], _meta: { cost_usd: 0.009 } })
        .catch(() => undefined);
    });
    const client = await connect(server);
    await createTask(client, c, 'hung-up');
    await client.close();
    await new Promise((r) => setTimeout(r, 50));
    expect(costEvents(events)).toHaveLength(0);
    closed();
    await expectCostReported(events, { cost_usd: 0.009 });
  });

  for (const [createdThrough, cancelled] of [
    ['server', false],
    ['request', true],
  ] as const) {
    it(`a long task reporting a running total is read after a quiet grace, however long it runs (created through the ${createdThrough === 'server' ? "server's own store" : 'request store'}${cancelled ? ', the agent cancelling it at once' : ''})`, async () => {
      const c = await edgeChain();
      const events: BatonMcpEvent[] = [];
      const steps = 56;
      const server = taskServer(
        batonOptions({ onEvent: (e) => events.push(e), taskEndGraceMs: 500 }),
        async (extra) => {
          // Longer in all than ten graces (5.6 s against 5 s), never quiet for one (100 ms against 500,
          // slack for a loaded machine's late timers): a cap (once, ten graces from a cancel) would
          // read the total a few steps short.
          for (let step = 1; step <= steps; step++) {
            batonCall(extra)!.reportCost({ cost_usd: step / 1000 });
            await new Promise((r) => setTimeout(r, 100));
          }
        },
        'required',
        createdThrough,
      );
      const client = await connect(server);
      const taskId = await createTask(client, c, `long-${createdThrough}`);
      if (cancelled) await client.experimental.tasks.cancelTask(taskId);
      await vi.waitFor(() => expect(costEvents(events)).toHaveLength(1), { timeout: 20_000, interval: 100 });
      expect(costEvents(events)[0]).toMatchObject({ type: 'reported', actual: { cost_usd: steps / 1000 } });
      await new Promise((r) => setTimeout(r, 100));
      expect(costEvents(events)).toHaveLength(1);
    });
  }

  it('a call without a task request whose task the McpServer polls: cancelled, the cost its work reports afterwards is reported', async () => {
    const c = await edgeChain();
    const events: BatonMcpEvent[] = [];
    let cancelled!: () => void;
    const cancelledNow = new Promise<void>((r) => (cancelled = r));
    const server = taskServer(
      batonOptions({ onEvent: (e) => events.push(e) }),
      async (extra, taskId) => {
        await cancelledNow; // the paid step, in flight when the agent cancels
        batonCall(extra)!.reportCost({ cost_usd: 0.004 });
        await workStore(extra)
          .storeTaskResult(taskId, 'completed', { content: [{ type: 'text', text: 'done' }] })
          .catch(() => undefined); // refused: the task was cancelled
      },
      'optional',
    );
    const client = await connect(server);
    const args = { tool: 'web_search', query: 'polled-cancelled', ...DECLARED };
    const answer = client.callTool(attachBundle({ name: 'web_search', arguments: args }, signed(c, args)));
    // The agent finds the task behind its call, and cancels it.
    const tasks = await vi.waitFor(async () => {
      const listed = (await client.experimental.tasks.listTasks()).tasks;
      expect(listed).toHaveLength(1);
      return listed;
    });
    await client.experimental.tasks.cancelTask(tasks[0]!.taskId);
    // The McpServer answers with an error at once (the task has no result), while the work goes on.
    expect((await answer).isError).toBe(true);
    expect(costEvents(events)).toHaveLength(0);
    cancelled();
    const event = await reported(events);
    expect(event).toMatchObject({ type: 'reported', actual: { cost_usd: 0.004, source: 'harness-reported' } });
    const inv = await audit.getInvocation((event as { invocationId: string }).invocationId);
    expect(inv).toMatchObject({ actual: { cost_usd: 0.004 } });
  });
});

describe("a tool's answer is read as a task only for a task request", () => {
  it('an answer with no content and a task field, to a plain call: its cost is reported at once', async () => {
    const c = await edgeChain();
    const events: BatonMcpEvent[] = [];
    const server = new McpServer({ name: 'edge', version: '1.0.0' });
    // Wrapped before the tool is registered, the gate sees the handler's answer before the SDK
    // checks it as a CallToolResult (which gives it `content: []`).
    withBaton(server, batonOptions({ onEvent: (e) => events.push(e) }));
    server.registerTool('web_search', { inputSchema: { query: z.string() } }, async () => ({
      content: undefined as never,
      task: { taskId: 'not-a-task' },
      _meta: { cost_usd: 0.0011 },
    }));
    const client = await connect(server);
    const args = { tool: 'web_search', query: 'plain', ...DECLARED };
    const result = await client.callTool(attachBundle({ name: 'web_search', arguments: args }, signed(c, args)));
    expect(result.isError, JSON.stringify(result)).toBeFalsy();
    const event = events.find((e) => e.type === 'reported');
    expect(event).toMatchObject({ actual: { cost_usd: 0.0011 } });
    const inv = await audit.getInvocation((event as { invocationId: string }).invocationId);
    expect(inv).toMatchObject({ actual: { cost_usd: 0.0011 } });
  });
});

describe("the request's task store, as the handler gets it", () => {
  /** A task store of a class with #private state behind a setter (extra.taskStore is the SDK's plain object otherwise). */
  class LabelledStore {
    #label = '';
    constructor(private readonly inner: Record<string, unknown>) {
      Object.assign(this, inner);
    }
    get label(): string {
      return this.#label;
    }
    set label(value: string) {
      this.#label = value;
    }
  }

  it("takes writes itself, so a setter touching the store's #private fields works", async () => {
    const c = await edgeChain();
    const server = new McpServer(
      { name: 'tasks', version: '1.0.0' },
      { capabilities: { tasks: { requests: { tools: { call: {} } } } }, taskStore: new InMemoryTaskStore() },
    );
    const low = server.server as unknown as { requestTaskStore(request: unknown, sessionId?: string): Record<string, unknown> };
    const requestTaskStore = low.requestTaskStore.bind(low);
    low.requestTaskStore = (request, sessionId) => new LabelledStore(requestTaskStore(request, sessionId)) as never;
    server.registerTool('web_search', { inputSchema: { query: z.string() } }, async (_args, extra) => {
      const store = extra.taskStore as unknown as LabelledStore;
      store.label = 'set';
      return { content: [{ type: 'text' as const, text: store.label }] };
    });
    withBaton(server, batonOptions());
    const client = await connect(server);
    const args = { tool: 'web_search', query: 'label', ...DECLARED };
    const result = await client.callTool(attachBundle({ name: 'web_search', arguments: args }, signed(c, args)));
    expect(result.isError, JSON.stringify(result)).toBeFalsy();
    expect(text(result)).toBe('set');
  });
});

describe('a task tool called without a task request (taskSupport optional)', () => {
  it('answers once the task is done, with its cost reported once, before the answer', async () => {
    const c = await edgeChain();
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
    const c = await edgeChain();
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

describe('a refusal thrown as an MCP error is read by its shape, not its class', () => {
  /** The MCP SDK's CommonJS build's McpError: the same shape, another class than the ESM one. */
  class OtherBuildMcpError extends Error {
    constructor(
      readonly code: number,
      message: string,
      readonly data?: unknown,
    ) {
      super(`MCP error ${code}: ${message}`);
    }
  }
  const explainError = (e: unknown) => explainRefusal(e as Parameters<typeof explainRefusal>[0]);

  it("another class's error, or one that crossed a transport as plain JSON, reads as the McpError it came from", async () => {
    const server = new McpServer({ name: 'edge', version: '1.0.0' });
    const read = vi.fn(async () => ({ contents: [{ uri: 'file:///s', text: 'TOP SECRET' }] }));
    server.registerResource('s', 'file:///s', {}, read);
    withBaton(server, batonOptions());
    const client = await connect(server);
    const thrown = (await client.readResource({ uri: 'file:///s' }).then(
      () => undefined,
      (e: unknown) => e,
    )) as { code: number; message: string; data: unknown };
    expect(read).not.toHaveBeenCalled();
    const refusal = refusalOf(thrown);
    expect(refusal).toMatchObject({ code: 'UNGATED_REQUEST', method: 'resources/read', tool: '' });
    const otherClass = new OtherBuildMcpError(thrown.code, thrown.message, thrown.data);
    const plain = JSON.parse(JSON.stringify({ code: thrown.code, message: thrown.message, data: thrown.data })) as unknown;
    for (const e of [otherClass, plain]) {
      expect(refusalOf(e)).toEqual(refusal);
      expect(explainError(e)).toBe(explainRefusal(refusal!));
    }
    // A partial refusal of a code only Baton's checks produce is filled, as an McpError's is.
    expect(
      refusalOf(new OtherBuildMcpError(BATON_REFUSAL_ERROR_CODE, 'refused', { code: 'CALLS_EXHAUSTED', tool: 'search' })),
    ).toMatchObject({ code: 'CALLS_EXHAUSTED', tool: 'search' });
    expect(
      refusalOf(new OtherBuildMcpError(BATON_REFUSAL_ERROR_CODE, 'refused', { code: 'BUNDLE_MISSING', tool: 'search' })),
    ).toMatchObject({
      code: 'BUNDLE_MISSING',
      tool: 'search',
      violations: [],
      retryable: false,
    });
  });

  it("another server's -32003, or Baton's refusal under another code, is no refusal", () => {
    const lookAlikes = [
      new OtherBuildMcpError(BATON_REFUSAL_ERROR_CODE, 'busy', { reason: 'not Baton' }),
      new OtherBuildMcpError(BATON_REFUSAL_ERROR_CODE, 'busy', { code: 'RATE_LIMIT', retry_after: 5 }),
      // Generic codes are any server's words too: Baton's advice for them would answer another server's error.
      ...['RATE_LIMITED', 'UNAUTHORIZED', 'NOT_FOUND', 'TIMEOUT', 'INTERNAL', 'INVALID_REQUEST'].map(
        (code) => new OtherBuildMcpError(BATON_REFUSAL_ERROR_CODE, 'refused', { code }),
      ),
      new OtherBuildMcpError(BATON_REFUSAL_ERROR_CODE, 'busy', 'UNGATED_REQUEST'),
      new OtherBuildMcpError(BATON_REFUSAL_ERROR_CODE, 'busy'),
      new OtherBuildMcpError(-32602, 'bad params', { code: 'UNGATED_REQUEST', method: 'prompts/get' }),
      // The SDK's own class is held to the same rule.
      new McpError(BATON_REFUSAL_ERROR_CODE, 'busy', { code: 'RATE_LIMIT' }),
    ];
    for (const e of lookAlikes) {
      expect(refusalOf(e), JSON.stringify(e)).toBeNull();
      expect(() => explainError(e), JSON.stringify(e)).toThrow(TypeError);
    }
  });
});
