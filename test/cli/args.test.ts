/** "Did you mean": which candidate a typo resolves to, and when none is offered. */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { closestMatch, negativeValuesAttached, parseCliArgs } from '../../src/cli/args.js';

const COMMANDS = ['keygen', 'delegate', 'submit', 'invoke', 'verify', 'report', 'revoke', 'chain', 'serve', 'demo'];

describe('closestMatch', () => {
  it.each([
    ['delegat', 'delegate'],
    ['dlegate', 'delegate'],
    ['revkoe', 'revoke'],
    ['keygn', 'keygen'],
    ['VERIFY', 'verify'],
    ['sub', 'submit'],
    ['chian', 'chain'],
  ])('%s → %s', (typed, expected) => {
    expect(closestMatch(typed, COMMANDS)).toBe(expected);
  });

  it.each([
    ['prove', 'proof'],
    ['cheks', 'check'],
  ])('a subcommand typo that keeps its first letters: %s → %s', (typed, expected) => {
    expect(closestMatch(typed, ['proof', 'check', 'consistency'])).toBe(expected);
  });

  it('finds the candidate that keeps the first letters after another at the same distance', () => {
    // "prove" is two edits from both; only "proof" keeps "pro".
    expect(closestMatch('prove', ['drive', 'proof'])).toBe('proof');
    expect(closestMatch('prove', ['proof', 'drive'])).toBe('proof');
  });

  it.each([
    ['xroff', ['proof']],
    ['prf', ['proof']],
  ])('two edits are too many when the first three letters differ, or the word is short: %s', (typed, candidates) => {
    expect(closestMatch(typed, candidates)).toBeUndefined();
  });

  it.each(['x', 'zzzzzz', 'frobnicate', ''])('offers nothing for %j', (typed) => {
    expect(closestMatch(typed, COMMANDS)).toBeUndefined();
  });

  it('an exact candidate always resolves to itself', () => {
    fc.assert(fc.property(fc.constantFrom(...COMMANDS), (name) => closestMatch(name, COMMANDS) === name));
  });
});

describe('negative numbers as option values', () => {
  const options = { 'max-cost': { type: 'string' }, json: { type: 'boolean' } } as const;

  it('attaches a negative number to the option before it, so its own check can judge it', () => {
    expect(negativeValuesAttached(['--max-cost', '-1', '--json'], options)).toEqual(['--max-cost=-1', '--json']);
    expect(negativeValuesAttached(['--max-cost', '-.5'], options)).toEqual(['--max-cost=-.5']);
    expect(parseCliArgs('delegate', { args: ['--max-cost', '-1'], options }).values['max-cost']).toBe('-1');
  });

  it('leaves options, boolean flags and unknown options alone', () => {
    expect(negativeValuesAttached(['--max-cost', '--json'], options)).toEqual(['--max-cost', '--json']);
    expect(negativeValuesAttached(['--json', '-1'], options)).toEqual(['--json', '-1']);
    expect(negativeValuesAttached(['--other', '-1'], options)).toEqual(['--other', '-1']);
    expect(() => parseCliArgs('delegate', { args: ['--max-cost', '--json'], options })).toThrow(/--max-cost needs a value/);
  });
});
