/** How a violation's requirement reads on one line, wherever it is shown (CLI, MCP refusals). */
import { describe, expect, it } from 'vitest';
import { requirementText } from '../../src/protocol/errors.js';

describe('requirementText', () => {
  it.each([
    [{ required: 1, actual: 2 }, ': required 1, got 2'],
    [{ required: 'active', actual: 'revoked' }, ': required active, got revoked'],
    [{ required: ['a'] }, ': required ["a"], got (absent)'],
    [{ actual: 'inv:1' }, ': got inv:1'],
    [{}, ''],
  ])('%j reads "%s"', (v, said) => {
    expect(requirementText(v)).toBe(said);
  });
});
