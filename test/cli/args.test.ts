/** "Did you mean": which candidate a typo resolves to, and when none is offered. */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { closestMatch } from '../../src/cli/args.js';

const COMMANDS = ['keygen', 'delegate', 'submit', 'invoke', 'verify', 'report', 'revoke', 'chain', 'serve', 'demo'];

describe('closestMatch', () => {
  it.each([
    ['delegat', 'delegate'],
    ['dlegate', 'delegate'],
    ['revkoe', 'revoke'],
    ['keygn', 'keygen'],
    ['VERIFY', 'verify'],
    ['sub', 'submit'],
  ])('%s → %s', (typed, expected) => {
    expect(closestMatch(typed, COMMANDS)).toBe(expected);
  });

  it.each(['x', 'zzzzzz', 'frobnicate', ''])('offers nothing for %j', (typed) => {
    expect(closestMatch(typed, COMMANDS)).toBeUndefined();
  });

  it('an exact candidate always resolves to itself', () => {
    fc.assert(fc.property(fc.constantFrom(...COMMANDS), (name) => closestMatch(name, COMMANDS) === name));
  });
});
