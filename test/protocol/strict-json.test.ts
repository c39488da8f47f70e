/** jsonAmbiguity: a key repeated in one object, a number read as another, or nesting too deep, found before any reader picks a value. */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { DOCUMENT_MAX_NESTING, jsonAmbiguity } from '../../src/protocol/strict-json.js';

describe('jsonAmbiguity', () => {
  it.each([
    ['{"a":1,"a":2}', 'repeats the key "a" in one object'],
    ['{ "a" : 1 ,\n "a"\t: 2 }', 'repeats the key "a" in one object'],
    // Escapes are decoded: "\u0061" is the key "a".
    ['{"a":1,"\\u0061":2}', 'repeats the key "a" in one object'],
    ['{"x":{"b":[1,{"c":1,"c":2}]}}', 'repeats the key "c" in one object'],
    ['[{"k":1},{"k":2,"j":{"k":3},"k":4}]', 'repeats the key "k" in one object'],
  ])('%s %s', (text, why) => {
    expect(jsonAmbiguity(text, DOCUMENT_MAX_NESTING)).toBe(why);
  });

  it.each([
    '{"a":1,"b":{"a":2},"c":[{"a":3},{"a":4}]}',
    '{"a":"\\"a\\":","b":"{\\"a\\":1,\\"a\\":2}"}',
    '{"a":"x","ab":"y","A":"z"}',
    '["a","a"]',
    '"a"',
    '{}',
  ])('reads %s as unambiguous: equal keys in different objects, or inside strings, are not repeats', (text) => {
    expect(jsonAmbiguity(text, DOCUMENT_MAX_NESTING)).toBeUndefined();
  });

  it.each([
    ['{"max_cost_usd":0.1000000000000000000000001}', '0.1000000000000000000000001, which a double holds only as 0.1 '],
    ['[12345678901234567891]', '12345678901234567891, which a double holds only as 12345678901234567000 '],
    ['[9007199254740993]', '9007199254740993, which a double holds only as 9007199254740992 '],
    ['{"a":[1,{"b":-1e-400}]}', '-1e-400, which a double holds only as 0 '],
    ['[1e400]', '1e400, beyond the largest number a double holds'],
    ['[-1E+309]', '-1E+309, beyond the largest number a double holds'],
  ])('refuses %s: it would be read as another number', (text, why) => {
    expect(jsonAmbiguity(text, DOCUMENT_MAX_NESTING)).toContain(`holds the number ${why}`);
  });

  it.each([
    '[0.1,1.0,1E2,1e+2,-0,-0.0,0.000,0.30000000000000004,1e21,1.5e-7,5e-324,1.7976931348623157e308]',
    '[100000000000000000000]',
    '["1e400"]',
    // Zero in any spelling, and integers a double holds exactly written in full (2^60, 2^53).
    '[0e5,0E+2,0.0e-7,-0e3]',
    '[1152921504606846976,9007199254740992,-9007199254740992]',
  ])('reads %s as written (the value a double holds, in any spelling; numbers inside strings are text)', (text) => {
    expect(jsonAmbiguity(text, DOCUMENT_MAX_NESTING)).toBeUndefined();
  });

  it('holds every double as JSON.stringify writes it, and refuses any literal with more digits than a double keeps', () => {
    fc.assert(
      fc.property(
        fc.double({ noNaN: true, noDefaultInfinity: true }),
        (d) => jsonAmbiguity(`[${JSON.stringify(d)}]`, DOCUMENT_MAX_NESTING) === undefined,
      ),
    );
    // A nonzero digit 25 places past the shortest form of a double of at least 1 (so no leading
    // zeros, and no exponent): no double's shortest form has 26 significant digits.
    fc.assert(
      fc.property(
        fc.double({ noNaN: true, min: 1, max: 1e15 }),
        fc.boolean(),
        fc.integer({ min: 1, max: 9 }),
        (magnitude, negative, digit) => {
          const shortest = JSON.stringify(negative ? -magnitude : magnitude);
          const literal = `${shortest}${shortest.includes('.') ? '' : '.'}${'0'.repeat(24)}${digit}`;
          return jsonAmbiguity(`[${literal}]`, DOCUMENT_MAX_NESTING)?.startsWith(`holds the number ${literal.slice(0, 40)}`) === true;
        },
      ),
    );
  });

  it('reads a number of a quarter million digits in linear time (a regex trimming its zeros took seconds)', () => {
    // 120,000 zeros took 14.6 s through a server before; linear, it takes milliseconds. The bound
    // is a hundred times that, so a loaded machine does not fail it; a quadratic scan would.
    const literal = `1.${'0'.repeat(250_000)}1`;
    const started = performance.now();
    expect(jsonAmbiguity(`{"a":${literal}}`, DOCUMENT_MAX_NESTING)).toMatch(/^holds the number 1\.0+…, which a double holds only as 1 /);
    expect(performance.now() - started).toBeLessThan(2_000);
  });

  it('refuses nesting past its limit, and no less', () => {
    expect(jsonAmbiguity(`${'['.repeat(4)}${']'.repeat(4)}`, 4)).toBeUndefined();
    expect(jsonAmbiguity(`${'['.repeat(5)}${']'.repeat(5)}`, 4)).toBe('nests deeper than 4 levels');
    expect(jsonAmbiguity('{"a":{"b":{"c":{"d":{}}}}}', 4)).toBe('nests deeper than 4 levels');
  });

  it('finds no repeat in what JSON.stringify writes, and finds one wherever a key is written twice', () => {
    fc.assert(
      fc.property(fc.jsonValue({ maxDepth: 6 }), (value) => jsonAmbiguity(JSON.stringify(value), DOCUMENT_MAX_NESTING) === undefined),
    );
    fc.assert(
      fc.property(
        fc.dictionary(fc.string(), fc.jsonValue({ maxDepth: 3 }), { minKeys: 1 }),
        fc.nat(),
        fc.jsonValue({ maxDepth: 2 }),
        (obj, pick, other) => {
          const keys = Object.keys(obj);
          const key = keys[pick % keys.length]!;
          const text = `${JSON.stringify(obj).slice(0, -1)},${JSON.stringify(key)}:${JSON.stringify(other)}}`;
          return jsonAmbiguity(text, DOCUMENT_MAX_NESTING) === `repeats the key ${JSON.stringify(key)} in one object`;
        },
      ),
    );
  });
});
