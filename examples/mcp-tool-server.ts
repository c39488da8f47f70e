/**
 * An MCP tool server guarded by Baton: two tools, one call to withBaton.
 *
 * - web_search: returns made-up results; the (pretend) search API bills
 *   $0.002 per query, which the tool returns in its result's _meta, and the
 *   middleware reports it to Baton as the metered cost.
 * - file_write: writes into an in-memory "disk" (a write tool: a delegation
 *   must grant write_access for it); it reports its cost through
 *   batonCall(extra).reportCost instead.
 *
 * Neither tool knows anything about delegation: the middleware verifies the
 * caller's DRS bundle with Baton before a handler runs, and refuses the call
 * (with Baton's explanation) otherwise.
 */
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { z } from 'zod';
import { batonCall, withBaton, type BatonMcpOptions } from 'baton/mcp';

/** The identity invocations must name as tool_server. */
export const TOOL_SERVER = 'mcp://demo-tools';
/** What one search costs at the (pretend) search API. */
export const SEARCH_COST_USD = 0.002;

/**
 * The DRS policy fields an agent declares in a call's arguments (the signed
 * args are the call's arguments). Declared here so tools/list shows them;
 * Baton, not the tool, enforces them.
 */
const declared = {
  tool: z.string().describe('the tool name, as signed in the invocation'),
  estimated_cost_usd: z.number().nonnegative().optional().describe('what the agent expects this call to cost'),
  pii_access: z.boolean().optional(),
  write_access: z.boolean().optional(),
};

export interface ToolServerOptions {
  readonly baton: BatonMcpOptions['baton'];
  readonly reportKey?: string;
  readonly toolServer?: string;
  readonly onEvent?: BatonMcpOptions['onEvent'];
}

export interface DemoToolServer {
  readonly server: McpServer;
  /** What file_write wrote: path -> content. */
  readonly disk: Map<string, string>;
}

export function createToolServer(options: ToolServerOptions): DemoToolServer {
  const disk = new Map<string, string>();
  const server = new McpServer({ name: 'baton-demo-tools', version: '0.1.0' });

  server.registerTool(
    'web_search',
    { description: 'Search the web (made-up results).', inputSchema: { query: z.string().min(1), ...declared } },
    async ({ query }) => ({
      content: [
        {
          type: 'text',
          text: fakeResults(query)
            .map((r, i) => `${i + 1}. ${r.title} <${r.url}>`)
            .join('\n'),
        },
      ],
      // The metered cost of this call, reported to Baton by the middleware.
      _meta: { cost_usd: SEARCH_COST_USD, source: 'api-usage' },
    }),
  );

  server.registerTool(
    'file_write',
    { description: 'Write a text file.', inputSchema: { path: z.string().min(1), content: z.string(), ...declared } },
    async ({ path, content }, extra) => {
      disk.set(path, content);
      batonCall(extra)?.reportCost({ cost_usd: 0.0001, source: 'manual-meter' });
      return { content: [{ type: 'text', text: `wrote ${content.length} characters to ${path}` }] };
    },
  );

  withBaton(server, {
    baton: options.baton,
    toolServer: options.toolServer ?? TOOL_SERVER,
    ...(options.reportKey !== undefined ? { reportKey: options.reportKey } : {}),
    ...(options.onEvent ? { onEvent: options.onEvent } : {}),
  });
  return { server, disk };
}

function fakeResults(query: string): { title: string; url: string }[] {
  const slug =
    query
      .toLowerCase()
      .replace(/[^a-z0-9]+/g, '-')
      .replace(/^-|-$/g, '') || 'query';
  return [
    { title: `${query}: an overview`, url: `https://example.org/${slug}` },
    { title: `${query}, explained`, url: `https://example.com/wiki/${slug}` },
    { title: `Latest on ${query}`, url: `https://news.example.net/${slug}` },
  ];
}
