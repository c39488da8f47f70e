/**
 * Baton for MCP tool servers: every `tools/call` is verified by Baton before
 * the tool runs, and the metered cost is reported after it ran.
 *
 *   const server = new McpServer({ name: 'search', version: '1.0.0' });
 *   server.registerTool('web_search', { inputSchema: { query: z.string() } }, async ({ query }) => ({
 *     content: [{ type: 'text', text: await search(query) }],
 *     _meta: { cost_usd: 0.002, source: 'api-usage' },   // reported to Baton after the call
 *   }));
 *   withBaton(server, { baton: { baseUrl, verifyKey, reportKey }, toolServer: 'mcp://search' });
 *
 * What a wrapped server does with each tools/call, in order:
 *  1. reads the DRS bundle from `params._meta`: "xyz.okeyamy.drs/bundle" (newer
 *     DRS: base64url JSON or an object), "X-DRS-Bundle" (DRS: base64url JSON),
 *     or "bundle" (an object). None: refused, saying how to attach one.
 *  2. checks locally, consuming nothing, that the signed arguments name the
 *     tool called (`arguments.tool === params.name`), that the invocation
 *     names this tool server (`tool_server`), and that its `cmd` is
 *     "/mcp/tools/call" or "/mcp/tools/call/<the tool called>" (a chain
 *     delegated for another command, say /mcp/resources/read, runs no tool).
 *  2b. on an McpServer, makes the server's own refusals, as it always does: a
 *     tool it does not have (or has disabled, or that needs a task request),
 *     arguments the tool's input schema refuses. The tool does not run, and
 *     verified first the call would be counted (a max_calls used, its
 *     estimate held against the budget) for a tool that never ran. The input
 *     schema's code runs here, before the verify, and again when the tool
 *     runs: keep it free of side effects. A low-level Server's own handler
 *     checks its arguments after the verify.
 *  3. POST /v1/verify with the call's arguments as `body` and require_binding,
 *     so arguments changed after signing are refused (BINDING_MISMATCH).
 *     A deny is refused with Baton's code, message, suggestion and every
 *     violation; Baton unreachable, timing out or answering 5xx is refused
 *     too (fail closed: the tool never runs without an allow). An allow with
 *     `retry: true` is refused as REPLAY_DETECTED (logged by default): Baton
 *     gives it to the same API key re-sending an invocation it already
 *     allowed, and every call through this server comes with one key, so it
 *     means this request was seen before. The middleware never re-sends a
 *     verify itself; after a lost answer the agent signs a new invocation.
 *  4. runs the tool. The handler reports what the call cost, either by
 *     returning `_meta: { cost_usd, tokens_in?, tokens_out?, source? }` or by
 *     calling `batonCall(extra).reportCost({...})`; the middleware posts it
 *     to /v1/invocations/{jti}/actuals (source defaults to 'harness-reported').
 *     A call without a cost (one that failed too) is not reported: a tool
 *     that paid and then fails should reportCost before it fails, or report
 *     out of band under batonCall(extra).invocationId (Baton keeps one report
 *     per call). A failed report is logged (onEvent 'report-failed'), never
 *     turned into a failed tool result: the tool has already run.
 *     A task's work outlasts its handler (so does an McpServer's own polling
 *     of a task for a call made without a task request, once the agent
 *     cancels it): for a task created through `extra.taskStore`, its cost is
 *     read when the work says it is done there, storing the task's result
 *     (even if the store refuses it, as for a task the agent cancelled) or
 *     setting a terminal status; the last reportCost until then wins over the
 *     result's `_meta`. A task that ends otherwise (the agent's tasks/cancel,
 *     which the SDK writes into the store itself; a terminal status or a
 *     result read through `extra.taskStore`, or a terminal status a
 *     reportCost finds) leaves the work `taskEndGraceMs` (30 s), restarted by
 *     each reportCost (a cost reported says the work goes on), before the last cost recorded
 *     (or the read result's) is reported, or nothing if there is none: a
 *     cancelled task should still store its result or status, with what its
 *     work cost. A task created elsewhere, whose end the middleware may never
 *     see, is taken as ended `taskEndGraceMs` after its last reportCost.
 *     The session closing reads nothing early (the agent closes
 *     it); a grace still running when the process exits is lost. Either
 *     way it is reported in the background, once.
 *
 * Baton gates tool calls only. The requests that hand the agent content
 * otherwise (resources/read, prompts/get, completion/complete) are refused by
 * a wrapped server unless `ungated: 'serve'`; the list requests stay open.
 *
 * Refusals are tool results with `isError: true` (default), not JSON-RPC
 * errors: the MCP specification reserves protocol errors for malformed
 * requests and unknown tools, and hosts hand tool-result errors to the model,
 * which can then act on the explanation (ask for a wider delegation, stop
 * retrying) instead of seeing a generic failure. The same refusal is in
 * `_meta["baton/refusal"]` for programs (see refusalOf). `refuseAs:
 * 'protocol-error'` throws an McpError (code BATON_REFUSAL_ERROR_CODE, data =
 * the refusal) instead, for clients that only branch on exceptions.
 *
 * The convention that ties an MCP call to its DRS invocation: the invocation's
 * signed `args` are exactly the call's `arguments`, and they name the tool in
 * `args.tool` (Baton checks it against allowed_tools). So the arguments carry
 * the policy fields too (tool, estimated_cost_usd, pii_access, write_access,
 * ...); a tool whose zod input schema does not declare them receives them
 * stripped. invokeTool / callToolWithBundle build such calls for agents.
 */
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import type { Server } from '@modelcontextprotocol/sdk/server/index.js';
import type { RequestOptions as McpRequestOptions } from '@modelcontextprotocol/sdk/shared/protocol.js';
import { getLiteralValue, getObjectShape, type AnyObjectSchema } from '@modelcontextprotocol/sdk/server/zod-compat.js';
import { CallToolRequestSchema, ErrorCode, McpError, type CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { decodeBase64url, encodeBase64url } from '../protocol/base64url.js';
import { commandCovers, MCP_TOOLS_CALL_CMD } from '../protocol/chain.js';
import { stringField } from '../protocol/tool-catalog.js';
import type { ChainContext } from '../sdk/client.js';
import {
  ERROR_TABLE,
  isBatonSpecificCode,
  isErrorCode,
  requirementText,
  SERVICE_ERROR_CODES,
  shownValue,
  type AnyErrorCode,
  type ErrorCode as BatonErrorCode,
  type McpErrorCode,
  type Violation,
} from '../protocol/errors.js';
import { sha256Hex } from '../protocol/hash.js';
import { canonicalJson, notJsonAsIs, utf8Decode, utf8Encode } from '../protocol/jcs.js';
import { ACTUAL_SOURCES, type ActualSource } from '../protocol/lists.js';
import type { Bundle } from '../protocol/records.js';
import { DOCUMENT_MAX_NESTING, jsonAmbiguity } from '../protocol/strict-json.js';
import {
  BatonApiError,
  BatonClient,
  type ActualReport,
  type ActualView,
  type Counter,
  type LimitWarning,
  type VerifyResult,
} from '../sdk/client.js';
import type { KeyPair } from '../sdk/keys.js';
import { createInvocation, makeBundle, readDelegation, type SignedDelegation } from '../sdk/records.js';

// ---------------------------------------------------------------- wire names

/** Where DRS puts a bundle in an MCP request: base64url(JSON bundle). */
export const DRS_BUNDLE_META_KEY = 'X-DRS-Bundle';
/** Where newer DRS releases put it: base64url(JSON bundle) or the bundle object. */
export const DRS_BUNDLE_META_KEY_NEXT = 'xyz.okeyamy.drs/bundle';
/** A plain bundle object (Baton's own, for clients that do not speak DRS). */
export const PLAIN_BUNDLE_META_KEY = 'bundle';
/** The refusal, for programs, in a refused result's `_meta`. */
export const REFUSAL_META_KEY = 'baton/refusal';
/** What Baton allowed, in an allowed result's `_meta`. */
export const VERIFIED_META_KEY = 'baton/verified';
/** JSON-RPC error code of a refusal with refuseAs: 'protocol-error' (implementation-defined server range). */
export const BATON_REFUSAL_ERROR_CODE = -32003;
/** The invocation cmd of a tools/call; "/mcp/tools/call/<tool>" is accepted too (Baton checks the tool it names). */
const TOOLS_CALL_CMD = MCP_TOOLS_CALL_CMD;

// ---------------------------------------------------------------- options and types

/** How the middleware reaches Baton without a ready-made client. */
export interface BatonConnection {
  readonly baseUrl: string;
  /** API key with the verify scope (optionally bound to this tool server). */
  readonly verifyKey: string;
  /** API key with the report scope; defaults to verifyKey (a key may hold both scopes). */
  readonly reportKey?: string;
  /** Per-request timeout towards Baton (default 10 s). */
  readonly timeoutMs?: number;
  /**
   * The did:key of the Baton service keys trusted to sign allows (BatonClientOptions.serviceDids):
   * given, a tool runs only on an allow whose service receipt one of them signed for its call, in
   * `tenantId`'s name (required with it).
   */
  readonly serviceDids?: readonly string[];
  /** The tenant of verifyKey (`ten_…`): required with serviceDids. */
  readonly tenantId?: string;
}

export interface BatonMcpOptions {
  /** A BatonClient whose key has the verify scope, or how to make one. */
  readonly baton: BatonClient | BatonConnection;
  /** This tool server's identity: invocations must name it as tool_server. */
  readonly toolServer: string;
  /** Report-scope key when `baton` is a client whose own key lacks that scope. */
  readonly reportKey?: string;
  /** The provenance of a reported cost when the tool does not say (default 'harness-reported'). */
  readonly defaultCostSource?: ActualSource;
  /** Refuse as a tool result with isError (default) or as a JSON-RPC error. */
  readonly refuseAs?: 'tool-result' | 'protocol-error';
  /** Report costs without holding the tool result back (default false: the result waits for the report). */
  readonly reportInBackground?: boolean;
  /**
   * How long a task tool's work has to say what it cost once its task ended where the work did not
   * end it (the agent's tasks/cancel, a terminal status or result only read through
   * `extra.taskStore`, a terminal status a reportCost found): storing the task's result or status
   * through `extra.taskStore` reads the cost at once, each reportCost restarts the wait. Then the
   * last cost recorded is reported, or nothing if none was. Also how long a task created outside
   * `extra.taskStore`, whose end the middleware never sees, stays quiet after its last reportCost
   * before that cost is reported (default 30 000 ms). A grace still running when the process exits
   * is lost.
   */
  readonly taskEndGraceMs?: number;
  /**
   * What the server does with the requests that hand the agent content but are no tool call
   * (UNGATED_METHODS: resources/read, prompts/get, completion/complete). Baton gates tools/call
   * only, so by default ('refuse') a wrapped server refuses these rather than serve what no
   * delegation was checked for; 'serve' serves them as an unwrapped server would, ungated.
   */
  readonly ungated?: 'refuse' | 'serve';
  /**
   * What happened to each call. Default: report failures and replayed
   * requests (a 'refused' event with code REPLAY_DETECTED) are written to
   * stderr, everything else is quiet. A custom handler replaces the default.
   */
  readonly onEvent?: (event: BatonMcpEvent) => void;
}

/** Why a call was not run. `code` is Baton's stable code, a client code, or one of the middleware's own (all in ERROR_TABLE). */
export interface BatonRefusal {
  readonly tool: string;
  readonly code: AnyErrorCode | (string & {});
  readonly block: string | null;
  readonly message: string;
  readonly suggestion: string;
  readonly violations: readonly Violation[];
  /** Baton's request id, when Baton answered (null for one not shaped as Baton's ids, which a proxy may have written). */
  readonly request_id: string | null;
  /** Whether the call (same tool and arguments, in a freshly signed invocation) may succeed later (Baton unreachable, 429, 5xx, or once a human approves it). */
  readonly retryable: boolean;
  /** With APPROVAL_REQUIRED: the approval a human must decide before the same call is retried. */
  readonly approval?: { readonly id: string; readonly status: string; readonly expires_at: number };
  /** With UNGATED_REQUEST: the request refused (resources/read, prompts/get, completion/complete); `tool` is then "". */
  readonly method?: string;
}

/** The cost of one call, as the tool knows it. */
export interface CostReport {
  readonly cost_usd?: number | null;
  readonly tokens_in?: number | null;
  readonly tokens_out?: number | null;
  /** Default: the middleware's defaultCostSource ('harness-reported'). */
  readonly source?: ActualSource;
  /** Required with source 'unavailable'. */
  readonly unavailable_reason?: string | null;
}

/** What a tool handler can learn about its allowed call: batonCall(extra). */
export interface BatonCall {
  readonly tool: string;
  /** The invocation jti: the metered cost is reported under it. */
  readonly invocationId: string;
  readonly context: ChainContext;
  readonly counters: readonly Counter[];
  readonly warnings: readonly LimitWarning[];
  readonly requestId: string | null;
  /**
   * Records the call's cost; the last value recorded before the cost is read wins over a result's
   * `_meta`. The cost is read when the handler returns, or, for a task whose work outlasts it, when
   * the work stores the task's result or sets a terminal status through `extra.taskStore`, or
   * `taskEndGraceMs` after the last reportCost once the task has ended otherwise (a tasks/cancel).
   * A task created elsewhere, whose end the middleware may not see, is taken as ended
   * `taskEndGraceMs` after its last reportCost. A call after the cost was read is not reported
   * (a 'report-failed' event). A tool that pays and then fails should call it before failing.
   */
  reportCost(cost: CostReport): void;
}

export type BatonMcpEvent =
  | {
      readonly type: 'allowed';
      readonly tool: string;
      readonly invocationId: string;
      readonly counters: readonly Counter[];
      readonly warnings: readonly LimitWarning[];
      readonly requestId: string | null;
    }
  | {
      readonly type: 'refused';
      readonly tool: string;
      readonly refusal: BatonRefusal;
      /** When Baton could not decide: the client's error, with what the agent is not shown (Baton's address). */
      readonly error?: unknown;
    }
  | {
      readonly type: 'reported';
      readonly tool: string;
      readonly invocationId: string;
      readonly actual: ActualReport;
      readonly recorded: ActualView;
    }
  | {
      readonly type: 'report-failed';
      readonly tool: string;
      readonly invocationId: string;
      readonly actual: ActualReport | null;
      readonly error: unknown;
    };

// ---------------------------------------------------------------- tool-side: withBaton

const GATED = Symbol.for('baton.mcp.gated');
const CALL = Symbol.for('baton.mcp.call');

// The SDK's handlers are generic over request/result types; the gate only needs their shape.
// eslint-disable-next-line @typescript-eslint/no-explicit-any
type AnyHandler = (request: any, extra: any) => unknown;
type SetRequestHandler = (schema: AnyObjectSchema, handler: AnyHandler) => void;

/**
 * What withBaton uses of a low-level MCP Server. Named by shape, not by the SDK's classes: a
 * CommonJS project's McpServer is the SDK's CommonJS build, another class than the ESM one this
 * package names (private members make the two incompatible to TypeScript), and either must do.
 */
export interface McpLowLevelServerLike {
  setRequestHandler(schema: never, handler: never): unknown;
  assertCanSetRequestHandler(method: string): void;
  /** A server's own member (a Client has setRequestHandler too, and wrapping one would gate nothing). */
  getClientCapabilities(): unknown;
}

/** An McpServer by its shape (see McpLowLevelServerLike): the low-level server it wraps. */
export interface McpServerLike {
  readonly server: McpLowLevelServerLike;
}

/**
 * Puts Baton in front of every tool of `server` (an McpServer, or a low-level
 * Server with its own tools/call handler), whether the tools were registered
 * before or after this call. Returns the same server. Wrapping twice throws:
 * a second gate would verify the same invocation twice (REPLAY_DETECTED).
 */
export function withBaton<S extends McpServerLike | McpLowLevelServerLike>(server: S, options: BatonMcpOptions): S {
  const low = lowLevelServer(server);
  const tagged = low as unknown as Record<symbol, unknown>;
  if (tagged[GATED]) throw new Error('withBaton: this MCP server is already wrapped; wrap it once.');
  if (typeof options.toolServer !== 'string' || options.toolServer.length === 0) {
    throw new TypeError("withBaton: give toolServer, the tool_server invocations must name (e.g. 'mcp://search').");
  }
  if (options.ungated !== undefined && options.ungated !== 'refuse' && options.ungated !== 'serve') {
    throw new TypeError(`withBaton: ungated is 'refuse' (the default) or 'serve', not ${JSON.stringify(options.ungated)}.`);
  }
  if (options.taskEndGraceMs !== undefined && !(Number.isFinite(options.taskEndGraceMs) && options.taskEndGraceMs >= 0)) {
    throw new TypeError(`withBaton: taskEndGraceMs is a number of milliseconds, 0 or more, not ${String(options.taskEndGraceMs)}.`);
  }
  const refuseUngated = options.ungated !== 'serve';
  const cancelWatch = new TaskCancelWatch();
  const gate = makeGate(options, ownRefusalOf(server), cancelWatch);
  const guarded = (method: string | undefined, handler: AnyHandler): AnyHandler =>
    method === 'tools/call'
      ? gate(handler)
      : method === 'tasks/cancel'
        ? cancelWatch.wrap(handler)
        : refuseUngated && isUngated(method)
          ? ungatedRefusal(method)
          : handler;

  // Handlers installed from now on (McpServer installs its own at the first registerTool).
  const original = low.setRequestHandler.bind(low) as unknown as SetRequestHandler;
  const patched: SetRequestHandler = (schema, handler) => original(schema, guarded(methodOf(schema), handler));
  (low as unknown as { setRequestHandler: SetRequestHandler }).setRequestHandler = patched;

  // Handlers installed already (tools registered before withBaton, or
  // capabilities.tools given to the McpServer constructor). The SDK offers no
  // public way to read an installed handler; it keeps them in
  // Protocol#_requestHandlers.
  const handlers = (low as unknown as { _requestHandlers?: unknown })._requestHandlers;
  const installedHandler = (method: string) => (handlers instanceof Map ? (handlers.get(method) as AnyHandler | undefined) : undefined);
  for (const method of ['tools/call', ...(refuseUngated ? UNGATED_METHODS : [])]) {
    let installed = false;
    try {
      low.assertCanSetRequestHandler(method);
    } catch {
      installed = true;
    }
    if (!installed) continue;
    // If the SDK ever moves its handlers, fail at startup, never serve unverified.
    const existing = installedHandler(method);
    if (!existing) {
      throw new Error(
        `withBaton: a ${method} handler is installed but this @modelcontextprotocol/sdk version hides it; call withBaton(server, ...) before registering tools, resources or prompts.`,
      );
    }
    (handlers as Map<string, AnyHandler>).set(method, guarded(method, existing));
  }
  // The SDK's own tasks/cancel handler, installed with a server given a task store. Left unwrapped
  // (a hidden handler), a cancelled task's cost still goes once its work reports or stores anything.
  const cancel = installedHandler('tasks/cancel');
  if (cancel) (handlers as Map<string, AnyHandler>).set('tasks/cancel', guarded('tasks/cancel', cancel));
  // A method with no handler of its own goes to fallbackRequestHandler, which setRequestHandler
  // never sees: a fallback answering tools/call or resources/read would serve them unchecked.
  let fallback = (low as unknown as { fallbackRequestHandler?: AnyHandler }).fallbackRequestHandler;
  const guardedFallback: AnyHandler = (request, extra) => {
    const method: unknown = (request as { method?: unknown } | null)?.method;
    return guarded(typeof method === 'string' ? method : undefined, fallback!)(request, extra);
  };
  Object.defineProperty(low, 'fallbackRequestHandler', {
    configurable: true,
    enumerable: true,
    get: () => (fallback === undefined ? undefined : guardedFallback),
    set: (handler: AnyHandler | undefined) => {
      fallback = handler;
    },
  });
  tagged[GATED] = true;
  return server;
}

/**
 * The requests besides tools/call that hand the agent content (a resource, a prompt, completions
 * of their arguments). Baton gates tool calls only, so a wrapped server refuses these unless its
 * operator chose `ungated: 'serve'`. The list requests (tools/list, resources/list, ...) stay open.
 */
export const UNGATED_METHODS = ['resources/read', 'prompts/get', 'completion/complete'] as const;

function isUngated(method: string | undefined): method is (typeof UNGATED_METHODS)[number] {
  return (UNGATED_METHODS as readonly (string | undefined)[]).includes(method);
}

function ungatedRefusal(method: string): AnyHandler {
  return () => {
    const message = `This server checks its tool calls with Baton and refuses ${method}, which Baton does not check. Its operator can serve ${method} ungated with withBaton(server, { ..., ungated: 'serve' }).`;
    // A whole BatonRefusal, as every other refusal, so that refusalOf and explainRefusal read it; no tool was called.
    const refusal: BatonRefusal = { ...local('', 'UNGATED_REQUEST', { message }), method };
    throw protocolError(BATON_REFUSAL_ERROR_CODE, message, refusal);
  };
}

/**
 * An McpError sent with its message as written. The SDK's constructor puts "MCP error <code>: "
 * before it, and the client's McpError does again: the agent read the prefix twice.
 */
function protocolError(code: number, message: string, data: unknown): McpError {
  const error = new McpError(code, message, data);
  error.message = message;
  return error;
}

type OwnRefusal = (tool: string, args: Record<string, unknown>, params: Record<string, unknown>) => Promise<CallToolResult | undefined>;

/**
 * What an McpServer answers, without running the tool, to a call of a tool it does not have (or has
 * disabled, or that needs a task request it did not get), or with arguments the tool's input schema
 * refuses: asked after Baton's verify, such a call would be counted (a max_calls used, its estimate
 * held against the budget) for a tool that never ran. The same checks as the SDK's own tools/call
 * handler, read from its internals (_registeredTools, validateToolInput); a server without them (a
 * low-level Server) is asked nothing.
 */
function ownRefusalOf(server: McpServerLike | McpLowLevelServerLike): OwnRefusal | undefined {
  const s = server as { _registeredTools?: unknown; validateToolInput?: unknown };
  const tools = s._registeredTools;
  const validate = s.validateToolInput;
  if (!isRecord(tools) || typeof validate !== 'function') return undefined;
  return async (name, args, params) => {
    try {
      const tool = Object.hasOwn(tools, name) ? tools[name] : undefined;
      if (!isRecord(tool)) throw new McpError(ErrorCode.InvalidParams, `Tool ${name} not found`);
      if (!tool['enabled']) throw new McpError(ErrorCode.InvalidParams, `Tool ${name} disabled`);
      const taskSupport = isRecord(tool['execution']) ? tool['execution']['taskSupport'] : undefined;
      const handler = tool['handler'];
      const isTaskHandler = (typeof handler === 'object' || typeof handler === 'function') && handler !== null && 'createTask' in handler;
      if ((taskSupport === 'required' || taskSupport === 'optional') && !isTaskHandler) {
        throw new McpError(
          ErrorCode.InternalError,
          `Tool ${name} has taskSupport '${String(taskSupport)}' but was not registered with registerToolTask`,
        );
      }
      if (taskSupport === 'required' && !params['task']) {
        throw new McpError(ErrorCode.MethodNotFound, `Tool ${name} requires task augmentation (taskSupport: 'required')`);
      }
      await (validate as (tool: unknown, args: unknown, name: string) => Promise<unknown>).call(server, tool, args, name);
      return undefined;
    } catch (e) {
      // The McpServer's own answer: a tool result with isError, holding the error's message.
      return { content: [{ type: 'text', text: e instanceof Error ? e.message : String(e) }], isError: true };
    }
  };
}

/** The Baton context of an allowed call, from a tool handler's `extra`; undefined outside withBaton. */
export function batonCall(extra: unknown): BatonCall | undefined {
  if (!extra || typeof extra !== 'object') return undefined;
  return (extra as Record<symbol, BatonCall | undefined>)[CALL];
}

function lowLevelServer(server: McpServerLike | McpLowLevelServerLike): Server {
  // A Client answers setRequestHandler too: only a server's tools/call handler is what a gate guards.
  const isServer = (s: unknown): s is Server =>
    typeof (s as Server | null)?.setRequestHandler === 'function' && typeof (s as Server).getClientCapabilities === 'function';
  const inner = (server as { server?: unknown }).server;
  if (isServer(inner)) return inner;
  if (isServer(server)) return server;
  throw new TypeError('withBaton: expected an McpServer or a Server from @modelcontextprotocol/sdk.');
}

/** The method a request handler's schema answers. */
function methodOf(schema: AnyObjectSchema): string | undefined {
  if (schema === (CallToolRequestSchema as unknown)) return 'tools/call';
  // A CommonJS server's schemas are never this module's objects, so most are read. One that cannot
  // be read may be tools/call's: guessing "no" would install it ungated, so the start fails instead.
  try {
    const method = getObjectShape(schema)?.['method'];
    const literal: unknown = method === undefined ? undefined : getLiteralValue(method as never);
    return typeof literal === 'string' ? literal : undefined;
  } catch (e) {
    throw new Error(
      'withBaton: cannot tell which request a handler answers (its schema cannot be read by this @modelcontextprotocol/sdk version); refusing to install it rather than serve tools unverified.',
      { cause: e },
    );
  }
}

/**
 * The invocations the process's wrapped servers ran lately, by the namespace Baton counts them in
 * and jti (see replayNamespace): the last MAX_REMEMBERED. Baton refuses an invocation past its
 * maximum age (BATON_INVOCATION_MAX_AGE, 300 s by default), so at up to 300 calls a second this
 * covers every re-send Baton could still allow; past that rate an older one rests on Baton's answer
 * alone, as every re-send did before.
 */
class RecentInvocations {
  static readonly MAX_REMEMBERED = 100_000;
  readonly #seen = new Set<string>();

  /** True the first time `key` (a namespace and a jti) is given; false on every later time while it is remembered. */
  firstRun(key: string): boolean {
    if (this.#seen.has(key)) return false;
    this.#seen.add(key);
    // A Set iterates in insertion order: the first is the oldest.
    if (this.#seen.size > RecentInvocations.MAX_REMEMBERED) this.#seen.delete(this.#seen.values().next().value!);
    return true;
  }
}

/**
 * One memory for every server this process wraps, whichever copy of this module wrapped it (a
 * bundle may hold two). Each withBaton kept its own: a tool server that makes a server per session,
 * or per request as the MCP SDK's stateless HTTP pattern does, ran an allow replayed with `retry:
 * false` once in every session, all under one verify key (an outside probe). Its entries are kept
 * apart by namespace (replayNamespace), so one tenant's call never refuses another's.
 */
function processRecentInvocations(): Pick<RecentInvocations, 'firstRun'> {
  const shared = globalThis as { [RECENT_INVOCATIONS_KEY]?: Pick<RecentInvocations, 'firstRun'> };
  return (shared[RECENT_INVOCATIONS_KEY] ??= new RecentInvocations());
}
/** Versioned: a release that stores another shape uses another key, so an older copy of this module never reads it. */
const RECENT_INVOCATIONS_KEY = Symbol.for('@baton-drs/mcp: invocations this process ran/v1');

/** A client's identity in the process, for a client that names no tenant of its own. */
const clientIdentities = new WeakMap<object, number>();
let nextClientIdentity = 0;

/**
 * Whose invocations a server's memory entries are: Baton counts a jti per tenant, so two tenants'
 * calls with the same jti are two calls. With the tenant pinned (serviceDids and tenantId, given as
 * a connection or on a BatonClient), an allow is the tenant's: its entries are the tenant's, however
 * many clients a process makes (one per session, say; a review replayed an allow to each when they
 * were kept per client). Unpinned, an allow is taken on the answer's word, so the entries are the
 * connection's: Baton's base URL and a digest of the verify key (the key itself is not kept); for a
 * client passed in, which does not expose its key, that client object's.
 */
function replayNamespace(baton: BatonMcpOptions['baton'], client: BatonClient): string {
  // Taken from this SDK's own client only: another object's word for its tenant would let it share
  // (and spend) that tenant's entries (a review). A client of another copy of the SDK is kept per object.
  const pinned = client instanceof BatonClient ? client.pinnedTenantId : undefined;
  if (pinned !== undefined) return `tenant\0${pinned}`;
  if (!(baton instanceof BatonClient) && typeof (baton as { verify?: unknown }).verify !== 'function') {
    return `connection\0${client.baseUrl}\0${sha256Hex((baton as BatonConnection).verifyKey)}`;
  }
  let id = clientIdentities.get(client);
  if (id === undefined) clientIdentities.set(client, (id = ++nextClientIdentity));
  return `client\0${id}`;
}

/** A call whose task is watched: what TaskCancelWatch tells it. */
interface TaskWatcher {
  /** A tasks/cancel named the task (refused or not: the call reads its status itself). */
  taskNews(taskId: string): void;
}

/**
 * The tasks of calls whose cost is still to be read, by task id. The SDK answers tasks/cancel
 * itself, writing `cancelled` into the server's task store past the store a call's handler gets
 * (extra.taskStore), so the call would never hear of it: the wrapped tasks/cancel handler tells it
 * after each cancel, and the call reads its task's status itself before taking the task as ended.
 * A call is unwatched when its cost is read, which is bounded once its task has ended (the work
 * saying so, or the grace); a task that never ends is forgotten past MAX_WATCHED newer ones.
 */
class TaskCancelWatch {
  /**
   * At most this many tasks are watched: past it the oldest is forgotten, and its call no longer
   * hears of a tasks/cancel (its work storing a result or status, or a reportCost finding its end,
   * still ends it).
   */
  static readonly MAX_WATCHED = 100_000;
  readonly #byTask = new Map<string, TaskWatcher>();

  watch(taskId: string, watcher: TaskWatcher): void {
    this.#byTask.delete(taskId);
    this.#byTask.set(taskId, watcher);
    // A Map iterates in insertion order: the first is the oldest.
    if (this.#byTask.size > TaskCancelWatch.MAX_WATCHED) this.#byTask.delete(this.#byTask.keys().next().value!);
  }

  unwatch(taskId: string, watcher: TaskWatcher): void {
    if (this.#byTask.get(taskId) === watcher) this.#byTask.delete(taskId);
  }

  /** The tasks/cancel handler, telling the call of the task named once the handler is done (refused or not: the call checks). */
  wrap(handler: AnyHandler): AnyHandler {
    return async (request, extra) => {
      try {
        return await handler(request, extra);
      } finally {
        const taskId: unknown = (request as { params?: { taskId?: unknown } } | undefined)?.params?.taskId;
        if (typeof taskId === 'string') this.#byTask.get(taskId)?.taskNews(taskId);
      }
    };
  }
}

const DEFAULT_TASK_END_GRACE_MS = 30_000;

function clientOf(options: BatonMcpOptions): { client: BatonClient; reportKey: string | undefined } {
  if (options.baton instanceof BatonClient || typeof (options.baton as { verify?: unknown }).verify === 'function') {
    return { client: options.baton as BatonClient, reportKey: options.reportKey };
  }
  const c = options.baton as BatonConnection;
  if (!c || typeof c.verifyKey !== 'string' || c.verifyKey.length === 0) {
    throw new TypeError('withBaton: give baton as a BatonClient, or as { baseUrl, verifyKey, reportKey? }.');
  }
  const client = new BatonClient({
    baseUrl: c.baseUrl,
    apiKey: c.verifyKey,
    ...(c.timeoutMs !== undefined ? { timeoutMs: c.timeoutMs } : {}),
    ...(c.serviceDids !== undefined ? { serviceDids: c.serviceDids } : {}),
    ...(c.tenantId !== undefined ? { tenantId: c.tenantId } : {}),
  });
  return { client, reportKey: options.reportKey ?? c.reportKey };
}

function defaultOnEvent(event: BatonMcpEvent): void {
  if (event.type === 'refused' && event.refusal.code === 'REPLAY_DETECTED') {
    // Usually someone re-sending a request they saw: operators should hear of it without a custom handler.
    process.stderr.write(
      `baton-mcp: refused a re-sent call to ${event.tool} (a replay, or a retry after a lost answer): ${event.refusal.message} (Baton request ${event.refusal.request_id ?? 'none'})\n`,
    );
    return;
  }
  if (event.type === 'refused' && event.error !== undefined) {
    // Baton did not decide: the agent was told without the detail, which the operator needs.
    const why = event.error instanceof Error ? event.error.message : String(event.error);
    // Baton's advice on its own limits (BATON_MAX_BODY_BYTES) is the operator's: the agent was not shown it.
    const advice =
      event.error instanceof BatonApiError && event.error.status === 413 && event.error.suggestion ? ` ${event.error.suggestion}` : '';
    process.stderr.write(`baton-mcp: refused a call to ${event.tool}, Baton did not decide: ${why}${advice}\n`);
    return;
  }
  if (event.type !== 'report-failed') return;
  const why = event.error instanceof Error ? event.error.message : String(event.error);
  // A key without the report scope fails every report the same way: say what fixes it.
  const fix =
    event.error instanceof BatonApiError && event.error.status === 403
      ? ' Give withBaton a reportKey (baton.reportKey, or reportKey beside a client) holding the report scope.'
      : '';
  process.stderr.write(`baton-mcp: could not report the cost of ${event.tool} (${event.invocationId}): ${why}${fix}\n`);
}

function makeGate(
  options: BatonMcpOptions,
  ownRefusal: OwnRefusal | undefined,
  cancelWatch: TaskCancelWatch,
): (next: AnyHandler) => AnyHandler {
  const { client, reportKey } = clientOf(options);
  const taskEndGraceMs = options.taskEndGraceMs ?? DEFAULT_TASK_END_GRACE_MS;
  const emit = (event: BatonMcpEvent) => {
    try {
      (options.onEvent ?? defaultOnEvent)(event);
    } catch {
      /* an observer never changes the outcome of a call */
    }
  };
  const refuseAs = options.refuseAs ?? 'tool-result';
  const defaultSource = options.defaultCostSource ?? 'harness-reported';
  const ran = processRecentInvocations();
  const namespace = replayNamespace(options.baton, client);

  const refuse = (refusal: BatonRefusal, error?: unknown): CallToolResult => {
    emit({ type: 'refused', tool: refusal.tool, refusal, ...(error !== undefined ? { error } : {}) });
    if (refuseAs === 'protocol-error') {
      throw protocolError(BATON_REFUSAL_ERROR_CODE, `Baton refused ${refusal.tool}: ${refusal.code}: ${refusal.message}`, refusal);
    }
    return { content: [{ type: 'text', text: explainRefusal(refusal) }], isError: true, _meta: { [REFUSAL_META_KEY]: refusal } };
  };

  const report = async (tool: string, invocationId: string, cost: CostReport): Promise<boolean> => {
    let actual: ActualReport | null = null;
    try {
      actual = toActual(cost, defaultSource);
      const recorded = await client.reportActual(invocationId, actual, reportKey !== undefined ? { apiKey: reportKey } : {});
      emit({ type: 'reported', tool, invocationId, actual, recorded });
      return true;
    } catch (error) {
      emit({ type: 'report-failed', tool, invocationId, actual, error });
      return false;
    }
  };

  return (next) => async (request, extra) => {
    const params: unknown = request?.params;
    if (!isRecord(params) || typeof params['name'] !== 'string') {
      throw new McpError(ErrorCode.InvalidParams, 'Invalid tools/call request: params.name must be the tool name.');
    }
    const tool = params['name'];
    const rawArgs = params['arguments'] ?? {};
    if (!isRecord(rawArgs)) throw new McpError(ErrorCode.InvalidParams, 'Invalid tools/call request: params.arguments must be an object.');
    const args: Record<string, unknown> = rawArgs;
    const meta = isRecord(params['_meta'])
      ? params['_meta']
      : isRecord(extra?._meta)
        ? (extra._meta as Record<string, unknown>)
        : undefined;

    // 1. the bundle
    const found = bundleFromMeta(meta);
    if (!found.ok) return refuse(local(tool, found.code, { message: found.message, suggestion: found.suggestion }));
    const bundle = found.bundle;

    // 2. local checks that consume nothing
    if (args['tool'] !== tool) {
      return refuse(
        local(tool, 'TOOL_MISMATCH', {
          message:
            args['tool'] === undefined
              ? `The arguments of this call to "${tool}" do not name the tool: the signed invocation args must carry "tool": "${tool}".`
              : `The signed arguments name the tool ${JSON.stringify(args['tool'])}, but this request calls "${tool}".`,
          suggestion: `Sign the invocation with args.tool = "${tool}" and send those args, unchanged, as the call's arguments (invokeTool does both).`,
        }),
      );
    }
    const signed = invocationPayload(bundle.invocation);
    const named = stringField(signed, 'tool_server');
    // Fail closed here too, not only at Baton: an invocation that names no tool server (or not as
    // a string) was not signed for this one.
    if (named !== options.toolServer) {
      return refuse(
        local(tool, 'TOOL_SERVER_MISMATCH', {
          message:
            named === undefined
              ? `The invocation names no tool server (tool_server missing or not a string), so it was not signed for this one (${options.toolServer}).`
              : `The invocation was signed for tool server ${JSON.stringify(named)}, not this one (${options.toolServer}).`,
          suggestion: `Sign the invocation with toolServer "${options.toolServer}".`,
          violations: [{ code: 'TOOL_SERVER_MISMATCH', field: 'invocation.tool_server', required: options.toolServer, actual: named }],
        }),
      );
    }
    // Baton checks that the chain covers the invocation's cmd and that a cmd naming a tool
    // names this one; a grant for another command (with no allowed_tools) must not run a tool
    // either, so a cmd that is no tools/call is refused here. As for tool_server, an
    // unreadable cmd is refused too: fail closed.
    const cmd = stringField(signed, 'cmd');
    const toolCmd = `${TOOLS_CALL_CMD}/${tool}`;
    if (cmd !== TOOLS_CALL_CMD && cmd !== toolCmd) {
      return refuse(
        local(tool, 'COMMAND_MISMATCH', {
          message: `The invocation was signed for cmd ${cmd === undefined ? '(none readable)' : JSON.stringify(cmd)}, but this request is a tools/call of "${tool}", which needs cmd "${TOOLS_CALL_CMD}" or "${toolCmd}".`,
          suggestion: `Sign the invocation with cmd "${TOOLS_CALL_CMD}" (invokeTool's default) or "${toolCmd}", under a delegation whose cmd covers it; a grant for another command does not allow tool calls.`,
          violations: [{ code: 'COMMAND_MISMATCH', field: 'invocation.cmd', required: `${TOOLS_CALL_CMD} or ${toolCmd}`, actual: cmd }],
        }),
      );
    }

    // Arguments JSON cannot carry as they are (1e999 parsed as Infinity) are not the signed args,
    // which are JSON; sent on, they would reach Baton as others (null) and be counted.
    const lossy = notJsonAsIs(args);
    if (lossy !== undefined) {
      return refuse(
        local(tool, 'BINDING_MISMATCH', {
          message: `The call's arguments hold a value JSON cannot carry as it is (${lossy}), so they are not the args the agent signed.`,
          suggestion: "Send the signed args unchanged as the call's arguments (invokeTool does).",
        }),
      );
    }

    // 2b. the server's own refusals, before Baton counts the call
    const own = await ownRefusal?.(tool, args, params);
    if (own) return own;

    // 3. Baton decides
    let decision: VerifyResult;
    try {
      decision = await client.verify(bundle, {
        body: args,
        requireBinding: true,
        ...(extra?.signal instanceof AbortSignal ? { signal: extra.signal } : {}),
      });
    } catch (e) {
      return refuse(unavailable(tool, e), e);
    }
    if (!decision.valid) {
      return refuse({
        tool,
        code: decision.error.code,
        block: decision.error.block,
        message: decision.error.message,
        suggestion: decision.error.suggestion,
        violations: decision.violations,
        request_id: decision.request_id,
        // A call waiting for a human succeeds once, when retried after the approval.
        retryable: decision.approval !== undefined,
        ...(decision.approval === undefined
          ? {}
          : { approval: { id: decision.approval.id, status: decision.approval.status, expires_at: decision.approval.expires_at } }),
      });
    }
    const invocationId = decision.invocation_id;
    // `retry` is the answer's word, and no signature covers it: an allow replayed by whoever sits
    // between here and Baton could say false. An invocation a server of this process already ran
    // is refused whatever the answer says.
    if (decision.retry || !ran.firstRun(`${namespace}\0${invocationId}`)) {
      // Baton answers a re-send of an allowed invocation by the same key with
      // the original allow, counting nothing. This server verifies each
      // request once, with one key for every caller, so this request was seen
      // before: running the tool would bypass max_calls, budgets and approvals.
      // Baton's retry says it counted the first allow; the memory only that this process ran it (an
      // answer saying retry: false of it is a replayed one, or Baton's memory is not this process's).
      const before = decision.retry
        ? 'was already allowed once, and Baton counted it then (perhaps its answer was lost on the way)'
        : 'was already allowed once, and this tool server ran it then';
      return refuse({
        ...local(tool, 'REPLAY_DETECTED', {
          message: `This signed invocation (${invocationId}) ${before}; a re-send of it does not run the tool. Each tool call needs a freshly signed invocation.`,
          suggestion:
            'Sign a new invocation (a fresh jti) for every tool call, even to repeat one with the same arguments; invokeTool signs one per call.',
          violations: [{ code: 'REPLAY_DETECTED', field: 'invocation.jti', actual: invocationId }],
        }),
        request_id: decision.request_id,
      });
    }
    emit({ type: 'allowed', tool, invocationId, counters: decision.counters, warnings: decision.warnings, requestId: decision.request_id });

    // 4. run the tool, then report what it cost. A task tool's handler returns once it has
    //    created its task, before the work is done (or, called without a task request, the
    //    McpServer polls the task inside the handler and answers with an error if the agent
    //    cancels it). For a task created through the request's task store (extra.taskStore) the
    //    cost is read when the work says it is done there: a result stored (accepted or not) or a
    //    terminal status set. reportCost records until then, the last value winning. A task that
    //    ends otherwise (the agent's tasks/cancel, which the SDK writes past extra.taskStore, a
    //    terminal status or a result only read through it, a terminal status a reportCost finds)
    //    leaves the work taskEndGraceMs, restarted by each reportCost, before the last
    //    value recorded is reported, or nothing if none was. Once each.
    /** The last cost given to reportCost: it wins over any result's `_meta`. */
    let recordedCost: CostReport | undefined;
    /**
     * 'running': the handler runs; 'task': it returned while the work of a task it created through
     * extra.taskStore goes on; 'unseen-task': it answered with a task created elsewhere, whose end
     * the middleware may never learn; 'done': the cost was read.
     */
    let phase: 'running' | 'task' | 'unseen-task' | 'done' = 'running';
    /** The result of this call's task, stored (or read) through extra.taskStore. */
    let taskResult: { readonly result: unknown } | undefined;
    /** Whether the work said it is done through extra.taskStore (a result stored, accepted or not, or a terminal status set). */
    let workDone = false;
    /** Whether the middleware learnt that the task ended where the work did not say so: the grace runs from then. */
    let endLearnt = false;
    /** The task whose status a reportCost reads: the one the handler answered with, or the one it created. */
    let callTask: string | undefined;
    let graceTimer: ReturnType<typeof setTimeout> | undefined;
    const ownTasks = new Set<string>();

    const finish = (): void => {
      phase = 'done';
      clearTimeout(graceTimer);
      for (const taskId of ownTasks) cancelWatch.unwatch(taskId, watcher);
      ownTasks.clear();
      // The request's task store holds the request (its arguments, its bundle): a call that is done lets go of it.
      watched = undefined;
      taskResult = undefined;
    };
    /** Reads the cost of a call whose answer has gone (its task's) and reports it in the background, if there is one. */
    const readTaskCost = (): void => {
      const stored = taskResult?.result;
      finish();
      let cost: CostReport | undefined;
      try {
        cost = recordedCost ?? costFromResult(stored);
      } catch (error) {
        emit({ type: 'report-failed', tool, invocationId, actual: null, error });
        return;
      }
      if (cost !== undefined) void report(tool, invocationId, cost);
    };
    /**
     * (Re)starts the grace after which the cost is read. Never capped: a cost reported says the work
     * goes on, whatever an agent's cancel wrote into the store (a cap let a cancel cut a long task's
     * running total short), and silent work is bounded by the grace itself.
     */
    const armGrace = (): void => {
      clearTimeout(graceTimer);
      graceTimer = setTimeout(readTaskCost, taskEndGraceMs);
      graceTimer.unref?.();
    };
    const learnEnd = (): void => {
      if (endLearnt || phase === 'done') return;
      endLearnt = true;
      if (phase !== 'running') armGrace(); // a running handler's return arms it
    };
    const workSaysDone = (): void => {
      workDone = true;
      if (phase === 'task' || phase === 'unseen-task') readTaskCost(); // a running handler's return reads it
    };
    /** Reads the task's status through the call's own store: a cancel naming a task of another session, or one the store refused, changes nothing. */
    const checkTaskEnded = async (taskId: string): Promise<void> => {
      const status = await watched?.statusOf(taskId).catch(() => undefined);
      if (TERMINAL_TASK_STATUSES.has(status)) learnEnd();
    };
    const watcher: TaskWatcher = { taskNews: (taskId) => void checkTaskEnded(taskId) };
    const adopt = (taskId: string): void => {
      ownTasks.add(taskId);
      cancelWatch.watch(taskId, watcher);
    };

    const call: BatonCall = {
      tool,
      invocationId,
      context: decision.context,
      counters: decision.counters,
      warnings: decision.warnings,
      requestId: decision.request_id,
      reportCost: (cost) => {
        if (phase === 'done') {
          emit({
            type: 'report-failed',
            tool,
            invocationId,
            actual: null,
            error: new Error(
              "batonCall(extra).reportCost was called after the call's cost was read (when its handler returned, its work stored its task's result or status, or taskEndGraceMs after its task ended); this cost was not reported.",
            ),
          });
          return;
        }
        recordedCost = cost;
        if (phase === 'running') return;
        // The end of a task created elsewhere may never be learnt: quiet for the grace after its last cost, it is taken as ended.
        if (endLearnt || phase === 'unseen-task') armGrace();
        // The task may have ended where the middleware does not see it (the server's own store).
        else void checkTaskEnded(callTask!);
      },
    };
    let watched = watchTaskStore(isRecord(extra) ? extra['taskStore'] : undefined, {
      isOwn: (taskId) => ownTasks.has(taskId),
      created: (taskId) => {
        if (phase !== 'done') adopt(taskId);
      },
      stored: (result) => {
        taskResult ??= { result }; // the first result stored is the task's
        workSaysDone();
      },
      ended: workSaysDone,
      seenEnded: (result) => {
        if (result !== undefined) taskResult ??= result;
        learnEnd();
      },
    });
    let result: unknown;
    let failure: { error: unknown } | undefined;
    try {
      result = await next(request, {
        ...(isRecord(extra) ? extra : {}),
        ...(watched !== undefined ? { taskStore: watched.store } : {}),
        [CALL]: call,
      });
    } catch (error) {
      failure = { error };
    }

    const verified = { invocation_id: invocationId, request_id: decision.request_id, warnings: decision.warnings };
    const answeredTask = failure ? undefined : taskIdOf(result, params);
    const createdTask = [...ownTasks].at(-1);
    if (!workDone && taskResult === undefined && (answeredTask ?? createdTask) !== undefined) {
      // The work goes on past the handler: a task it created (also one the McpServer polled for a
      // call without a task request and answered with an error once the agent cancelled it), or
      // one created elsewhere, which it answered with.
      if (answeredTask === undefined || ownTasks.has(answeredTask)) {
        phase = 'task';
        callTask = answeredTask ?? createdTask;
        if (endLearnt) armGrace();
      } else {
        adopt(answeredTask); // its result may yet be stored through extra.taskStore
        phase = 'unseen-task';
        if (recordedCost !== undefined || endLearnt) armGrace();
      }
      if (failure) throw failure.error;
      return decorate(result, verified);
    }
    const answer = taskResult !== undefined ? taskResult.result : result;
    finish();
    let costReported: boolean | null = null;
    let cost: CostReport | undefined;
    try {
      cost = recordedCost ?? costFromResult(answer);
    } catch (error) {
      costReported = false;
      emit({ type: 'report-failed', tool, invocationId, actual: null, error });
    }
    if (cost) {
      const pending = report(tool, invocationId, cost);
      if (options.reportInBackground) void pending;
      else costReported = await pending;
    }
    if (failure) throw failure.error;
    return decorate(result, { ...verified, ...(costReported !== null ? { cost_reported: costReported } : {}) });
  };
}

/** A refusal the middleware makes itself; message and suggestion default to the code's ERROR_TABLE entry. */
function local(
  tool: string,
  code: McpErrorCode | BatonErrorCode,
  opts: { message?: string; suggestion?: string; violations?: readonly Violation[] } = {},
): BatonRefusal {
  const spec = ERROR_TABLE[code];
  return {
    tool,
    code,
    block: null,
    message: opts.message ?? spec.message,
    suggestion: opts.suggestion ?? spec.suggestion,
    violations: opts.violations ?? [],
    request_id: null,
    retryable: false,
  };
}

// Baton may have allowed (and counted) the call before its answer was lost; a
// re-send of the same invocation would then be refused as REPLAY_DETECTED.
const RETRY_FRESH =
  'To retry, sign a new invocation for the call (invokeTool signs one per call): re-sending this one may be refused as a replay.';

/**
 * The refusal the agent sees when Baton did not decide. What only the tool server's operator can
 * use (Baton's address, the client's advice on base URLs, Baton's advice to re-send the same
 * invocation, which this middleware refuses as a replay, the text of an answer that is not Baton
 * refusing the request, a request id not shaped as Baton's) stays out of it; the 'refused' event
 * carries the error whole.
 */
function unavailable(tool: string, e: unknown): BatonRefusal {
  if (e instanceof BatonApiError && e.code === 'PAYLOAD_TOO_LARGE') {
    // Baton's advice names its own limit (BATON_MAX_BODY_BYTES), the operator's to change, not the
    // agent's: the agent is told what it can change, the 'refused' event carries Baton's advice.
    return {
      tool,
      code: e.code,
      block: e.block ?? null,
      message:
        "This call is too large for Baton to check: its arguments and bundle together exceed the size the tool server's Baton accepts, so the tool did not run.",
      suggestion:
        "Call the tool with smaller arguments, or send the chain by reference (invokeTool's mode: 'reference', for a chain stored in Baton) so the bundle carries only its hashes; then sign a new invocation for the call.",
      violations: [],
      request_id: batonRequestId(e.requestId),
      retryable: false,
    };
  }
  if (e instanceof BatonApiError) {
    // No answer of Baton's (unreachable, timed out, aborted, not Baton's answer): the client's
    // texts name the address and the configuration.
    const clientMade = e.status === 0 || e.code === 'UNEXPECTED_RESPONSE';
    // Baton refused the tool server's own key: nothing the agent can change.
    const keyRefused = e.status === 401 || e.status === 403;
    const down = clientMade || e.status >= 500;
    // Only Baton's own refusal of the request (a 4xx with one of its codes) is passed on as written.
    // A 5xx, or a code Baton never sends, may be a proxy's or a backend's text (a database error
    // with its connection string): the agent gets the table's text, the 'refused' event the answer.
    const batonCode = isServiceErrorCode(e.code);
    const code: AnyErrorCode = batonCode || (clientMade && isErrorCode(e.code)) ? (e.code as AnyErrorCode) : 'BATON_UNAVAILABLE';
    const passedOn = batonCode && !down;
    const tableMessage = ERROR_TABLE[code].message;
    const message = passedOn && !keyRefused ? e.message : tableMessage;
    return {
      tool,
      code,
      block: passedOn ? (e.block ?? null) : null,
      message:
        code === 'BATON_UNAVAILABLE'
          ? tableMessage
          : down
            ? `Baton could not decide, so the tool did not run: ${message}`
            : `Baton refused the verification request: ${message}`,
      suggestion: e.retryable
        ? `${ERROR_TABLE.BATON_UNAVAILABLE.suggestion} ${RETRY_FRESH}`
        : keyRefused
          ? "The tool server's own access to Baton was refused, so no call through it can run until its operator fixes it; retrying will not help."
          : passedOn
            ? (e.suggestion ?? ERROR_TABLE.BATON_UNAVAILABLE.suggestion)
            : ERROR_TABLE.BATON_UNAVAILABLE.suggestion,
      violations: passedOn ? e.violations : [],
      request_id: batonRequestId(e.requestId),
      retryable: e.retryable,
    };
  }
  return {
    ...local(tool, 'BATON_UNAVAILABLE', { suggestion: `${ERROR_TABLE.BATON_UNAVAILABLE.suggestion} ${RETRY_FRESH}` }),
    retryable: true,
  };
}

/**
 * The shape of Baton's request ids: one it generated (a UUID) or a caller's X-Request-Id it took
 * (up to 64 letters, digits, '_', '-' or '=', as src/service/app.ts accepts them).
 */
const BATON_REQUEST_ID = /^[\w=-]{1,64}$/;

/** The request id of an answer, for the agent: only one shaped as Baton's (a proxy's or a backend's text may hold anything). */
function batonRequestId(id: string | undefined): string | null {
  return id !== undefined && BATON_REQUEST_ID.test(id) ? id : null;
}

function isServiceErrorCode(code: string): boolean {
  return (SERVICE_ERROR_CODES as readonly string[]).includes(code);
}

function decorate(result: unknown, verified: Record<string, unknown>): unknown {
  if (!isRecord(result) || !Array.isArray(result['content'])) return result; // e.g. a task result: untouched
  const meta = isRecord(result['_meta']) ? result['_meta'] : {};
  return { ...result, _meta: { ...meta, [VERIFIED_META_KEY]: verified } };
}

/** A task in one of these has ended (the MCP tasks specification's terminal statuses). */
const TERMINAL_TASK_STATUSES: ReadonlySet<unknown> = new Set(['completed', 'failed', 'cancelled']);

/**
 * The task id of a CreateTaskResult (what a task tool's handler returns to a task request);
 * undefined for any other result. The SDK answers with a CreateTaskResult only a request that asked
 * for a task (`params.task`), and checks every other answer as a CallToolResult, which may carry
 * no content and a field named `task`: without `params.task` it is not a task.
 */
function taskIdOf(result: unknown, params: Record<string, unknown>): string | undefined {
  if (!isRecord(params['task'])) return undefined;
  if (!isRecord(result) || Array.isArray(result['content']) || !isRecord(result['task'])) return undefined;
  const id = result['task']['taskId'];
  return typeof id === 'string' ? id : undefined;
}

/** What watchTaskStore tells a call of its tasks (created through the store, or named in the handler's answer). */
interface TaskStoreHooks {
  isOwn(taskId: string): boolean;
  /** A task was created through the store: it is the call's. */
  created(taskId: string): void;
  /** A result was stored for a task of the call, whether or not the store accepted it. */
  stored(result: unknown): void;
  /** A task's status was set terminal (failed, cancelled, perhaps with no result to come). */
  ended(): void;
  /** A task was read as ended: a terminal status, or its result (given). */
  seenEnded(result?: { readonly result: unknown }): void;
}

/**
 * The request's task store (extra.taskStore) as the handler gets it: the same store, telling the
 * call of each of its tasks what the hooks say, and reading a task's status (statusOf) for it.
 * A result is told of whether or not the store accepts it (it refuses one for a task the agent
 * cancelled, and the work that ran still cost what it says). Undefined when the request has no task store.
 */
function watchTaskStore(
  store: unknown,
  hooks: TaskStoreHooks,
): { readonly store: object; statusOf(taskId: string): Promise<unknown> } | undefined {
  if (!isRecord(store) || typeof store['createTask'] !== 'function' || typeof store['storeTaskResult'] !== 'function') return undefined;
  type Fn = (...args: unknown[]) => Promise<unknown>;
  const own = (taskId: unknown): taskId is string => typeof taskId === 'string' && hooks.isOwn(taskId);
  const proxy = new Proxy(store, {
    get(target, prop) {
      if (prop === 'createTask') {
        return async (...args: unknown[]) => {
          const task = await (target['createTask'] as Fn).apply(target, args);
          if (isRecord(task) && typeof task['taskId'] === 'string') hooks.created(task['taskId']);
          return task;
        };
      }
      if (prop === 'storeTaskResult') {
        return async (...args: unknown[]) => {
          try {
            return await (target['storeTaskResult'] as Fn).apply(target, args);
          } finally {
            if (own(args[0])) hooks.stored(args[2]);
          }
        };
      }
      if (prop === 'updateTaskStatus' && typeof target['updateTaskStatus'] === 'function') {
        return async (...args: unknown[]) => {
          try {
            return await (target['updateTaskStatus'] as Fn).apply(target, args);
          } finally {
            // A task may end without a result (failed, cancelled): its cost is then the one reported, if any.
            if (own(args[0]) && TERMINAL_TASK_STATUSES.has(args[1])) hooks.ended();
          }
        };
      }
      // A handler that honours tasks/cancel learns of it here: the SDK wrote it into the store.
      if (prop === 'getTask' && typeof target['getTask'] === 'function') {
        return async (...args: unknown[]) => {
          const task = await (target['getTask'] as Fn).apply(target, args);
          if (own(args[0]) && isRecord(task) && TERMINAL_TASK_STATUSES.has(task['status'])) hooks.seenEnded();
          return task;
        };
      }
      if (prop === 'getTaskResult' && typeof target['getTaskResult'] === 'function') {
        return async (...args: unknown[]) => {
          const result = await (target['getTaskResult'] as Fn).apply(target, args);
          if (own(args[0])) hooks.seenEnded({ result });
          return result;
        };
      }
      const value: unknown = Reflect.get(target, prop, target);
      return typeof value === 'function' ? (value as Fn).bind(target) : value;
    },
    // A write goes to the store itself, so a setter touching its #private fields gets the store as `this`.
    set(target, prop, value) {
      return Reflect.set(target, prop, value, target);
    },
  });
  const statusOf = async (taskId: string): Promise<unknown> => {
    if (typeof store['getTask'] !== 'function') return undefined;
    const task: unknown = await (store['getTask'] as Fn).call(store, taskId);
    return isRecord(task) ? task['status'] : undefined;
  };
  return { store: proxy, statusOf };
}

/** A cost the tool returned in its result's `_meta` (cost_usd, tokens_in, tokens_out, source, unavailable_reason). */
function costFromResult(result: unknown): CostReport | undefined {
  if (!isRecord(result) || !isRecord(result['_meta'])) return undefined;
  const m = result['_meta'];
  if (!('cost_usd' in m) && m['source'] !== 'unavailable') return undefined;
  const num = (k: string): number | null | undefined => {
    const v = m[k];
    if (v === undefined || v === null || Number.isFinite(v)) return v as number | null | undefined;
    throw new TypeError(
      `The tool result's _meta.${k} must be a finite number, got ${typeof v === 'number' ? String(v) : JSON.stringify(v)}.`,
    );
  };
  const source = m['source'];
  if (source !== undefined && !(ACTUAL_SOURCES as readonly unknown[]).includes(source)) {
    throw new TypeError(`The tool result's _meta.source must be one of ${ACTUAL_SOURCES.join(', ')}, got ${JSON.stringify(source)}.`);
  }
  const reason = m['unavailable_reason'];
  return {
    cost_usd: num('cost_usd'),
    tokens_in: num('tokens_in'),
    tokens_out: num('tokens_out'),
    ...(source !== undefined ? { source: source as ActualSource } : {}),
    ...(typeof reason === 'string' ? { unavailable_reason: reason } : {}),
  };
}

function toActual(cost: CostReport, defaultSource: ActualSource): ActualReport {
  for (const k of ['cost_usd', 'tokens_in', 'tokens_out'] as const) {
    const v = cost[k];
    // JSON would send NaN or Infinity as null, and Baton would answer about a missing cost.
    if (typeof v === 'number' && !Number.isFinite(v)) throw new TypeError(`The reported ${k} must be a finite number, got ${v}.`);
  }
  const source = cost.source ?? defaultSource;
  return {
    source,
    ...(cost.cost_usd !== undefined && cost.cost_usd !== null ? { cost_usd: cost.cost_usd } : {}),
    ...(cost.tokens_in !== undefined && cost.tokens_in !== null ? { tokens_in: cost.tokens_in } : {}),
    ...(cost.tokens_out !== undefined && cost.tokens_out !== null ? { tokens_out: cost.tokens_out } : {}),
    ...(cost.unavailable_reason !== undefined && cost.unavailable_reason !== null ? { unavailable_reason: cost.unavailable_reason } : {}),
  };
}

// ---------------------------------------------------------------- bundles in _meta

export type BundleLookup =
  | { readonly ok: true; readonly bundle: Bundle; readonly key: string }
  | { readonly ok: false; readonly code: 'BUNDLE_MISSING' | 'BUNDLE_MALFORMED'; readonly message: string; readonly suggestion: string };

function noBundle(code: 'BUNDLE_MISSING' | 'BUNDLE_MALFORMED', message: string = ERROR_TABLE[code].message): BundleLookup {
  return { ok: false, code, message, suggestion: ERROR_TABLE[code].suggestion };
}

/** Reads the bundle of a tools/call from its `_meta` (every key DRS and Baton use). */
export function bundleFromMeta(meta: Record<string, unknown> | undefined): BundleLookup {
  const keys = [DRS_BUNDLE_META_KEY_NEXT, DRS_BUNDLE_META_KEY, PLAIN_BUNDLE_META_KEY].filter(
    (k) => meta?.[k] !== undefined && meta[k] !== null,
  );
  if (!meta || keys.length === 0) {
    return noBundle('BUNDLE_MISSING');
  }
  const bundles: { key: string; bundle: Bundle }[] = [];
  for (const key of keys) {
    const parsed = parseBundleValue(meta[key], key);
    if (typeof parsed === 'string') return noBundle('BUNDLE_MALFORMED', parsed);
    bundles.push({ key, bundle: parsed });
  }
  const first = bundles[0]!;
  if (bundles.length > 1 && bundles.some((b) => sameJson(b.bundle, first.bundle) === false)) {
    return noBundle(
      'BUNDLE_MALFORMED',
      `The request carries different bundles under ${keys.map((k) => `_meta["${k}"]`).join(' and ')}; the tool server cannot tell which one applies.`,
    );
  }
  return { ok: true, bundle: first.bundle, key: first.key };
}

function sameJson(a: unknown, b: unknown): boolean {
  try {
    return canonicalJson(a) === canonicalJson(b);
  } catch {
    return false;
  }
}

function parseBundleValue(value: unknown, key: string): Bundle | string {
  let obj: unknown = value;
  if (typeof value === 'string') {
    let text: string;
    try {
      // Canonical unpadded base64url, as Baton reads the X-DRS-Bundle header: no '=' padding.
      text = utf8Decode(decodeBase64url(value.trim(), `_meta["${key}"]`));
      obj = JSON.parse(text);
    } catch {
      return `_meta["${key}"] is not base64url-encoded bundle JSON (unpadded base64url, as encodeBundle writes it).`;
    }
    // Baton would judge the bundle this middleware re-encodes, not the text a reader keeping the first key sees.
    const ambiguity = jsonAmbiguity(text, DOCUMENT_MAX_NESTING);
    if (ambiguity !== undefined) return `The bundle in _meta["${key}"] ${ambiguity}; readers disagree on which value it holds.`;
  }
  if (!isRecord(obj)) return `_meta["${key}"] is not a bundle: expected {bundle_version, invocation, receipts}.`;
  if (typeof obj['invocation'] !== 'string' || obj['invocation'].length === 0) {
    return `The bundle in _meta["${key}"] has no invocation (a compact JWS string).`;
  }
  const receipts = obj['receipts'] ?? [];
  if (!Array.isArray(receipts) || !receipts.every((r) => typeof r === 'string')) {
    return `The bundle in _meta["${key}"] has receipts that are not a list of compact JWS strings.`;
  }
  // Everything else (version, the records themselves) is Baton's to judge.
  return { ...obj, bundle_version: obj['bundle_version'] ?? '4.0', invocation: obj['invocation'], receipts } as Bundle;
}

/** A string field of an invocation payload (tool_server, cmd), read without checking anything (Baton does); undefined if unreadable. */
function invocationPayload(jws: string): Record<string, unknown> | undefined {
  try {
    const part = jws.split('.')[1];
    if (part === undefined) return undefined;
    const payload: unknown = JSON.parse(utf8Decode(decodeBase64url(part, 'invocation payload')));
    return isRecord(payload) ? payload : undefined;
  } catch {
    return undefined;
  }
}

// ---------------------------------------------------------------- refusals, readable and for programs

/**
 * A person- and model-readable refusal: what, every unmet condition, what to do. Takes the
 * refusal (refusalOf); given the tool call's result or error itself, as plain JavaScript may pass
 * it, it reads the refusal out of it, and throws a TypeError saying so when there is none.
 */
export function explainRefusal(refusal: BatonRefusal): string {
  const r = Array.isArray((refusal as Partial<BatonRefusal> | null)?.violations)
    ? refusal
    : (refusalOf(refusal) ??
      // A partial refusal passed as it is (another middleware's, an older release's): filled when its
      // code is one of Baton's. Anything else with a string code (an Error's 'ECONNREFUSED', {code: 'ok'})
      // is no refusal, and the TypeError below says so.
      (isRecord(refusal) && !(refusal instanceof Error) && typeof refusal['code'] === 'string' && isErrorCode(refusal['code'])
        ? wholeRefusal(refusal)
        : null));
  if (r === null)
    throw new TypeError('explainRefusal takes a Baton refusal: pass refusalOf(result), which is null when Baton did not refuse the call');
  // Baton's service decides most refusals, but the middleware makes some itself (a bundle missing,
  // a tool server or command that does not match, a retry it will not run twice, Baton unreachable):
  // the line names neither, and the codes and advice below say which.
  // A request that calls no tool (UNGATED_REQUEST) is named by its method.
  const [what, outcome] =
    r.tool === '' && typeof r.method === 'string'
      ? [`This ${r.method} request`, 'It was not served.']
      : [`This call to "${r.tool}"`, 'The tool did not run.'];
  const lines = [`${what} was refused: ${r.code}${r.block ? ` (block ${r.block})` : ''}. ${outcome}`, r.message];
  if (r.violations.length > 0) {
    lines.push('', `Unmet conditions (${r.violations.length}):`);
    r.violations.forEach((v, i) => {
      const at = v.dr_index === undefined ? '' : ` in delegation #${v.dr_index}${v.dr_index === 0 ? ' (root)' : ''}`;
      const req = requirementText(v);
      lines.push(`  ${i + 1}. ${v.code}${at}, ${v.field}${req}${v.message && v.message !== r.message ? `. ${v.message}` : ''}`);
    });
  }
  lines.push('', `What to do: ${r.suggestion}`);
  if (r.approval) {
    const until = new Date(r.approval.expires_at * 1000).toISOString();
    lines.push(
      `A human must approve this call first: approval ${r.approval.id} (${r.approval.status}, good until ${until}).`,
      'Once it is approved, retry exactly the same call (same tool and arguments): it is allowed once.',
    );
  } else if (r.retryable) lines.push('This refusal is temporary: the same call, signed afresh, may succeed later.');
  if (r.request_id) lines.push(`Baton request id: ${r.request_id}`);
  return lines.join('\n');
}

/**
 * The refusal in a tool result (or a protocol-error's data: an McpError of either of the MCP SDK's
 * builds, or an error of that shape), or null when the call ran. A refusal that lacks members
 * (another middleware's, an older release's) has them filled: tool "", block and request_id null,
 * no violations, not retryable, message and suggestion from the code's ERROR_TABLE entry; one
 * without a string code is not a refusal, nor is a partial one in an error's data whose code is none of Baton's.
 */
export function refusalOf(resultOrError: unknown): BatonRefusal | null {
  if (!isRecord(resultOrError)) return null;
  // An error by its shape, not its class: the MCP SDK's CommonJS build has an McpError class of its
  // own (a CommonJS tool server's or client's), and an error that crossed a transport may be a plain
  // {code, message, data}. A tool result has no numeric code.
  if (typeof resultOrError['code'] === 'number' && typeof resultOrError['message'] === 'string') {
    return resultOrError['code'] === BATON_REFUSAL_ERROR_CODE ? refusalInErrorData(resultOrError['data']) : null;
  }
  if (!isRecord(resultOrError['_meta'])) return null;
  const r = resultOrError['_meta'][REFUSAL_META_KEY];
  return isRecord(r) ? wholeRefusal(r) : null;
}

/**
 * The refusal in a -32003 error's data, or null. The code is in the JSON-RPC range any server may
 * use, unlike the `baton/refusal` key: data is Baton's refusal only when it is whole, or names a code
 * only Baton's checks produce (a partial one, filled: a verification code or the middleware's own).
 * Another server's -32003 ({reason}, {code: 'RATE_LIMITED'}, {code: 'UNAUTHORIZED'}) is not: Baton's
 * advice for a generic code would be read as the answer to another server's error.
 */
function refusalInErrorData(data: unknown): BatonRefusal | null {
  // The middleware's own refusals are always whole, generic codes included (toRefusal): not reading
  // a partial copy of one of those (UNAUTHORIZED, TIMEOUT, ...) is the price of reading no other server's error as Baton's.
  if (!isRecord(data)) return null;
  if (isWholeRefusal(data)) return data;
  return typeof data['code'] === 'string' && isBatonSpecificCode(data['code']) ? wholeRefusal(data) : null;
}

/** `r` as a BatonRefusal: itself when whole, else a copy with the missing or mistyped members filled; null without a string code. */
function wholeRefusal(r: Record<string, unknown>): BatonRefusal | null {
  const code = r['code'];
  if (typeof code !== 'string') return null;
  if (isWholeRefusal(r)) return r;
  const spec = isErrorCode(code) ? ERROR_TABLE[code] : undefined;
  const text = (v: unknown) => (typeof v === 'string' ? v : undefined);
  return {
    ...r,
    tool: text(r['tool']) ?? '',
    code,
    block: text(r['block']) ?? null,
    message: text(r['message']) ?? spec?.message ?? `The call was refused (${code}).`,
    suggestion: text(r['suggestion']) ?? spec?.suggestion ?? 'Read the refusal code; the tool did not run.',
    violations: Array.isArray(r['violations']) ? (r['violations'].filter(isRecord) as unknown as Violation[]) : [],
    request_id: text(r['request_id']) ?? null,
    retryable: typeof r['retryable'] === 'boolean' ? r['retryable'] : false,
  } as BatonRefusal;
}

/** Whether `r` has every member of a BatonRefusal, each of its type. */
function isWholeRefusal(r: Record<string, unknown>): r is Record<string, unknown> & BatonRefusal {
  return (
    typeof r['code'] === 'string' &&
    typeof r['tool'] === 'string' &&
    (r['block'] === null || typeof r['block'] === 'string') &&
    typeof r['message'] === 'string' &&
    typeof r['suggestion'] === 'string' &&
    Array.isArray(r['violations']) &&
    r['violations'].every(isRecord) &&
    (r['request_id'] === null || typeof r['request_id'] === 'string') &&
    typeof r['retryable'] === 'boolean'
  );
}

// ---------------------------------------------------------------- agent-side

export interface AttachOptions {
  /** Which _meta key carries the bundle (default "X-DRS-Bundle", which every DRS release reads). */
  readonly key?: typeof DRS_BUNDLE_META_KEY | typeof DRS_BUNDLE_META_KEY_NEXT;
}

export interface ToolCallParams {
  name: string;
  arguments?: Record<string, unknown>;
  _meta?: Record<string, unknown>;
  [k: string]: unknown;
}

/** base64url(JSON bundle): the DRS wire form of a bundle. */
export function encodeBundle(bundle: Bundle): string {
  return encodeBase64url(utf8Encode(JSON.stringify(bundle)));
}

/** Returns tools/call params with the bundle in `_meta` (other _meta entries kept). Pure: checks nothing. */
export function attachBundle(params: ToolCallParams, bundle: Bundle, options: AttachOptions = {}): ToolCallParams {
  return { ...params, _meta: { ...(params._meta ?? {}), [options.key ?? DRS_BUNDLE_META_KEY]: encodeBundle(bundle) } };
}

export type ToolCallResult = Awaited<ReturnType<Client['callTool']>>;

/** What callToolWithBundle and invokeTool use of an MCP Client, by its shape (from either of the SDK's builds). */
export interface McpClientLike {
  callTool(params: never, resultSchema?: never, options?: never): Promise<unknown>;
}

/**
 * Calls `name` with `args` and the bundle attached. Checks first, locally,
 * what the tool server would refuse: the signed args must equal `args` and
 * name the tool (throws a TypeError saying what differs).
 */
export async function callToolWithBundle(
  client: McpClientLike,
  name: string,
  args: Record<string, unknown>,
  bundle: Bundle,
  options: AttachOptions & { readonly requestOptions?: McpRequestOptions } = {},
): Promise<ToolCallResult> {
  if (args['tool'] !== name) {
    throw new TypeError(
      `callToolWithBundle: args.tool must name the tool called ("${name}"), got ${args['tool'] === undefined ? '(absent)' : shownValue(args['tool'])}; the signed args are the call's arguments.`,
    );
  }
  const signed = invocationPayload(bundle.invocation)?.['args'];
  if (signed !== undefined && canonicalJson(signed) !== canonicalJson(args)) {
    throw new TypeError(
      'callToolWithBundle: args differ from the args the invocation signed; the tool server would refuse BINDING_MISMATCH. Sign a new invocation for these args.',
    );
  }
  return (client as Client).callTool(attachBundle({ name, arguments: args }, bundle, options), undefined, options.requestOptions);
}

export interface InvokeToolInput {
  /** The delegation chain, root first, ending with the invoker's DR. */
  readonly chain: readonly (SignedDelegation | string)[];
  /** The holder of the leaf DR (its aud). */
  readonly invoker: KeyPair;
  /** The tool server's identity (what it passes to withBaton as toolServer). */
  readonly toolServer: string;
  readonly name: string;
  /** The tool's arguments plus the policy fields (estimated_cost_usd, pii_access, write_access, ...); `tool` is added. */
  readonly arguments: Record<string, unknown>;
  /** Embed the chain ('value', default) or send only hashes ('reference': the chain must be stored in Baton). */
  readonly mode?: 'value' | 'reference';
  /** Default "/mcp/tools/call" when the leaf's cmd covers it, else the leaf's cmd (e.g. "/mcp/tools/call/<name>"). */
  readonly cmd?: string;
  readonly metaKey?: AttachOptions['key'];
  readonly requestOptions?: McpRequestOptions;
}

/** Signs a fresh invocation for one tool call and makes it with the bundle attached: one call per tool use. */
export async function invokeTool(client: McpClientLike, input: InvokeToolInput): Promise<ToolCallResult> {
  if (input.arguments['tool'] !== undefined && input.arguments['tool'] !== input.name) {
    throw new TypeError(
      `invokeTool: arguments.tool is ${input.arguments['tool'] === undefined ? '(absent)' : shownValue(input.arguments['tool'])} but the tool called is "${input.name}".`,
    );
  }
  const args = { tool: input.name, ...input.arguments };
  const invocation = createInvocation({
    chain: input.chain,
    invoker: input.invoker,
    args,
    toolServer: input.toolServer,
    ...(input.cmd !== undefined ? { cmd: input.cmd } : toolCallCmd(input.chain)),
  });
  const bundle = makeBundle(invocation, input.chain, input.mode ?? 'value');
  return callToolWithBundle(client, input.name, args, bundle, {
    ...(input.metaKey !== undefined ? { key: input.metaKey } : {}),
    ...(input.requestOptions !== undefined ? { requestOptions: input.requestOptions } : {}),
  });
}

/**
 * The cmd withBaton accepts for a tools/call under this chain: a leaf granted
 * a wider command (e.g. "/mcp") would otherwise pass its own cmd on, which
 * tool servers refuse. An empty chain is left to createInvocation to refuse.
 */
function toolCallCmd(chain: InvokeToolInput['chain']): { cmd?: string } {
  const last = chain[chain.length - 1];
  if (last === undefined) return {};
  const leafCmd = (typeof last === 'string' ? readDelegation(last) : last).payload.cmd;
  return { cmd: commandCovers(leafCmd, TOOLS_CALL_CMD) ? TOOLS_CALL_CMD : leafCmd };
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}
