/**
 * C2SP tlog-tiles (c2sp.org/tlog-tiles): the Merkle tree served as static,
 * cacheable tiles.
 *
 * A tile at level L, index N holds up to 256 consecutive Merkle hashes of
 * tree level 8L: hash i is MTH(D[(N*256 + i) * 256^L : (N*256 + i + 1) * 256^L]).
 * Level-0 tiles hold leaf hashes; a FULL tile (256 hashes) hashes, as a
 * perfect tree of height 8, into one hash of the tile at level L + 1. The
 * rightmost tile of a level may be partial (1..255 hashes): it is never
 * hashed upwards. For a tree of size s, level L has floor(s / 256^L) hashes.
 *
 * Paths: tile/<L>/<N>[.p/<W>] and tile/entries/<N>[.p/<W>], where <N> is
 * written in 3-digit groups, every group but the last prefixed with "x"
 * (1234067 -> x001/x234/067). Entry bundles are uint16-length-prefixed
 * entries whose leaf hashes are the level-0 tile.
 *
 * Tiles, like any data fetched from a log, are untrusted until checked
 * against a signed checkpoint (verifyTile, or recompute the root from them).
 *
 * Pure module: no I/O, no clock. Tiles are read through a function.
 */
import {
  EMPTY_ROOT,
  HASH_SIZE,
  leafHash,
  rootOf,
  subtreeInclusionProof,
  treeRoot,
  verifySubtreeInclusion,
  type Hash,
  type SubtreeHashSource,
} from './merkle.js';
import { check, concatBytes, isSafeUint, parseDecimal } from './tlog-input.js';

export const TILE_HEIGHT = 8;
export const TILE_WIDTH = 256;
const MAX_TILE_LEVEL = 63;
const MAX_ENTRY_BYTES = 0xffff;

/** One tile of hashes; width is 256 for a full tile, 1..255 for a partial one. */
export interface TileCoordinates {
  readonly level: number;
  readonly index: number;
  readonly width: number;
}

export type ParsedTilePath =
  ({ readonly kind: 'hashes' } & TileCoordinates) | { readonly kind: 'entries'; readonly index: number; readonly width: number };

/** Returns the bytes of a tile of hashes (exactly width * 32 bytes), from wherever the caller keeps them. */
export type TileReader = (tile: TileCoordinates) => Uint8Array;

function malformed(ok: boolean, message: string, details?: Record<string, unknown>): asserts ok {
  check(ok, 'MALFORMED_TILE', message, details);
}

function checkCoordinates(t: TileCoordinates): void {
  malformed(isSafeUint(t.level) && t.level <= MAX_TILE_LEVEL, 'A tile level is an integer from 0 to 63.', { level: t.level });
  malformed(isSafeUint(t.index), 'A tile index is a non-negative safe integer.', { index: t.index });
  malformed(Number.isInteger(t.width) && t.width >= 1 && t.width <= TILE_WIDTH, 'A tile width is an integer from 1 to 256.', {
    width: t.width,
  });
}

// ---------------------------------------------------------------------------
// Paths.

/** 1234067 -> "x001/x234/067"; 5 -> "005". */
function encodeIndex(n: number): string {
  const groups: string[] = [];
  do {
    groups.unshift(String(n % 1000).padStart(3, '0'));
    n = Math.floor(n / 1000);
  } while (n > 0);
  return groups.map((g, i) => (i < groups.length - 1 ? `x${g}` : g)).join('/');
}

function suffix(width: number): string {
  return width === TILE_WIDTH ? '' : `.p/${width}`;
}

export function tilePath(t: TileCoordinates): string {
  checkCoordinates(t);
  return `tile/${t.level}/${encodeIndex(t.index)}${suffix(t.width)}`;
}

export function entryBundlePath(index: number, width: number): string {
  checkCoordinates({ level: 0, index, width });
  return `tile/entries/${encodeIndex(index)}${suffix(width)}`;
}

/** Parses a tile or entry-bundle path; only the one canonical spelling is accepted. */
export function parseTilePath(path: string): ParsedTilePath {
  const m = typeof path === 'string' ? /^tile\/(entries|[0-9]+)\/((?:x[0-9]{3}\/)*[0-9]{3})(?:\.p\/([0-9]+))?$/.exec(path) : null;
  malformed(m !== null, 'A tile path is tile/<L>/<N>[.p/<W>] or tile/entries/<N>[.p/<W>].', { path });
  const [, levelPart, indexPart, widthPart] = m as unknown as [string, string, string, string | undefined];
  const index = parseDecimal(
    indexPart
      .replaceAll('x', '')
      .replaceAll('/', '')
      .replace(/^0+(?=.)/, ''),
  );
  const width = widthPart === undefined ? TILE_WIDTH : parseDecimal(widthPart);
  malformed(index !== undefined && width !== undefined, 'The tile index or width is out of range.', { path });
  const parsed: ParsedTilePath =
    levelPart === 'entries' ? { kind: 'entries', index, width } : { kind: 'hashes', level: parseDecimal(levelPart) ?? -1, index, width };
  const canonical = parsed.kind === 'entries' ? entryBundlePath(parsed.index, parsed.width) : tilePath(parsed);
  malformed(canonical === path, `The canonical spelling of this tile path is ${canonical}.`, { path });
  return parsed;
}

// ---------------------------------------------------------------------------
// Which tiles a tree has, and where a subtree lives.

/** Number of stored hashes at tile level L in a tree of `size` leaves. */
function hashesAtLevel(size: number, level: number): number {
  return Math.floor(size / TILE_WIDTH ** level);
}

/** Every tile (full and partial) that a tree of `size` leaves is served as. */
export function tilesForSize(size: number): TileCoordinates[] {
  check(isSafeUint(size), 'MALFORMED_LOG_PROOF', 'The tree size is not a non-negative safe integer.', { size });
  const tiles: TileCoordinates[] = [];
  for (let level = 0; hashesAtLevel(size, level) > 0; level++) {
    const count = hashesAtLevel(size, level);
    for (let index = 0; index * TILE_WIDTH < count; index++)
      tiles.push({ level, index, width: Math.min(TILE_WIDTH, count - index * TILE_WIDTH) });
  }
  return tiles;
}

/** The tile of `level`/`index` as a tree of `size` leaves serves it, or undefined if it has none. */
export function tileInTree(level: number, index: number, size: number): TileCoordinates | undefined {
  const width = Math.min(TILE_WIDTH, hashesAtLevel(size, level) - index * TILE_WIDTH);
  return width > 0 ? { level, index, width } : undefined;
}

/**
 * Where the complete subtree (height, index) lives: 2^r consecutive hashes of
 * one tile at level floor(height / 8), r = height mod 8.
 */
export function tileHoldingSubtree(height: number, index: number): { level: number; index: number; start: number; count: number } {
  const level = Math.floor(height / TILE_HEIGHT);
  const count = 2 ** (height % TILE_HEIGHT);
  const first = index * count;
  return { level, index: Math.floor(first / TILE_WIDTH), start: first % TILE_WIDTH, count };
}

// ---------------------------------------------------------------------------
// Tile contents.

/** Splits tile bytes into hashes; the length must match the tile's width. */
export function tileHashes(t: TileCoordinates, bytes: Uint8Array): Hash[] {
  checkCoordinates(t);
  malformed(
    bytes instanceof Uint8Array && bytes.length === t.width * HASH_SIZE,
    `Tile ${t.level}/${t.index} of width ${t.width} is ${t.width * HASH_SIZE} bytes.`,
    {
      actual: bytes?.length,
    },
  );
  return Array.from({ length: t.width }, (_, i) => bytes.slice(i * HASH_SIZE, (i + 1) * HASH_SIZE));
}

/** A full tile's hash in the tile one level up: the root of its 256 hashes. */
export function tileRoot(hashes: readonly Hash[]): Hash {
  malformed(hashes.length === TILE_WIDTH, 'Only a full tile (256 hashes) is hashed into the level above.', { width: hashes.length });
  return rootOf(hashes);
}

/** Every tile of the tree of these leaf hashes, with its bytes: what a log serves. */
export function tilesOf(leafHashes: readonly Hash[]): { tile: TileCoordinates; bytes: Uint8Array }[] {
  const out: { tile: TileCoordinates; bytes: Uint8Array }[] = [];
  let level = 0;
  for (let hashes = leafHashes.slice(); hashes.length > 0; level++) {
    const above: Hash[] = [];
    for (let index = 0; index * TILE_WIDTH < hashes.length; index++) {
      const slice = hashes.slice(index * TILE_WIDTH, (index + 1) * TILE_WIDTH);
      out.push({ tile: { level, index, width: slice.length }, bytes: concatBytes(...slice) });
      if (slice.length === TILE_WIDTH) above.push(tileRoot(slice));
    }
    hashes = above;
  }
  return out;
}

/**
 * Complete-subtree hashes of the tree of `size` leaves read from its tiles,
 * for proof generation (merkle.ts). Each tile is read at most once.
 */
export function subtreeHashesFromTiles(size: number, readTile: TileReader): SubtreeHashSource {
  const cache = new Map<string, Hash[]>();
  return (height, index) => {
    const at = tileHoldingSubtree(height, index);
    const tile = tileInTree(at.level, at.index, size);
    malformed(
      tile !== undefined && at.start + at.count <= tile.width,
      `A tree of ${size} leaves has no complete subtree ${height}/${index}.`,
      { height, index, size },
    );
    const key = `${tile.level}/${tile.index}`;
    let hashes = cache.get(key);
    if (hashes === undefined) {
      hashes = tileHashes(tile, readTile(tile));
      cache.set(key, hashes);
    }
    return rootOf(hashes.slice(at.start, at.start + at.count));
  };
}

/** The root of the tree of `size` leaves, computed from its tiles. */
export function treeRootFromTiles(size: number, readTile: TileReader): Hash {
  return size === 0 ? EMPTY_ROOT : treeRoot(size, subtreeHashesFromTiles(size, readTile));
}

/**
 * Checks a fetched tile against a checkpoint's (size, root): the tile must
 * be the one that tree serves at those coordinates (full, or partial of the
 * right width), and each maximal complete subtree of its hashes must be
 * proven included under the root. Proof hashes come from `readTile` (other
 * tiles); they need not be trusted, since the proofs are checked.
 */
export function verifyTile(
  tile: TileCoordinates,
  bytes: Uint8Array,
  checkpoint: { size: number; rootHash: Hash },
  readTile: TileReader,
): boolean {
  const hashes = tileHashes(tile, bytes);
  const expected = tileInTree(tile.level, tile.index, checkpoint.size);
  if (expected === undefined || expected.width !== tile.width) return false;
  const source = subtreeHashesFromTiles(checkpoint.size, readTile);
  const baseHeight = tile.level * TILE_HEIGHT;
  const first = tile.index * TILE_WIDTH;
  // The tile starts at a multiple of 256, so its width's binary digits, high
  // to low, are its maximal complete subtrees, left to right.
  for (let offset = 0, bit = TILE_HEIGHT; offset < tile.width; bit--) {
    const span = 2 ** bit;
    if (offset + span > tile.width) continue;
    const height = baseHeight + bit;
    const index = (first + offset) / span;
    const subtree = rootOf(hashes.slice(offset, offset + span));
    const proof = subtreeInclusionProof(height, index, checkpoint.size, source);
    if (!verifySubtreeInclusion(height, index, checkpoint.size, subtree, proof, checkpoint.rootHash)) return false;
    offset += span;
  }
  return true;
}

// ---------------------------------------------------------------------------
// Entry bundles.

export function formatEntryBundle(entries: readonly Uint8Array[]): Uint8Array {
  malformed(entries.length >= 1 && entries.length <= TILE_WIDTH, 'An entry bundle holds 1 to 256 entries.', { entries: entries.length });
  return concatBytes(
    ...entries.flatMap((e) => {
      malformed(e.length <= MAX_ENTRY_BYTES, `A log entry is at most ${MAX_ENTRY_BYTES} bytes.`, { length: e.length });
      return [Uint8Array.of(e.length >> 8, e.length & 0xff), e];
    }),
  );
}

export function parseEntryBundle(bytes: Uint8Array): Uint8Array[] {
  const entries: Uint8Array[] = [];
  let at = 0;
  while (at < bytes.length) {
    malformed(at + 2 <= bytes.length, 'An entry bundle ends inside a length prefix.', { offset: at });
    const length = (bytes[at]! << 8) | bytes[at + 1]!;
    malformed(at + 2 + length <= bytes.length, 'An entry bundle ends inside an entry.', { offset: at });
    entries.push(bytes.slice(at + 2, at + 2 + length));
    at += 2 + length;
    malformed(entries.length <= TILE_WIDTH, 'An entry bundle holds at most 256 entries.');
  }
  malformed(entries.length > 0, 'An entry bundle holds at least one entry.');
  return entries;
}

/** The level-0 tile an entry bundle must hash to. */
export function level0TileOfBundle(bundle: Uint8Array): Uint8Array {
  return concatBytes(...parseEntryBundle(bundle).map(leafHash));
}
