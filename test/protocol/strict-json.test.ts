/** jsonAmbiguity: a key repeated in one object, or nesting too deep, found before any reader picks a value. */
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
