/** Tool declarations for tests: a harmless read tool unless told otherwise. */
import type { ToolDeclaration } from '../../src/protocol/tool-catalog.js';

export function tool(name: string, over: Partial<ToolDeclaration> = {}): ToolDeclaration {
  return {
    name,
    type: 'read',
    blast_radius: 'read',
    untrusted_content: false,
    private_data_access: false,
    external_communication: false,
    tags: [],
    action_type: 'docs:read',
    ...over,
  };
}
