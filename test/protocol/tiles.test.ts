/**
 * C2SP tlog-tiles: paths, which tiles a tree has (the spec's examples),
 * proofs and roots computed from tiles equal those from the leaves, and a
 * fetched tile is checked against a checkpoint: any changed hash, width or
 * position is caught.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { consistencyProof, inclusionProof, leafHash, rootOf, subtreeHashesOf, type Hash } from '../../src/protocol/merkle.js';
import {
  entryBundlePath,
  formatEntryBundle,
  level0TileOfBundle,
  parseEntryBundle,
  parseTilePath,
  subtreeHashesFromTiles,
  tileHoldingSubtree,
  tilePath,
  tilesForSize,
  tilesOf,
  treeRootFromTiles,
  verifyTile,
  type TileCoordinates,
  type TileReader,
} from '../../src/protocol/tiles.js';
import { codeOf } from '../support/tlog.js';

const entriesOf = (n: number, salt = 0): Uint8Array[] =>
  Array.from({ length: n }, (_, i) => new TextEncoder().encode(`receipt ${salt}/${i}`));
const keyOf = (t: { level: number; index: number }): string => `${t.level}/${t.index}`;

function served(leaves: readonly Hash[]): { reader: TileReader; tiles: ReturnType<typeof tilesOf> } {
  const tiles = tilesOf(leaves);
  const byKey = new Map(tiles.map((t) => [keyOf(t.tile), t]));
  return {
    tiles,
    reader: (t) => {
      const found = byKey.get(keyOf(t));
      expect(found?.tile.width).toBe(t.width);
      return found!.bytes;
    },
  };
}

describe('tile paths', () => {
  it.each([
    [{ level: 0, index: 1234067, width: 256 }, 'tile/0/x001/x234/067'],
    [{ level: 0, index: 5, width: 256 }, 'tile/0/005'],
    [{ level: 2, index: 1000, width: 256 }, 'tile/2/x001/000'],
    [{ level: 1, index: 0, width: 17 }, 'tile/1/000.p/17'],
    [{ level: 63, index: 999, width: 1 }, 'tile/63/999.p/1'],
  ] as [TileCoordinates, string][])('%o is %s', (tile, path) => {
    expect(tilePath(tile)).toBe(path);
    expect(parseTilePath(path)).toEqual({ kind: 'hashes', ...tile });
  });

  it('entry bundles', () => {
    expect(entryBundlePath(1234067, 256)).toBe('tile/entries/x001/x234/067');
    expect(parseTilePath('tile/entries/000.p/112')).toEqual({ kind: 'entries', index: 0, width: 112 });
  });

  it.each([
    'tile/0/1234067',
    'tile/0/x001/234/067',
    'tile/0/x000/005',
    'tile/0/05',
    'tile/00/005',
    'tile/64/005',
    'tile/0/005.p/0',
    'tile/0/005.p/256',
    'tile/0/005.p/05',
    'tile/entries/005.p/300',
    'tile/0/005/',
    '/tile/0/005',
    'tile/-1/005',
  ])('refuses %s with MALFORMED_TILE', (path) => {
    expect(codeOf(() => parseTilePath(path))).toBe('MALFORMED_TILE');
  });

  it('round-trips every index and width', () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 63 }), fc.maxSafeNat(), fc.integer({ min: 1, max: 256 }), (level, index, width) => {
        expect(parseTilePath(tilePath({ level, index, width }))).toEqual({ kind: 'hashes', level, index, width });
      }),
    );
  });
});

describe('the tiles of a tree', () => {
  it('matches the spec: a tree of 70,000 leaves, and one of 256', () => {
    const tiles = tilesForSize(70_000);
    const summary = (level: number): [number, number[]] => {
      const at = tiles.filter((t) => t.level === level);
      return [at.filter((t) => t.width === 256).length, at.filter((t) => t.width < 256).map((t) => t.width)];
    };
    expect(summary(0)).toEqual([273, [112]]);
    expect(summary(1)).toEqual([1, [17]]);
    expect(summary(2)).toEqual([0, [1]]);
    expect(tiles.filter((t) => t.level > 2)).toEqual([]);
    expect(tilesForSize(256)).toEqual([
      { level: 0, index: 0, width: 256 },
      { level: 1, index: 0, width: 1 },
    ]);
    expect(tilesForSize(0)).toEqual([]);
  });

  it('a subtree lives in one tile: height 8 of level 0 is one hash of level 1', () => {
    expect(tileHoldingSubtree(0, 300)).toEqual({ level: 0, index: 1, start: 44, count: 1 });
    expect(tileHoldingSubtree(3, 40)).toEqual({ level: 0, index: 1, start: 64, count: 8 });
    expect(tileHoldingSubtree(8, 3)).toEqual({ level: 1, index: 0, start: 3, count: 1 });
    expect(tileHoldingSubtree(17, 1)).toEqual({ level: 2, index: 0, start: 2, count: 2 });
  });

  it('a large tree: its served tiles are the ones tilesForSize lists, the root from tiles is the root, and every tile verifies', () => {
    const leaves = entriesOf(70_000).map(leafHash);
    const { tiles, reader } = served(leaves);
    expect(tiles.map((t) => t.tile)).toEqual(tilesForSize(70_000));
    const root = rootOf(leaves);
    expect(treeRootFromTiles(70_000, reader)).toEqual(root);
    for (const { tile, bytes } of tiles) expect(verifyTile(tile, bytes, { size: 70_000, rootHash: root }, reader)).toBe(true);
    const index = 65_600;
    expect(inclusionProof(index, 70_000, subtreeHashesFromTiles(70_000, reader))).toEqual(
      inclusionProof(index, 70_000, subtreeHashesOf(leaves)),
    );
  });
});

describe('over random trees', () => {
  const arb = fc.record({ size: fc.integer({ min: 1, max: 1500 }), salt: fc.nat(), a: fc.nat(), b: fc.nat() });

  it('proofs and roots from tiles equal those from the leaves', () => {
    fc.assert(
      fc.property(arb, ({ size, salt, a, b }) => {
        const leaves = entriesOf(size, salt).map(leafHash);
        const { reader } = served(leaves);
        const fromTiles = subtreeHashesFromTiles(size, reader);
        const fromLeaves = subtreeHashesOf(leaves);
        expect(treeRootFromTiles(size, reader)).toEqual(rootOf(leaves));
        expect(inclusionProof(a % size, size, fromTiles)).toEqual(inclusionProof(a % size, size, fromLeaves));
        const old = 1 + (b % size);
        expect(consistencyProof(old, size, fromTiles)).toEqual(consistencyProof(old, size, fromLeaves));
      }),
      { numRuns: 60 },
    );
  });

  it('every served tile verifies against the checkpoint; a changed hash, a wrong width or a tile of another tree does not', () => {
    fc.assert(
      fc.property(arb, fc.nat(255), ({ size, salt, a }, bit) => {
        const leaves = entriesOf(size, salt).map(leafHash);
        const { tiles, reader } = served(leaves);
        const checkpoint = { size, rootHash: rootOf(leaves) };
        for (const { tile, bytes } of tiles) expect(verifyTile(tile, bytes, checkpoint, reader)).toBe(true);
        const { tile, bytes } = tiles[a % tiles.length]!;
        const changed = bytes.slice();
        changed[(a * 7) % changed.length]! ^= 1 << (bit % 8);
        expect(verifyTile(tile, changed, checkpoint, reader)).toBe(false);
        if (tile.width > 1) {
          const narrower = { ...tile, width: tile.width - 1 };
          expect(verifyTile(narrower, bytes.slice(0, narrower.width * 32), checkpoint, reader)).toBe(false);
        }
        const other = served(entriesOf(size, salt + 1).map(leafHash));
        const sameTileOfOtherTree = other.tiles.find((t) => keyOf(t.tile) === keyOf(tile))!;
        expect(verifyTile(tile, sameTileOfOtherTree.bytes, checkpoint, reader)).toBe(false);
      }),
      { numRuns: 40 },
    );
  });
});

describe('entry bundles', () => {
  it('round-trip, and hash to the level-0 tile', () => {
    const entries = entriesOf(200);
    const bundle = formatEntryBundle(entries);
    expect(parseEntryBundle(bundle)).toEqual(entries);
    expect(level0TileOfBundle(bundle)).toEqual(tilesOf(entries.map(leafHash))[0]!.bytes);
  });

  it('refuses truncated, empty, oversized and overfull bundles with MALFORMED_TILE', () => {
    const bundle = formatEntryBundle(entriesOf(3));
    expect(codeOf(() => parseEntryBundle(bundle.subarray(0, bundle.length - 1)))).toBe('MALFORMED_TILE');
    expect(codeOf(() => parseEntryBundle(Uint8Array.of(0)))).toBe('MALFORMED_TILE');
    expect(codeOf(() => parseEntryBundle(new Uint8Array(0)))).toBe('MALFORMED_TILE');
    expect(parseEntryBundle(formatEntryBundle(entriesOf(256)))).toHaveLength(256);
    expect(codeOf(() => parseEntryBundle(new Uint8Array(257 * 2)))).toBe('MALFORMED_TILE');
    expect(codeOf(() => formatEntryBundle([new Uint8Array(0x10000)]))).toBe('MALFORMED_TILE');
    expect(codeOf(() => formatEntryBundle(entriesOf(257)))).toBe('MALFORMED_TILE');
  });
});
