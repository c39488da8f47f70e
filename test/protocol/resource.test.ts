import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { BatonError } from '../../src/protocol/errors.js';
import {
  isValidResourcePattern,
  normalizeResourcePattern,
  normalizeResourceUri,
  patternCovers,
  resourceCovered,
} from '../../src/protocol/resource.js';

function codeOf(f: () => unknown): string | undefined {
  try {
    f();
  } catch (e) {
    return e instanceof BatonError ? e.code : 'not a BatonError';
  }
  return undefined;
}

describe('normalizeResourceUri', () => {
  it.each([
    ['mcp://tools/a/x', 'mcp://tools/a/x'],
    ['MCP://TOOLS/a/X', 'mcp://tools/a/X'], // path case is significant, scheme/host are not
    ['Https://Example.COM:443/p', 'https://example.com/p'],
    ['http://example.com:80/p', 'http://example.com/p'],
    ['http://example.com:0080/p', 'http://example.com/p'],
    ['http://example.com:/p', 'http://example.com/p'],
    ['https://example.com:8443/p', 'https://example.com:8443/p'],
    ['mcp://tools:80/a', 'mcp://tools:80/a'], // no default port known for mcp
    ['mcp://tools/a/%7e%41%2d%5f%30', 'mcp://tools/a/~A-_0'],
    ['mcp://tools/a/%c3%a9', 'mcp://tools/a/%C3%A9'],
    ['mcp://tools/a/%2a', 'mcp://tools/a/%2A'],
    ['mcp://tools/a/x?q=%7e&r=%3d', 'mcp://tools/a/x?q=~&r=%3D'],
    ['mcp://tools', 'mcp://tools'],
    ['file:///etc/hosts', 'file:///etc/hosts'],
    ['urn:isbn:0451450523', 'urn:isbn:0451450523'],
    ['http://[::1]:8080/x', 'http://[::1]:8080/x'],
    ['http://[FE80::1]/x', 'http://[fe80::1]/x'],
    ['mcp://tools/a/file.txt', 'mcp://tools/a/file.txt'],
    ['mcp://tools/a/.x', 'mcp://tools/a/.x'], // a dot file is a name
    ['mcp://tools/a/x.', 'mcp://tools/a/x.'],
    ['mcp://tools/a/', 'mcp://tools/a/'], // a trailing slash: an empty last segment
  ])('%s -> %s', (input, expected) => {
    expect(normalizeResourceUri(input)).toBe(expected);
    expect(normalizeResourceUri(expected)).toBe(expected); // idempotent
  });

  it.each([
    ['', 'empty'],
    ['tools/a', 'no scheme'],
    ['/tools/a', 'no scheme'],
    ['1mcp://tools/a', 'scheme must start with a letter'],
    ['mcp://tools/a/../admin', 'dot-dot segment'],
    ['mcp://tools/a/./x', 'dot segment'],
    ['mcp://tools/a/..', 'trailing dot-dot'],
    ['mcp://tools/a/.', 'trailing dot'],
    ['mcp://tools/a/..;x/admin', 'dot-dot with params'],
    ['mcp://tools/a/.../admin', 'three dots (.. to a server that trims trailing dots)'],
    ['mcp://tools/a/..%20/admin', 'dot-dot and an encoded space'],
    ['mcp://tools/a/.%20./admin', 'dots around an encoded space'],
    ['mcp://tools/a/..%C2%A0/admin', 'dot-dot and a no-break space'],
    ['mcp://tools/a/..%E2%80%8B/admin', 'dot-dot and a zero-width space'],
    ['mcp://tools/a/..%2520/admin', 'double-encoded space'],
    ['mcp://tools/a/x%2541', 'any double encoding'],
    ['file:///srv/public//etc/passwd', 'an empty segment (an absolute path to a joining server)'],
    ['mcp://tools/a//b', 'an empty segment in the middle'],
    ['file:///srv/public//', 'a trailing empty segment (the root, to a joining server)'],
    ['mcp:..', 'rootless dot-dot'],
    ['mcp://tools/a/x?p=../../etc', 'dot-dot in query'],
    ['mcp://tools/a/%2e%2e/admin', 'encoded dot-dot'],
    ['mcp://tools/a/%2E%2e/admin', 'mixed-case encoded dots'],
    ['mcp://tools/a/.%2e/admin', 'half-encoded dot-dot'],
    ['mcp://tools/a/file%2etxt', 'any encoded dot'],
    ['mcp://tools/a%2f..%2fadmin', 'encoded slash'],
    ['mcp://tools/a/x%2Fy', 'encoded slash, upper case'],
    ['mcp://tools/a/%5c..%5cadmin', 'encoded backslash'],
    ['mcp://tools/a\\..\\admin', 'backslash'],
    ['mcp://tools/a/%C0%AE%C0%AE/admin', 'overlong UTF-8 dots'],
    ['mcp://tools/a/%EF%BC%8E%EF%BC%8E/admin', 'fullwidth dots (NFKC ..)'],
    ['mcp://tools/a/x%EF%BC%8Fy', 'fullwidth slash (NFKC /)'],
    ['mcp://tools/a/%E2%80%A5', 'two-dot leader (NFKC ..)'],
    ['mcp://tools/a/%00', 'encoded NUL'],
    ['mcp://tools/a/%0a', 'encoded newline'],
    ['mcp://tools/a/%', 'lone percent'],
    ['mcp://tools/a/%4', 'short percent'],
    ['mcp://tools/a/%zz', 'non-hex percent'],
    ['mcp://tools/a/x y', 'space'],
    ['mcp://tools/a/x\ty', 'tab'],
    ['mcp://tools/a/x\ny', 'newline'],
    ['mcp://tools/a/x\u0000', 'NUL'],
    ['mcp://tools/a/x\u007f', 'DEL'],
    ['mcp://tools/a/x\u00a0', 'no-break space'],
    ['mcp://tools/a/\uff0e\uff0e/admin', 'raw fullwidth dots'],
    ['mcp://tools/a/caf\u00e9', 'raw non-ASCII'],
    ['mcp://tools/a/x#frag', 'fragment'],
    ['mcp://tools/a/*', 'literal star'],
    ['mcp://user@tools/a', 'userinfo'],
    ['mcp://tools%2ecom/a', 'encoded host'],
    ['mcp://to ols/a', 'space in host'],
    ['mcp://tools:99999/a', 'port out of range'],
    ['mcp://tools:8o/a', 'non-digit port'],
    ['mcp://tools/a/x<y', 'unencoded <'],
    ['mcp://tools/a/[x]', 'brackets in path'],
    ['http://[::1/x', 'unterminated IP literal'],
    [`mcp://tools/${'a'.repeat(2048)}`, 'too long'],
  ])('refuses %j (%s)', (input) => {
    expect(codeOf(() => normalizeResourceUri(input))).toBe('INVALID_FIELD');
  });

  it('accepts exactly 2048 characters and refuses 2049', () => {
    const base = 'mcp://tools/';
    expect(normalizeResourceUri(base + 'a'.repeat(2048 - base.length))).toHaveLength(2048);
    expect(codeOf(() => normalizeResourceUri(base + 'a'.repeat(2049 - base.length)))).toBe('INVALID_FIELD');
  });

  it('explains the refusal in a sentence', () => {
    try {
      normalizeResourceUri('mcp://tools/a/../admin');
      expect.unreachable();
    } catch (e) {
      expect(e).toBeInstanceOf(BatonError);
      expect((e as BatonError).message).toMatch(
        /^The resource URI "mcp:\/\/tools\/a\/\.\.\/admin" is refused because it contains a dot segment/,
      );
    }
  });
});

describe('resourceCovered', () => {
  const prefix = 'mcp://tools/a/*';

  it('covers what lies under a prefix', () => {
    expect(resourceCovered(prefix, 'mcp://tools/a/x')).toBe(true);
    expect(resourceCovered(prefix, 'mcp://tools/a/x/y')).toBe(true);
    expect(resourceCovered(prefix, 'mcp://tools/a/x?q=1')).toBe(true);
    expect(resourceCovered(prefix, 'MCP://Tools/a/x')).toBe(true);
    expect(resourceCovered(prefix, 'mcp://tools/a/%78')).toBe(true); // %78 is x
  });

  it('does not cover the bare prefix, a sibling, or a different authority', () => {
    expect(resourceCovered(prefix, 'mcp://tools/a//x')).toBe(false); // refused: an empty segment
    expect(resourceCovered(prefix, 'mcp://tools/a')).toBe(false);
    expect(resourceCovered(prefix, 'mcp://tools/a/')).toBe(false);
    expect(resourceCovered(prefix, 'mcp://tools/a?x=/y')).toBe(false);
    expect(resourceCovered(prefix, 'mcp://tools/ab')).toBe(false);
    expect(resourceCovered(prefix, 'mcp://tools/ab/x')).toBe(false);
    expect(resourceCovered(prefix, 'mcp://tools/A/x')).toBe(false);
    expect(resourceCovered(prefix, 'mcp://tools:1/a/x')).toBe(false);
    expect(resourceCovered(prefix, 'mcp://other/a/x')).toBe(false);
    expect(resourceCovered(prefix, 'https://tools/a/x')).toBe(false);
    expect(resourceCovered(prefix, 'mcp:/a/x')).toBe(false);
  });

  // Every one of these is refused before matching, so no prefix ever covers it.
  const traversal = [
    'mcp://tools/a/../admin',
    'mcp://tools/a/../../etc/passwd',
    'mcp://tools/a/./../admin',
    'mcp://tools/a/x/../../admin',
    'mcp://tools/a/..',
    'mcp://tools/a/..;/admin',
    'mcp://tools/a/%2e%2e/admin',
    'mcp://tools/a/%2E%2E/admin',
    'mcp://tools/a/%2E%2e/admin',
    'mcp://tools/a/%2e./admin',
    'mcp://tools/a/.%2E/admin',
    'mcp://tools/a/%252e%252e/admin',
    'mcp://tools/a/x%252F..%252Fadmin',
    'mcp://tools/a/x%255c..',
    'mcp://tools/a%2f..%2fadmin',
    'mcp://tools/a/x%2F..%2F..%2Fadmin',
    'mcp://tools/a/x%5c..%5cadmin',
    'mcp://tools/a/x%5C..%5Cadmin',
    'mcp://tools/a\\..\\admin',
    'mcp://tools/a/x\\..\\..\\admin',
    'mcp://tools/a/%C0%AE%C0%AE/admin',
    'mcp://tools/a/%EF%BC%8E%EF%BC%8E/admin',
    'mcp://tools/a/ /admin',
    'mcp://tools/a/x\u0000/admin',
    'mcp://tools/a/x#/../admin',
    'mcp://TOOLS/a/../admin',
    'MCP://Tools/A/../a/x',
  ];

  it.each(traversal)('never covers %j', (uri) => {
    expect(codeOf(() => normalizeResourceUri(uri))).toBe('INVALID_FIELD');
    expect(resourceCovered(prefix, uri)).toBe(false);
    expect(resourceCovered('mcp://tools/*', uri)).toBe(false);
    expect(resourceCovered('*', uri)).toBe(false);
  });

  it('refuses every double encoding: a server that decodes twice reads it as another byte', () => {
    expect(() => normalizeResourceUri('mcp://tools/a/%2541')).toThrow(/double percent-encoding/);
    expect(normalizeResourceUri('mcp://tools/a/100%25')).toBe('mcp://tools/a/100%25'); // a literal % stays
  });

  it('matches exact patterns in normal form', () => {
    expect(resourceCovered('mcp://tools/a', 'mcp://tools/a')).toBe(true);
    expect(resourceCovered('mcp://tools/a', 'MCP://TOOLS/a')).toBe(true);
    expect(resourceCovered('mcp://tools/a', 'mcp://tools/a/')).toBe(false);
    expect(resourceCovered('mcp://tools/a', 'mcp://tools/a/x')).toBe(false);
    expect(resourceCovered('https://h/x?q=1', 'https://h:443/x?q=1')).toBe(true);
    expect(resourceCovered('https://h/x?q=1', 'https://h/x?q=2')).toBe(false);
  });

  it('"*" covers every valid URI, never an invalid one', () => {
    expect(resourceCovered('*', 'mcp://anything/at/all')).toBe(true);
    expect(resourceCovered('*', 'mcp://tools/a/../admin')).toBe(false);
    expect(resourceCovered('*', 'not a uri')).toBe(false);
  });

  it('returns false for invalid patterns instead of throwing', () => {
    for (const p of ['mcp://*', 'mcp://tools/a*', 'mcp://tools/a/../*', 'relative/*', '', '**', 'mcp://tools/a/*?q']) {
      expect(isValidResourcePattern(p)).toBe(false);
      expect(resourceCovered(p, 'mcp://tools/a/x')).toBe(false);
    }
  });

  it('property: whatever is covered by a prefix starts with the prefix once normalized', () => {
    const segment = fc.constantFrom('a', 'b', 'x', '.', '..', '%2e', '%2E%2e', '%2f', '%5c', '\\', 'A', '%41', '', 'ab', '..;', ' ');
    fc.assert(
      fc.property(fc.array(segment, { maxLength: 5 }), (segments) => {
        const uri = `mcp://tools/${segments.join('/')}`;
        if (resourceCovered('mcp://tools/a/*', uri)) {
          const normal = normalizeResourceUri(uri);
          expect(normal.startsWith('mcp://tools/a/')).toBe(true);
          expect(normal.split('/').some((s) => s === '.' || s === '..')).toBe(false);
        }
      }),
      { numRuns: 2000 },
    );
  });
});

describe('patternCovers', () => {
  it.each([
    ['*', '*', true],
    ['*', 'mcp://tools/a/*', true],
    ['mcp://tools/a/*', '*', false],
    ['mcp://tools/a/*', 'mcp://tools/a/*', true],
    ['mcp://tools/a/*', 'MCP://TOOLS/a/*', true],
    ['mcp://tools/a/*', 'mcp://tools/a/b/*', true],
    ['mcp://tools/a/*', 'mcp://tools/a/b', true],
    ['mcp://tools/a/*', 'mcp://tools/a', false],
    ['mcp://tools/a/*', 'mcp://tools/ab/*', false],
    ['mcp://tools/a/*', 'mcp://tools/ab', false],
    ['mcp://tools/a/*', 'mcp://tools/*', false],
    ['mcp://tools/a/*', 'mcp://tools/a/../admin', false],
    ['mcp://tools/a', 'mcp://tools/a', true],
    ['mcp://tools/a', 'mcp://tools/a/*', false],
    ['mcp://tools/a', 'mcp://tools/b', false],
    ['mcp://tools/*', 'mcp://other/*', false],
    ['mcp:/*', 'mcp://tools/a', false],
    ['mcp://tools/a/*', 'not-a-pattern/*', false],
  ])('%s covers %s: %s', (parent, child, expected) => {
    expect(patternCovers(parent, child)).toBe(expected);
  });

  it('normalizes patterns for display', () => {
    expect(normalizeResourcePattern('MCP://TOOLS/a/*')).toBe('mcp://tools/a/*');
    expect(normalizeResourcePattern('*')).toBe('*');
    expect(normalizeResourcePattern('Https://H:443/x')).toBe('https://h/x');
  });

  it('property: patternCovers is set inclusion over a small universe', () => {
    const patterns = [
      '*',
      'mcp://tools/*',
      'mcp://tools/a/*',
      'mcp://tools/a/x/*',
      'mcp://tools/a',
      'mcp://tools/a/x',
      'mcp://tools/b/*',
      'mcp://tools/ab',
      'mcp://other/*',
    ];
    const uris = [
      'mcp://tools/a',
      'mcp://tools/a/',
      'mcp://tools/a/x',
      'mcp://tools/a/x/y',
      'mcp://tools/a/y',
      'mcp://tools/ab',
      'mcp://tools/b/z',
      'mcp://other/a',
      'mcp://tools',
    ];
    fc.assert(
      fc.property(fc.constantFrom(...patterns), fc.constantFrom(...patterns), fc.constantFrom(...uris), (parent, child, uri) => {
        if (patternCovers(parent, child) && resourceCovered(child, uri)) {
          expect(resourceCovered(parent, uri)).toBe(true);
        }
      }),
      { numRuns: 1000 },
    );
  });
});
