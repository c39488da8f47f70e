/**
 * ResourcePatternIndex answers "which owners cover this?" from a trie of path segments; here it is
 * held to a plain pairwise reference written on the patterns' normal forms, over a vocabulary small
 * enough that nested, equal and sibling patterns occur often (counters check they did).
 */
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import {
  isValidResourcePattern,
  normalizeResourcePattern,
  normalizeResourceUri,
  parseResourcePattern,
  patternCovers,
  resourceCovered,
  ResourcePatternIndex,
  indexResourceList,
  listGrants,
} from '../../src/protocol/resource.js';

const ORIGINS = ['mcp://h', 'MCP://H', 'mcp://h:7', 'mcp://', 'mcp:', 'urn:', 'https://h:443', 'https://h'] as const;
const SEGMENTS = ['a', 'b', 'ab', '%61', '%2A', 'a;b', ''] as const;

const pathArb = fc.array(fc.constantFrom(...SEGMENTS), { maxLength: 4 }).map((segments) => segments.join('/'));
const uriArb = fc
  .tuple(fc.constantFrom(...ORIGINS), pathArb, fc.constantFrom('', '/', '?q=1', '/?x=/a'))
  .map(([origin, path, tail]) => `${origin}${origin.endsWith(':') ? '' : '/'}${path}${tail}`);
const patternArb = fc.oneof(
  { arbitrary: fc.constant('*'), weight: 1 },
  { arbitrary: uriArb, weight: 4 },
  { arbitrary: uriArb.map((u) => `${u.replace(/[?/]+[^]*$/, (tail) => (tail.startsWith('?') ? '' : tail))}/*`), weight: 6 },
);

/** A normal-form URI's parts (normal forms have no surprises left to parse). */
function partsOf(normalUri: string): { origin: string; path: string } {
  const match = /^([^:]+):(\/\/[^/?]*)?([^?]*)/.exec(normalUri) as RegExpExecArray;
  const [scheme, authority, path] = [match[1] as string, match[2], match[3] as string];
  return { origin: `${scheme}:${authority ?? '(none)'}`, path };
}

/** The reference, pairwise on normal forms (as before the index): whether a prefix's parts grant a URI's. */
function prefixGrants(prefix: { scheme: string; authority: string | null; path: string }, normalUri: string): boolean {
  const u = partsOf(normalUri);
  const origin = `${prefix.scheme}:${prefix.authority === null ? '(none)' : `//${prefix.authority}`}`;
  return u.origin === origin && u.path.length > prefix.path.length && u.path.startsWith(prefix.path);
}

function referenceGrants(pattern: string, uri: string): boolean {
  if (!isValidResourcePattern(pattern)) return false;
  let normalUri: string;
  try {
    normalUri = normalizeResourceUri(uri);
  } catch {
    return false;
  }
  const p = parseResourcePattern(pattern);
  if (p.kind === 'all') return true;
  if (p.kind === 'exact') return p.uri === normalUri;
  return prefixGrants(p, normalUri);
}

/** The reference for set inclusion of two patterns. */
function referenceCovers(parent: string, child: string): boolean {
  if (!isValidResourcePattern(parent) || !isValidResourcePattern(child)) return false;
  const p = parseResourcePattern(parent);
  const c = parseResourcePattern(child);
  if (p.kind === 'all') return true;
  if (c.kind === 'all') return false;
  if (p.kind === 'exact') return c.kind === 'exact' && c.uri === p.uri;
  if (c.kind === 'exact') return prefixGrants(p, c.uri);
  return c.scheme === p.scheme && c.authority === p.authority && c.path.startsWith(p.path);
}

const seen = { granted: 0, refused: 0, covered: 0, strictlyCovered: 0 };

describe('ResourcePatternIndex against the pairwise reference', () => {
  it('grants a URI exactly when some listed pattern does', () => {
    fc.assert(
      fc.property(fc.array(patternArb, { maxLength: 8 }), uriArb, (list, uri) => {
        const expected = list.some((p) => referenceGrants(p, uri));
        expect(listGrants(list, uri)).toBe(expected);
        const asked = ((): ReturnType<typeof parseResourcePattern> | undefined => {
          try {
            return parseResourcePattern(uri);
          } catch {
            return undefined;
          }
        })();
        // The index grants an exact URI pattern what the list grants the URI itself (queries aside, a prefix has none).
        if (asked?.kind === 'exact') expect(indexResourceList(list).ownersCovering(asked).size > 0).toBe(expected);
        expect(list.some((p) => resourceCovered(p, uri))).toBe(expected);
        seen[expected ? 'granted' : 'refused']++;
      }),
      { numRuns: 3000 },
    );
  });

  it('names exactly the owners with a pattern covering the asked one, and with `strictly` not an equal one', () => {
    fc.assert(
      fc.property(fc.array(fc.array(patternArb, { maxLength: 5 }), { minLength: 1, maxLength: 4 }), patternArb, (lists, asked) => {
        fc.pre(isValidResourcePattern(asked));
        const index = new ResourcePatternIndex();
        lists.forEach((list, owner) => list.filter(isValidResourcePattern).forEach((p) => index.add(owner, parseResourcePattern(p))));
        const normal = normalizeResourcePattern(asked);
        const covering = (strictly: boolean) =>
          lists
            .map((list, owner) => ({ owner, list }))
            .filter(({ list }) =>
              list.some(
                (p) => referenceCovers(p, asked) && !(strictly && isValidResourcePattern(p) && normalizeResourcePattern(p) === normal),
              ),
            )
            .map(({ owner }) => owner);
        const parsed = parseResourcePattern(asked);
        expect([...index.ownersCovering(parsed)].sort()).toEqual(covering(false));
        expect([...index.ownersCovering(parsed, true)].sort()).toEqual(covering(true));
        for (const list of lists) for (const p of list) expect(patternCovers(p, asked)).toBe(referenceCovers(p, asked));
        if (covering(false).length > 0) seen.covered++;
        if (covering(true).length > 0) seen.strictlyCovered++;
      }),
      { numRuns: 3000 },
    );
  });

  it('met each kind of case often', () => {
    expect(seen.granted).toBeGreaterThan(300);
    expect(seen.refused).toBeGreaterThan(300);
    expect(seen.covered).toBeGreaterThan(300);
    expect(seen.strictlyCovered).toBeGreaterThan(100);
  });
});
