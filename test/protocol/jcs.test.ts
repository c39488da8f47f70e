import { readFileSync, readdirSync } from 'node:fs';
import canonicalize from 'canonicalize';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { BatonError, type ErrorCode } from '../../src/protocol/errors.js';
import {
  DEFAULT_MAX_BYTES,
  canonicalBytes,
  canonicalJson,
  canonicalJsonRfc8785,
  canonicalNumber,
  parseCanonicalJson,
  utf8Decode,
  utf8Encode,
  type JsonValue,
} from '../../src/protocol/jcs.js';

const JCS_DIR = new URL('../vectors/jcs/', import.meta.url);
const DRS_JCS = new URL('../vectors/drs-conformance/jcs/vectors.json', import.meta.url);

const enc = new TextEncoder();

/** The BatonError fn throws; fails the test if it throws anything else or nothing. */
function caught(fn: () => unknown): BatonError {
  try {
    fn();
  } catch (e) {
    if (e instanceof BatonError) return e;
    throw new Error(`expected a BatonError, got ${String(e)}`);
  }
  throw new Error('expected a BatonError, but nothing was thrown');
}

function expectCode(fn: () => unknown, code: ErrorCode): BatonError {
  const e = caught(fn);
  expect(e.code, e.message).toBe(code);
  return e;
}

/** What JSON.parse gives back for v: -0 comes back as 0. */
function withoutNegativeZero(v: JsonValue): JsonValue {
  if (typeof v === 'number') return Object.is(v, -0) ? 0 : v;
  if (Array.isArray(v)) return v.map(withoutNegativeZero);
  if (v !== null && typeof v === 'object') {
    // fromEntries defines own properties, so a "__proto__" key stays a key.
    return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, withoutNegativeZero(x)]));
  }
  return v;
}

function hexToBytes(hex: string): Uint8Array {
  const clean = hex.replace(/\s+/g, '');
  return Uint8Array.from(clean.match(/../g) ?? [], (h) => parseInt(h, 16));
}

describe('cyberphone JCS vectors (test/vectors/jcs)', () => {
  const names = readdirSync(new URL('input/', JCS_DIR))
    .filter((f) => f.endsWith('.json'))
    .map((f) => f.slice(0, -'.json'.length))
    .sort();

  it('has the six upstream vectors', () => {
    expect(names).toEqual(['arrays', 'french', 'structures', 'unicode', 'values', 'weird']);
  });

  // values.json holds 1E30: an integer beyond 2^53-1. Plain RFC 8785 writes it
  // as 1e+30; Baton's profile refuses it (NUMBER_OUT_OF_RANGE) on both sides.
  const UNSAFE_INTEGER_VECTORS = new Set(['values']);

  for (const name of names) {
    describe(name, () => {
      const inputText = readFileSync(new URL(`input/${name}.json`, JCS_DIR), 'utf8');
      const outputBytes = new Uint8Array(readFileSync(new URL(`output/${name}.json`, JCS_DIR)));
      const outputText = new TextDecoder('utf-8', { fatal: true }).decode(outputBytes);
      const outhex = hexToBytes(readFileSync(new URL(`outhex/${name}.txt`, JCS_DIR), 'utf8'));
      const parsedInput: unknown = JSON.parse(inputText);

      it('output and outhex agree byte for byte', () => {
        expect(outhex).toEqual(outputBytes);
      });

      it('plain RFC 8785 writer reproduces the output exactly', () => {
        expect(canonicalJsonRfc8785(parsedInput)).toBe(outputText);
        expect(utf8Encode(canonicalJsonRfc8785(parsedInput))).toEqual(outputBytes);
      });

      it('the canonicalize package agrees (reference cross-check)', () => {
        expect(canonicalize(parsedInput)).toBe(outputText);
      });

      if (UNSAFE_INTEGER_VECTORS.has(name)) {
        it('Baton profile refuses the unsafe integer 1e+30 when writing and reading', () => {
          const w = expectCode(() => canonicalJson(parsedInput), 'NUMBER_OUT_OF_RANGE');
          expect(w.details?.['path']).toBe('/numbers/1');
          // Written with an exponent, a signer thinks of it as a float: the message says why it is refused and what to send.
          expect(w.message).toContain('1e+30 is a whole number beyond');
          expect(w.message).toContain('send such a value as a string');
          const r = expectCode(() => parseCanonicalJson(outputBytes, `vector ${name}`), 'NUMBER_OUT_OF_RANGE');
          expect(r.details?.['path']).toBe('/numbers/1');
          expectCode(() => parseCanonicalJson(inputText, `vector ${name}`), 'NUMBER_OUT_OF_RANGE');
        });

        it('the rest of the vector passes once 1e+30 is replaced by a safe number', () => {
          const safe = outputText.replace('1e+30', '1e-30');
          expect(safe).not.toBe(outputText);
          const parsed = parseCanonicalJson(enc.encode(safe), `vector ${name}`);
          expect(canonicalJson(parsed)).toBe(safe);
        });
      } else {
        it('canonicalJson(JSON.parse(input)) === output, and canonicalBytes matches outhex', () => {
          expect(canonicalJson(parsedInput)).toBe(outputText);
          expect(canonicalBytes(parsedInput)).toEqual(outhex);
        });

        it('parseCanonicalJson accepts the output (bytes and text) and reads the same value', () => {
          expect(parseCanonicalJson(outputBytes, `output ${name}`)).toEqual(parsedInput);
          expect(parseCanonicalJson(outputText, `output ${name}`)).toEqual(parsedInput);
        });

        it('parseCanonicalJson rejects the non-canonical input', () => {
          expect(inputText).not.toBe(outputText);
          const e = expectCode(() => parseCanonicalJson(enc.encode(inputText), `input ${name}`), 'NON_CANONICAL_JSON');
          expect(e.message).toContain(`input ${name}`);
        });
      }
    });
  }
});

describe('ES6 number formatting: es6numbers_first10000.txt', () => {
  const lines = readFileSync(new URL('es6numbers_first10000.txt', JCS_DIR), 'utf8').split('\n');
  if (lines[lines.length - 1] === '') lines.pop();
  const view = new DataView(new ArrayBuffer(8));
  const toDouble = (hex: string): number => {
    view.setBigUint64(0, BigInt(`0x${hex}`));
    return view.getFloat64(0);
  };

  it('covers all 10,000 lines: RFC form exact, Baton profile exact or NUMBER_OUT_OF_RANGE', () => {
    expect(lines).toHaveLength(10_000);
    let safe = 0;
    let unsafeIntegers = 0;
    let nonFinite = 0;
    const failures: string[] = [];
    for (const line of lines) {
      const comma = line.indexOf(',');
      const hex = line.slice(0, comma);
      const expected = line.slice(comma + 1);
      const x = toDouble(hex);
      if (!Number.isFinite(x)) {
        nonFinite++;
        expectCode(() => canonicalJson(x), 'INVALID_FIELD');
        expectCode(() => canonicalNumber(x), 'INVALID_FIELD');
        continue;
      }
      if (canonicalNumber(x) !== expected || canonicalJsonRfc8785(x) !== expected) {
        failures.push(`${line} -> ${canonicalNumber(x)}`);
        continue;
      }
      if (Number.isInteger(x) && !Number.isSafeInteger(x)) {
        unsafeIntegers++;
        expect(caught(() => canonicalJson(x)).code).toBe('NUMBER_OUT_OF_RANGE');
        expect(caught(() => parseCanonicalJson(expected, line)).code).toBe('NUMBER_OUT_OF_RANGE');
        continue;
      }
      safe++;
      if (canonicalJson(x) !== expected) failures.push(`${line} (canonicalJson)`);
      // The reader accepts exactly this spelling and reads back the same double.
      const back = parseCanonicalJson(expected, line);
      if (!Object.is(back, Object.is(x, -0) ? 0 : x)) failures.push(`${line} (read back ${String(back)})`);
    }
    expect(failures).toEqual([]);
    expect(nonFinite).toBe(0); // the generator skips NaN and the infinities
    expect(safe + unsafeIntegers + nonFinite).toBe(10_000);
    // Pinned so a changed vector file or rule shows up. Random bit patterns put
    // about half the doubles at or above 2^53, where every double is an integer.
    expect({ safe, unsafeIntegers }).toEqual({ safe: 6284, unsafeIntegers: 3716 });
  });

  it('the README sample lines', () => {
    expect(canonicalNumber(toDouble('4340000000000001'))).toBe('9007199254740994');
    expect(canonicalNumber(toDouble('444b1ae4d6e2ef50'))).toBe('1e+21');
    expect(canonicalNumber(toDouble('3eb0c6f7a0b5ed8d'))).toBe('0.000001');
    expect(canonicalNumber(toDouble('3eb0c6f7a0b5ed8c'))).toBe('9.999999999999997e-7');
    expect(canonicalNumber(toDouble('8000000000000000'))).toBe('0');
  });
});

describe('DRS 4.0 conformance: jcs/vectors.json', () => {
  const suite = JSON.parse(readFileSync(DRS_JCS, 'utf8')) as {
    vectors: { id: string; input: unknown; expected: string }[];
  };

  it('has vectors', () => {
    expect(suite.vectors.length).toBe(15);
  });

  for (const v of suite.vectors) {
    it(v.id, () => {
      expect(canonicalJson(v.input)).toBe(v.expected);
      expect(parseCanonicalJson(enc.encode(v.expected), v.id)).toEqual(v.input);
      expect(canonicalize(v.input)).toBe(v.expected);
    });
  }
});

describe('parseCanonicalJson rejections', () => {
  const rejects: [string, string | Uint8Array, ErrorCode][] = [
    // duplicate keys: JSON.parse keeps the last, other parsers the first
    ['duplicate keys', '{"a":1,"a":2}', 'NON_CANONICAL_JSON'],
    ['duplicate keys, same value', '{"a":1,"a":1}', 'NON_CANONICAL_JSON'],
    ['nested duplicate keys', '{"x":{"a":1,"a":2}}', 'NON_CANONICAL_JSON'],
    // whitespace
    ['space after colon', '{"a": 1}', 'NON_CANONICAL_JSON'],
    ['space in array', '[1, 2]', 'NON_CANONICAL_JSON'],
    ['leading space', ' 1', 'NON_CANONICAL_JSON'],
    ['trailing newline', '{}\n', 'NON_CANONICAL_JSON'],
    ['tab', '{"a":\t1}', 'NON_CANONICAL_JSON'],
    // key order
    ['unsorted keys', '{"b":1,"a":2}', 'NON_CANONICAL_JSON'],
    ['locale order, not code units', '{"b":1,"B":2}', 'NON_CANONICAL_JSON'],
    ['numeric keys in JS property order, not string order', '{"2":2,"10":1}', 'NON_CANONICAL_JSON'],
    // integers beyond 2^53-1
    ['2^53', '9007199254740992', 'NUMBER_OUT_OF_RANGE'],
    ['-2^53', '-9007199254740992', 'NUMBER_OUT_OF_RANGE'],
    ['2^53+1 (rounds when parsed)', '{"n":9007199254740993}', 'NUMBER_OUT_OF_RANGE'],
    ['1e300 as written by a lax signer', '1e300', 'NUMBER_OUT_OF_RANGE'],
    ['1e+300 in canonical spelling', '1e+300', 'NUMBER_OUT_OF_RANGE'],
    ['overflow to Infinity', '1e400', 'NUMBER_OUT_OF_RANGE'],
    ['negative overflow', '[-1e400]', 'NUMBER_OUT_OF_RANGE'],
    // non-ES6 number forms
    ['1.0', '1.0', 'NON_CANONICAL_JSON'],
    ['-0', '-0', 'NON_CANONICAL_JSON'],
    ['-0.0', '-0.0', 'NON_CANONICAL_JSON'],
    ['1E2', '1E2', 'NON_CANONICAL_JSON'],
    ['1e2', '1e2', 'NON_CANONICAL_JSON'],
    ['0.10', '0.10', 'NON_CANONICAL_JSON'],
    ['1E-7 (canonical: 1e-7)', '1E-7', 'NON_CANONICAL_JSON'],
    ['0.0000001 should be 1e-7', '0.0000001', 'NON_CANONICAL_JSON'],
    ['leading zero (invalid JSON)', '01', 'NON_CANONICAL_JSON'],
    ['plus sign (invalid JSON)', '+1', 'NON_CANONICAL_JSON'],
    ['NaN (invalid JSON)', 'NaN', 'NON_CANONICAL_JSON'],
    // escapes
    ['unneeded \\u escape', '"\\u0041"', 'NON_CANONICAL_JSON'],
    ['escaped solidus', '"\\/"', 'NON_CANONICAL_JSON'],
    ['uppercase hex escape', '"\\u001F"', 'NON_CANONICAL_JSON'],
    ['\\u escape where a short one exists', '"\\u000a"', 'NON_CANONICAL_JSON'],
    ['escaped surrogate pair instead of the literal', '"\\ud83d\\ude02"', 'NON_CANONICAL_JSON'],
    ['escaped DEL', '"\\u007f"', 'NON_CANONICAL_JSON'],
    ['raw control character (invalid JSON)', '"\u0001"', 'NON_CANONICAL_JSON'],
    // lone surrogates, even though JSON.stringify would write them back identically
    ['lone high surrogate', '"\\ud800"', 'NON_CANONICAL_JSON'],
    ['lone low surrogate', '["\\udc00"]', 'NON_CANONICAL_JSON'],
    ['lone surrogate in a key', '{"\\udbff":1}', 'NON_CANONICAL_JSON'],
    ['reversed pair', '"\\ude02\\ud83d"', 'NON_CANONICAL_JSON'],
    ['raw lone surrogate in string input', '"\ud800"', 'NON_CANONICAL_JSON'],
    // encoding
    ['invalid UTF-8', Uint8Array.of(0x22, 0xc3, 0x28, 0x22), 'NON_CANONICAL_JSON'],
    ['overlong UTF-8 "/"', Uint8Array.of(0x22, 0xc0, 0xaf, 0x22), 'NON_CANONICAL_JSON'],
    ['UTF-8-encoded surrogate', Uint8Array.of(0x22, 0xed, 0xa0, 0x80, 0x22), 'NON_CANONICAL_JSON'],
    ['truncated UTF-8', Uint8Array.of(0x22, 0xe2, 0x82, 0x22), 'NON_CANONICAL_JSON'],
    ['lone continuation byte', Uint8Array.of(0x22, 0x80, 0x22), 'NON_CANONICAL_JSON'],
    ['BOM (bytes)', Uint8Array.of(0xef, 0xbb, 0xbf, 0x7b, 0x7d), 'NON_CANONICAL_JSON'],
    ['BOM (string)', '\ufeff{}', 'NON_CANONICAL_JSON'],
    ['UTF-16 BOM', Uint8Array.of(0xff, 0xfe, 0x7b, 0x00, 0x7d, 0x00), 'NON_CANONICAL_JSON'],
    // not JSON
    ['empty', '', 'NON_CANONICAL_JSON'],
    ['unterminated', '{"a":1', 'NON_CANONICAL_JSON'],
    ['trailing comma', '[1,]', 'NON_CANONICAL_JSON'],
    ['two documents', '{}{}', 'NON_CANONICAL_JSON'],
    ['NUL after document', '{}\u0000', 'NON_CANONICAL_JSON'],
    // size and depth
    ['depth 33 arrays', '['.repeat(33) + ']'.repeat(33), 'INVALID_FIELD'],
    ['depth 33 objects', '{"a":'.repeat(33) + '1' + '}'.repeat(33), 'INVALID_FIELD'],
    ['oversize', `"${'a'.repeat(DEFAULT_MAX_BYTES - 1)}"`, 'INVALID_FIELD'],
    ['oversize bytes', enc.encode(`"${'a'.repeat(DEFAULT_MAX_BYTES - 1)}"`), 'INVALID_FIELD'],
  ];

  for (const [name, input, code] of rejects) {
    it(`${name} -> ${code}`, () => {
      const e = expectCode(() => parseCanonicalJson(input, 'payload of receipt 2'), code);
      expect(e.message).toContain('payload of receipt 2');
      expect(e.details?.['what']).toBe('payload of receipt 2');
    });
  }

  it('accepts the boundaries of each rule', () => {
    expect(parseCanonicalJson('9007199254740991', 'x')).toBe(9007199254740991);
    expect(parseCanonicalJson('-9007199254740991', 'x')).toBe(-9007199254740991);
    expect(parseCanonicalJson('1e-7', 'x')).toBe(1e-7);
    expect(parseCanonicalJson('4.5', 'x')).toBe(4.5);
    expect(parseCanonicalJson('0', 'x')).toBe(0);
    expect(parseCanonicalJson('"\\u001f\\n\\"\\\\😂é\u007f"', 'x')).toBe('\u001f\n"\\😂é\u007f');
    expect(parseCanonicalJson('{"B":2,"b":1}', 'x')).toEqual({ B: 2, b: 1 });
    expect(parseCanonicalJson('{"10":1,"2":2}', 'x')).toEqual({ 10: 1, 2: 2 });
    // "__proto__" is an ordinary key in JSON, but JavaScript readers drop it or take it as the
    // prototype, so a signed member would not be what is judged: refused, at any depth.
    expectCode(() => parseCanonicalJson('{"__proto__":{"x":1}}', 'x'), 'INVALID_FIELD');
    expectCode(() => parseCanonicalJson('{"a":[{"__proto__":1}]}', 'x'), 'INVALID_FIELD');
    expectCode(() => canonicalJson(JSON.parse('{"__proto__":1}')), 'INVALID_FIELD');
    expect(canonicalJsonRfc8785(JSON.parse('{"__proto__":1}'))).toBe('{"__proto__":1}');
  });

  it('depth: 32 nested containers pass, 33 do not; brackets inside strings do not count', () => {
    expect(parseCanonicalJson('['.repeat(32) + ']'.repeat(32), 'x')).toBeDefined();
    expect(parseCanonicalJson('{"a":'.repeat(32) + '1' + '}'.repeat(32), 'x')).toBeDefined();
    expect(parseCanonicalJson(`["${'['.repeat(100)}"]`, 'x')).toEqual(['['.repeat(100)]);
    expect(parseCanonicalJson(`["\\"${'{'.repeat(10)}"]`, 'x', { maxDepth: 1 })).toEqual([`"${'{'.repeat(10)}`]);
    expectCode(() => parseCanonicalJson('[[]]', 'x', { maxDepth: 1 }), 'INVALID_FIELD');
    expect(parseCanonicalJson('1', 'x', { maxDepth: 0 })).toBe(1);
    expectCode(() => parseCanonicalJson('[]', 'x', { maxDepth: 0 }), 'INVALID_FIELD');
  });

  it('a 100000-deep array is INVALID_FIELD, never a RangeError / stack overflow', () => {
    const balanced = '['.repeat(100_000) + ']'.repeat(100_000);
    const e = expectCode(() => parseCanonicalJson(balanced, 'payload'), 'INVALID_FIELD');
    expect(e.details?.['reason']).toBe('too-deep');
    expectCode(() => parseCanonicalJson(enc.encode(balanced), 'payload'), 'INVALID_FIELD');
    expectCode(() => parseCanonicalJson('['.repeat(100_000), 'payload'), 'INVALID_FIELD');
    expectCode(() => parseCanonicalJson('{"a":'.repeat(100_000), 'payload'), 'INVALID_FIELD');
    // The largest allowed limit still cannot reach the stack.
    expectCode(() => parseCanonicalJson(balanced, 'payload', { maxDepth: 1000 }), 'INVALID_FIELD');
    const deep1000 = '['.repeat(1000) + ']'.repeat(1000);
    expect(parseCanonicalJson(deep1000, 'payload', { maxDepth: 1000 })).toBeDefined();
  });

  it('size: exactly maxBytes passes, one more byte does not; bytes are UTF-8 bytes', () => {
    const exact = `"${'a'.repeat(DEFAULT_MAX_BYTES - 2)}"`;
    expect(parseCanonicalJson(exact, 'x')).toHaveLength(DEFAULT_MAX_BYTES - 2);
    expect(parseCanonicalJson(enc.encode(exact), 'x')).toHaveLength(DEFAULT_MAX_BYTES - 2);
    // "é" is 2 bytes, "😂" is 4 (2 UTF-16 units): 12 bytes in 7 units.
    const text = '"éé😂é"';
    expect(text).toHaveLength(7);
    expect(enc.encode(text)).toHaveLength(12);
    expect(parseCanonicalJson(text, 'x', { maxBytes: 12 })).toBe('éé😂é');
    expectCode(() => parseCanonicalJson(text, 'x', { maxBytes: 11 }), 'INVALID_FIELD');
    expectCode(() => parseCanonicalJson(enc.encode(text), 'x', { maxBytes: 11 }), 'INVALID_FIELD');
    const threeByte = `"${'€'.repeat(10)}"`; // 32 bytes, 12 units
    expect(parseCanonicalJson(threeByte, 'x', { maxBytes: 32 })).toBe('€'.repeat(10));
    expectCode(() => parseCanonicalJson(threeByte, 'x', { maxBytes: 31 }), 'INVALID_FIELD');
  });

  it('rejects nonsense limits as a programming error', () => {
    expectCode(() => parseCanonicalJson('1', 'x', { maxDepth: Number.NaN }), 'INTERNAL');
    expectCode(() => parseCanonicalJson('1', 'x', { maxDepth: -1 }), 'INTERNAL');
    expectCode(() => parseCanonicalJson('1', 'x', { maxDepth: 1001 }), 'INTERNAL');
    expectCode(() => parseCanonicalJson('1', 'x', { maxBytes: 1.5 }), 'INTERNAL');
  });

  it('a mismatch names the document and points at the first differing byte', () => {
    const e = expectCode(() => parseCanonicalJson(enc.encode('{"é":1,"a": 2}'), 'payload of receipt 2'), 'NON_CANONICAL_JSON');
    expect(e.message).toContain('payload of receipt 2');
    // canonical is {"a":2,"é":1}: the first difference is at the 2nd byte
    expect(e.details?.['byte_offset']).toBe(2);
    expect(e.message).toContain('byte 2');
    const w = expectCode(() => parseCanonicalJson('{"aé":1, "b":2}', 'header'), 'NON_CANONICAL_JSON');
    expect(w.details?.['byte_offset']).toBe(9); // the space after {"aé":1, with é as 2 bytes
    expect(w.details?.['found']).toContain(' "b"');
    expect(w.details?.['expected']).toContain(',"b"');
    // A difference inside a surrogate pair is reported at the character's first byte.
    const pair = expectCode(() => parseCanonicalJson('["é","\u{1f603}",1.0]', 'p'), 'NON_CANONICAL_JSON');
    expect(pair.details?.['byte_offset']).toBe(14); // at the "." of 1.0
    const inPair = caught(() => parseCanonicalJson('{"\u{1f603}":1,"\u{1f602}":2}', 'p'));
    expect(inPair.details?.['byte_offset']).toBe(2); // at the first emoji, not its 2nd half
  });

  it('a range fault carries the JSON Pointer of the offending number', () => {
    const e = expectCode(() => parseCanonicalJson('{"policy":{"a/b":[1,9007199254740992]}}', 'payload'), 'NUMBER_OUT_OF_RANGE');
    expect(e.details?.['path']).toBe('/policy/a~1b/1');
  });
});

describe('canonicalJson (writer) strictness', () => {
  const invalid: [string, unknown][] = [
    ['undefined', undefined],
    ['function', () => 1],
    ['bigint', 1n],
    ['symbol', Symbol('s')],
    ['NaN', Number.NaN],
    ['Infinity', Number.POSITIVE_INFINITY],
    ['-Infinity', Number.NEGATIVE_INFINITY],
    ['lone surrogate value', '\ud800'],
    ['lone surrogate key', { '\udc00': 1 }],
    ['undefined property (canonicalize drops it)', { a: undefined }],
    ['undefined element (canonicalize writes null)', [undefined]],
    ['sparse array', [1, , 3]], // eslint-disable-line no-sparse-arrays
    ['nested function', { a: { b: [() => 1] } }],
    ['Date (has toJSON)', new Date(0)],
    ['Map (canonicalize writes {})', new Map([['a', 1]])],
    ['Uint8Array', new Uint8Array(2)],
    [
      'class instance',
      new (class Point {
        x = 1;
      })(),
    ],
    ['object with toJSON function', { toJSON: () => 'x' }],
    ['boxed number', Object(1)],
  ];
  for (const [name, v] of invalid) {
    it(`${name} -> INVALID_FIELD`, () => {
      expectCode(() => canonicalJson(v), 'INVALID_FIELD');
      expectCode(() => canonicalBytes(v), 'INVALID_FIELD');
    });
  }

  for (const n of [2 ** 53, -(2 ** 53), 9007199254740994, 1e300, -1e300, Number.MAX_VALUE, 1e21]) {
    it(`${n} -> NUMBER_OUT_OF_RANGE`, () => {
      expectCode(() => canonicalJson(n), 'NUMBER_OUT_OF_RANGE');
      expectCode(() => canonicalJson({ a: [n] }), 'NUMBER_OUT_OF_RANGE');
      // plain RFC 8785 has no such rule
      expect(canonicalJsonRfc8785(n)).toBe(String(n));
    });
  }

  it('accepts the safe range, fractions beyond it, -0 and null-prototype objects', () => {
    expect(canonicalJson(Number.MAX_SAFE_INTEGER)).toBe('9007199254740991');
    expect(canonicalJson(Number.MIN_SAFE_INTEGER)).toBe('-9007199254740991');
    expect(canonicalJson(-0)).toBe('0');
    expect(canonicalJson(5e-324)).toBe('5e-324');
    expect(canonicalJson(0.1 + 0.2)).toBe('0.30000000000000004');
    const bare = Object.create(null) as Record<string, unknown>;
    bare['b'] = 1;
    bare['a'] = [true, null, 'x'];
    expect(canonicalJson(bare)).toBe('{"a":[true,null,"x"],"b":1}');
  });

  it('cycles and very deep values are INVALID_FIELD, not a stack overflow', () => {
    const cyclic: Record<string, unknown> = {};
    cyclic['self'] = cyclic;
    expectCode(() => canonicalJson(cyclic), 'INVALID_FIELD');
    let deep: unknown = 1;
    for (let i = 0; i < 100_000; i++) deep = [deep];
    expectCode(() => canonicalJson(deep), 'INVALID_FIELD');
    let ok: unknown = 1;
    for (let i = 0; i < 1000; i++) ok = [ok];
    expect(canonicalJson(ok)).toBe('['.repeat(1000) + '1' + ']'.repeat(1000));
  });

  it('sorts keys by UTF-16 code units, not code points or locale', () => {
    // U+FB33 (one unit) sorts after U+1F602 (surrogates D83D DE02) by code units
    expect(canonicalJson({ '\ufb33': 1, '\u{1f602}': 2, é: 3, e: 4, E: 5 })).toBe('{"E":5,"e":4,"\u00e9":3,"\u{1f602}":2,"\ufb33":1}');
  });

  it('error messages carry the JSON Pointer of the fault', () => {
    const e = expectCode(() => canonicalJson({ a: [{ 'x~y': undefined }] }), 'INVALID_FIELD');
    expect(e.details?.['path']).toBe('/a/0/x~0y');
  });
});

describe('utf8Encode / utf8Decode', () => {
  it('round trips well-formed text', () => {
    const s = 'aé€😂\u0000';
    expect(utf8Decode(utf8Encode(s))).toBe(s);
    expect(utf8Encode(s)).toEqual(new Uint8Array(Buffer.from(s, 'utf8')));
  });
  it('refuses lone surrogates instead of writing U+FFFD', () => {
    expectCode(() => utf8Encode('a\ud800'), 'INVALID_FIELD');
  });
  it('decodes fatally and keeps a BOM visible', () => {
    expectCode(() => utf8Decode(Uint8Array.of(0xc3, 0x28)), 'INVALID_FIELD');
    expectCode(() => utf8Decode(Uint8Array.of(0xed, 0xa0, 0x80)), 'INVALID_FIELD');
    expect(utf8Decode(Uint8Array.of(0xef, 0xbb, 0xbf, 0x61))).toBe('\ufeffa');
  });
  it('returns plain Uint8Arrays', () => {
    expect(Object.getPrototypeOf(utf8Encode('x'))).toBe(Uint8Array.prototype);
    expect(Object.getPrototypeOf(canonicalBytes({}))).toBe(Uint8Array.prototype);
  });
});

describe('properties (fast-check)', () => {
  /** Replace integers beyond 2^53-1 (fc.double makes them) with the nearest safe one. */
  function safeIntegers(v: JsonValue): JsonValue {
    if (typeof v === 'number') return Number.isInteger(v) && !Number.isSafeInteger(v) ? Math.sign(v) * Number.MAX_SAFE_INTEGER : v;
    if (Array.isArray(v)) return v.map(safeIntegers);
    if (v !== null && typeof v === 'object')
      return Object.fromEntries(Object.entries(v).map(([k, x]) => [plainKey(withoutNul(k)), safeIntegers(x)]));
    if (typeof v === 'string') return withoutNul(v);
    return v;
  }
  // Baton refuses U+0000 (PostgreSQL cannot store it) and a "__proto__" key; separate tests cover those.
  const withoutNul = (s: string) => s.replaceAll('\u0000', '\ufffd');
  const plainKey = (k: string) => (k === '__proto__' ? '__proto_' : k);
  const json: fc.Arbitrary<JsonValue> = fc
    .oneof(fc.jsonValue({ maxDepth: 8 }), fc.jsonValue({ maxDepth: 8, stringUnit: 'binary' }))
    .map((v) => safeIntegers(v as JsonValue));
  const runs = { numRuns: 500 };

  it('refuses U+0000 in strings and keys, which no PostgreSQL text can hold', () => {
    expect(() => canonicalJson({ a: 'x\u0000y' })).toThrow(/U\+0000/);
    expect(() => canonicalJson({ 'k\u0000': 1 })).toThrow(/U\+0000/);
    expect(() => parseCanonicalJson('{"a":"\\u0000"}', 'v')).toThrow(/U\+0000/);
    expect(canonicalJsonRfc8785({ a: '\u0000' })).toBe('{"a":"\\u0000"}');
  });

  it('parseCanonicalJson(canonicalJson(v)) deep-equals v (with -0 read as 0)', () => {
    fc.assert(
      fc.property(json, (v) => {
        const c = canonicalJson(v);
        expect(parseCanonicalJson(c, 'v')).toEqual(withoutNegativeZero(v));
        expect(parseCanonicalJson(canonicalBytes(v), 'v')).toEqual(withoutNegativeZero(v));
      }),
      runs,
    );
  });

  it('canonicalJson is idempotent and agrees with the canonicalize package', () => {
    fc.assert(
      fc.property(json, (v) => {
        const c = canonicalJson(v);
        expect(canonicalJson(JSON.parse(c))).toBe(c);
        expect(canonicalize(v)).toBe(c);
        expect(canonicalBytes(v)).toEqual(enc.encode(c));
      }),
      runs,
    );
  });

  it('any other spelling of the same value is rejected (indentation)', () => {
    fc.assert(
      fc.property(json, fc.integer({ min: 1, max: 4 }), (v, indent) => {
        const pretty = JSON.stringify(v, null, indent);
        fc.pre(pretty !== canonicalJson(v));
        expectCode(() => parseCanonicalJson(pretty, 'v'), 'NON_CANONICAL_JSON');
      }),
      runs,
    );
  });

  it('an injected duplicate key is always rejected', () => {
    const objects = json.filter(
      (v): v is { [k: string]: JsonValue } => v !== null && typeof v === 'object' && !Array.isArray(v) && Object.keys(v).length > 0,
    );
    fc.assert(
      fc.property(objects, json, fc.nat(), (obj, extra, pick) => {
        const keys = Object.keys(obj);
        const k = keys[pick % keys.length] as string;
        const c = canonicalJson(obj);
        // Put a second k (any value) in front of the canonical text.
        const tampered = `{${JSON.stringify(k)}:${canonicalJson(extra)},${c.slice(1)}`;
        expectCode(() => parseCanonicalJson(tampered, 'v'), 'NON_CANONICAL_JSON');
      }),
      runs,
    );
  });

  it('finite doubles: canonicalNumber is JSON.stringify, and safe ones read back exactly', () => {
    fc.assert(
      fc.property(fc.double({ noNaN: true, noDefaultInfinity: true }), (x) => {
        const s = canonicalNumber(x);
        expect(s).toBe(JSON.stringify(x));
        if (Number.isInteger(x) && !Number.isSafeInteger(x)) {
          expectCode(() => parseCanonicalJson(s, 'n'), 'NUMBER_OUT_OF_RANGE');
        } else {
          expect(Object.is(parseCanonicalJson(s, 'n'), Object.is(x, -0) ? 0 : x)).toBe(true);
        }
      }),
      { numRuns: 2000 },
    );
  });
});
