/**
 * Agents that delegate: the operator roots agent A; A hands sub-agent B a
 * narrower slice of its authority; B calls tools through an MCP client,
 * signing one invocation per call.
 *
 * Everything here is plain SDK: key pairs (did:key), signed delegation
 * records (a sub-delegation that would widen its parent throws
 * POLICY_ESCALATION before anything is signed), and invokeTool, which signs
 * the invocation and attaches the DRS bundle to the MCP request's _meta.
 *
 * 'baton' and 'baton/mcp' are this repository's names for the packages; in your
 * own project import '@baton-drs/sdk' and '@baton-drs/mcp' (README.md).
 */
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js';
import type { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { createRootDelegation, createSubDelegation, type KeyPair, type Policy, type SignedDelegation } from 'baton';
import { invokeTool, type ToolCallResult } from 'baton/mcp';

/** What the operator grants agent A: research and writing, within a budget. */
export const POLICY_A: Policy = {
  allowed_tools: ['web_search', 'file_write'],
  max_cost_usd: 0.05, // per call, as declared by the agent
  max_calls: 10,
  max_spend_usd: 0.1, // metered, over A's whole subtree
  max_depth: 1, // A may delegate one more hop
  write_access: true,
  pii_access: false,
};

/** What A hands to B: searching only, three calls, a cent per call. */
export const POLICY_B: Policy = {
  allowed_tools: ['web_search'],
  max_cost_usd: 0.01,
  max_calls: 3,
  max_spend_usd: 0.02,
  max_depth: 0, // B may not delegate further
  write_access: false,
  pii_access: false,
};

/** What A hands to C: writing to the shared drive only, twice at most. */
export const POLICY_C: Policy = {
  allowed_tools: ['file_write'],
  max_cost_usd: 0.01,
  max_calls: 2,
  max_spend_usd: 0.01,
  max_depth: 0,
  write_access: true,
  pii_access: false,
};

/** What B declares per search (the tool server meters the real cost). */
export const SEARCH_ESTIMATE_USD = 0.003;

/** The operator (a trusted root key of the tenant) roots agent A. */
export function rootAgentA(operator: KeyPair, agentA: KeyPair): SignedDelegation {
  return createRootDelegation({ issuer: operator, audience: agentA.did, policy: POLICY_A, exp: nowSeconds() + 3600 });
}

/** A, holding the root DR, sub-delegates to B (signed by A: only the holder can). */
export function delegateToB(root: SignedDelegation, agentA: KeyPair, agentB: KeyPair): SignedDelegation {
  return createSubDelegation({ parent: root, issuer: agentA, audience: agentB.did, policy: POLICY_B });
}

/** A sub-delegates to C, the sub-agent that writes reports. */
export function delegateToC(root: SignedDelegation, agentA: KeyPair, agentC: KeyPair): SignedDelegation {
  return createSubDelegation({ parent: root, issuer: agentA, audience: agentC.did, policy: POLICY_C });
}

/** An MCP client connected to `server` in-process (a linked pair of in-memory transports). */
export async function connectInProcess(server: McpServer, name = 'agent-b'): Promise<{ client: Client; close(): Promise<void> }> {
  const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
  await server.connect(serverSide);
  const client = new Client({ name, version: '0.1.0' });
  await client.connect(clientSide);
  return {
    client,
    close: async () => {
      await client.close();
      await server.close();
    },
  };
}

/** An agent that holds a chain (root first, ending with its own DR) and calls tools under it. */
export class DelegatedAgent {
  constructor(
    readonly key: KeyPair,
    readonly chain: readonly SignedDelegation[],
    readonly toolServer: string,
  ) {}

  /** One tool call: a fresh signed invocation, the bundle in _meta, the chain by reference (stored in Baton). */
  call(
    client: Client,
    tool: string,
    args: Record<string, unknown>,
    declare: { estimated_cost_usd: number; write_access?: boolean },
  ): Promise<ToolCallResult> {
    return invokeTool(client, {
      chain: this.chain,
      invoker: this.key,
      toolServer: this.toolServer,
      name: tool,
      arguments: {
        ...args,
        estimated_cost_usd: declare.estimated_cost_usd,
        pii_access: false,
        write_access: declare.write_access ?? false,
      },
      mode: 'reference',
    });
  }

  search(client: Client, query: string): Promise<ToolCallResult> {
    return this.call(client, 'web_search', { query }, { estimated_cost_usd: SEARCH_ESTIMATE_USD });
  }

  writeFile(client: Client, path: string, content: string): Promise<ToolCallResult> {
    return this.call(client, 'file_write', { path, content }, { estimated_cost_usd: 0.001, write_access: true });
  }
}

/** The text of a tool result. */
export function textOf(result: ToolCallResult): string {
  const content = (result as { content?: unknown }).content;
  if (!Array.isArray(content)) return '';
  return content.map((c: { type?: string; text?: string }) => (c.type === 'text' ? (c.text ?? '') : `[${c.type ?? 'content'}]`)).join('\n');
}

const nowSeconds = (): number => Math.floor(Date.now() / 1000);
