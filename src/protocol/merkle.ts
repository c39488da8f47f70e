/**
 * RFC 6962 / RFC 9162 Merkle trees: hashes, roots, inclusion and consistency
 * proofs. Pure: no I/O, no clock.
 *
 * Hashing (RFC 9162 section 2.1.1), SHA-256:
 *   leaf hash  = SHA-256(0x00 || entry)
 *   node hash  = SHA-256(0x01 || left || right)
 *   empty root = SHA-256("")
 *   MTH(D[0:n]) splits at k, the largest power of two strictly below n.
 *
 * Proof generation reads hashes through a SubtreeHashSource: "the hash of the
 * complete subtree of 2^level leaves starting at leaf index * 2^level". An
 * in-memory leaf list provides one (subtreeHashesOf); a store can provide
 * one from tiles (tiles.ts). Every other hash a proof needs (the right edge
 * of a tree whose size is not a power of two) is computed from those.
 *
 * Verification follows RFC 9162 sections 2.1.3.2 and 2.1.4.2 step by step.
 * Sizes and indexes are JavaScript numbers, so every bit operation of the
 * RFC is written with exact arithmetic (x % 2, Math.floor(x / 2)): the `>>`
 * operator would truncate to 32 bits. Verifiers return false when a proof
 * does not verify, and throw MALFORMED_LOG_PROOF when an input is not even
 * well-formed (a hash that is not 32 bytes, a size that is not a safe
 * non-negative integer).
 */
import { createHash } from 'node:crypto';
import { bytesEqual, check, isSafeUint } from './tlog-input.js';

export const HASH_SIZE = 32;

/** A SHA-256 Merkle tree hash: always 32 bytes. */
export type Hash = Uint8Array;

/** Hash of the complete subtree of 2^level leaves that starts at leaf index * 2^level. */
export type SubtreeHashSource = (level: number, index: number) => Hash;

const LEAF_PREFIX = Uint8Array.of(0x00);
const NODE_PREFIX = Uint8Array.of(0x01);

/**
 * SHA-256 of the concatenated parts. node:crypto, like hash.ts: the log
 * hashes two nodes per leaf it integrates, and native SHA-256 is several
 * times faster than a JavaScript one here.
 */
function sha256(...parts: readonly Uint8Array[]): Hash {
  const h = createHash('sha256');
  for (const p of parts) h.update(p);
  return new Uint8Array(h.digest()); // a copy over its own 32-byte ArrayBuffer
}

/** RFC 6962 section 2.1: the root of the empty tree is the hash of the empty string. */
export const EMPTY_ROOT: Hash = sha256();

/** Longest proof for a tree of at most 2^53 leaves. */
export const MAX_PROOF_LENGTH = 53;

export function leafHash(entry: Uint8Array): Hash {
  return sha256(LEAF_PREFIX, entry);
}

export function nodeHash(left: Uint8Array, right: Uint8Array): Hash {
  return sha256(NODE_PREFIX, left, right);
}

// ---------------------------------------------------------------------------
// Input checks and exact integer helpers.

function checkHash(h: unknown, what: string): asserts h is Hash {
  check(h instanceof Uint8Array && h.length === HASH_SIZE, 'MALFORMED_LOG_PROOF', `The ${what} is not a 32-byte SHA-256 hash.`, {
    field: what,
  });
}

function checkSize(n: unknown, what: string): asserts n is number {
  check(isSafeUint(n), 'MALFORMED_LOG_PROOF', `The ${what} is not a non-negative safe integer.`, { field: what, actual: n });
}

function checkProof(proof: unknown, what: string): asserts proof is readonly Hash[] {
  check(
    Array.isArray(proof) && proof.length <= MAX_PROOF_LENGTH,
    'MALFORMED_LOG_PROOF',
    `The ${what} is not a list of at most ${MAX_PROOF_LENGTH} hashes.`,
    {
      field: what,
    },
  );
  (proof as unknown[]).forEach((h, i) => checkHash(h, `${what} hash ${i}`));
}

const isOdd = (n: number): boolean => n % 2 === 1;
const half = (n: number): number => Math.floor(n / 2);

/** RFC 9162: "right-shift both fn and sn equally until either LSB(fn) is set or fn is 0". */
function shiftUntilOddOrZero(fn: number, sn: number): [number, number] {
  while (!isOdd(fn) && fn !== 0) {
    fn = half(fn);
    sn = half(sn);
  }
  return [fn, sn];
}

function isPowerOfTwo(n: number): boolean {
  if (n < 1) return false;
  while (n % 2 === 0) n /= 2;
  return n === 1;
}

/** log2 of a power of two. */
function log2Exact(n: number): number {
  let level = 0;
  while (n > 1) {
    n /= 2;
    level++;
  }
  return level;
}

/** The largest power of two strictly below n, for n >= 2 (RFC 9162's k). */
export function splitPoint(n: number): number {
  let k = 1;
  while (k * 2 < n) k *= 2;
  return k;
}

// ---------------------------------------------------------------------------
// Roots and subtree hashes.

/**
 * MTH(D[start:end]) for 1 <= end - start, from complete-subtree hashes: an
 * aligned power-of-two range is one complete subtree; any other range splits
 * at k as MTH does.
 */
export function rangeHash(source: SubtreeHashSource, start: number, end: number): Hash {
  const n = end - start;
  if (isPowerOfTwo(n) && start % n === 0) return source(log2Exact(n), start / n);
  const k = splitPoint(n);
  return nodeHash(rangeHash(source, start, start + k), rangeHash(source, start + k, end));
}

/** The root of the tree of the first `size` leaves. */
export function treeRoot(size: number, source: SubtreeHashSource): Hash {
  checkSize(size, 'tree size');
  return size === 0 ? EMPTY_ROOT : rangeHash(source, 0, size);
}

/**
 * Every complete-subtree hash of an in-memory list of leaf hashes, level by
 * level (O(n) hashes, computed once).
 */
export function subtreeHashesOf(leafHashes: readonly Hash[]): SubtreeHashSource {
  leafHashes.forEach((h, i) => checkHash(h, `leaf hash ${i}`));
  const levels: Hash[][] = [leafHashes.slice()];
  for (let below = levels[0]!; below.length >= 2;) {
    const above: Hash[] = [];
    for (let i = 0; i + 1 < below.length; i += 2) above.push(nodeHash(below[i]!, below[i + 1]!));
    levels.push(above);
    below = above;
  }
  return (level, index) => {
    const h = levels[level]?.[index];
    check(h !== undefined, 'MALFORMED_LOG_PROOF', `The tree has no complete subtree at level ${level}, index ${index}.`, { level, index });
    return h;
  };
}

/** MTH of a list of leaf hashes (RFC 9162 section 2.1.1). */
export function rootOf(leafHashes: readonly Hash[]): Hash {
  return treeRoot(leafHashes.length, subtreeHashesOf(leafHashes));
}

function checkCompleteSubtree(level: number, index: number, size: number): void {
  check(
    level <= MAX_PROOF_LENGTH && (index + 1) * 2 ** level <= size,
    'MALFORMED_LOG_PROOF',
    `Subtree ${level}/${index} is not complete in a tree of ${size} leaves.`,
    { level, index, size },
  );
}

// ---------------------------------------------------------------------------
// Proof generation (RFC 9162 sections 2.1.3.1 and 2.1.4.1).

/**
 * The audit path from the complete subtree (level, index) up to the root of
 * a tree of `size` leaves, nearest sibling first. For level 0 this is the
 * RFC's PATH(m, D[n]); for a higher level it is the path of a whole
 * subtree, e.g. a full tile.
 */
export function subtreeInclusionProof(level: number, index: number, size: number, source: SubtreeHashSource): Hash[] {
  checkSize(level, 'level');
  checkSize(index, 'index');
  checkSize(size, 'tree size');
  checkCompleteSubtree(level, index, size);
  const width = 2 ** level;
  const first = index * width;
  const path: Hash[] = [];
  let start = 0;
  let end = size;
  // PATH(m, D[n]) = PATH(m, D[0:k]) : MTH(D[k:n])   if m < k
  //               = PATH(m - k, D[k:n]) : MTH(D[0:k]) if m >= k
  // Descending from the root collects the siblings top-down; the proof
  // lists them bottom-up.
  while (end - start > width) {
    const k = splitPoint(end - start);
    if (first < start + k) {
      path.push(rangeHash(source, start + k, end));
      end = start + k;
    } else {
      path.push(rangeHash(source, start, start + k));
      start += k;
    }
  }
  return path.reverse();
}

/** Inclusion proof of leaf `index` in the tree of `size` leaves. */
export function inclusionProof(index: number, size: number, source: SubtreeHashSource): Hash[] {
  checkSize(index, 'leaf index');
  checkSize(size, 'tree size');
  check(index < size, 'MALFORMED_LOG_PROOF', `Leaf index ${index} is not in a tree of ${size} leaves.`, { index, size });
  return subtreeInclusionProof(0, index, size, source);
}

/**
 * Consistency proof from the tree of `oldSize` leaves to the tree of
 * `newSize` leaves: PROOF(m, D[n]) = SUBPROOF(m, D[n], true).
 */
export function consistencyProof(oldSize: number, newSize: number, source: SubtreeHashSource): Hash[] {
  checkSize(oldSize, 'old tree size');
  checkSize(newSize, 'new tree size');
  check(0 < oldSize && oldSize <= newSize, 'MALFORMED_LOG_PROOF', `No consistency proof exists from size ${oldSize} to size ${newSize}.`, {
    oldSize,
    newSize,
  });
  return subproof(source, oldSize, 0, newSize, true);
}

/**
 * SUBPROOF(m, D[start:end], b):
 *   m = n:  b ? {} : {MTH(D[start:end])}
 *   m <= k: SUBPROOF(m, D[start:start+k], b) : MTH(D[start+k:end])
 *   m > k:  SUBPROOF(m - k, D[start+k:end], false) : MTH(D[start:start+k])
 */
function subproof(source: SubtreeHashSource, m: number, start: number, end: number, b: boolean): Hash[] {
  const n = end - start;
  if (m === n) return b ? [] : [rangeHash(source, start, end)];
  const k = splitPoint(n);
  if (m <= k) return [...subproof(source, m, start, start + k, b), rangeHash(source, start + k, end)];
  return [...subproof(source, m - k, start + k, end, false), rangeHash(source, start, start + k)];
}

// ---------------------------------------------------------------------------
// Verification (RFC 9162 sections 2.1.3.2 and 2.1.4.2).

/** RFC 9162 section 2.1.3.2: does `proof` place `leaf` at `index` under `root`? */
export function verifyInclusion(index: number, size: number, leaf: Hash, proof: readonly Hash[], root: Hash): boolean {
  checkSize(index, 'leaf index');
  checkSize(size, 'tree size');
  checkHash(leaf, 'leaf hash');
  checkProof(proof, 'inclusion proof');
  checkHash(root, 'root hash');
  // 1. leaf_index >= tree_size fails.
  if (index >= size) return false;
  // 2. fn = leaf_index, sn = tree_size - 1.  3. r = hash.
  let fn = index;
  let sn = size - 1;
  let r = leaf;
  // 4. For each p in inclusion_path:
  for (const p of proof) {
    // a. sn = 0 fails.
    if (sn === 0) return false;
    // b. LSB(fn) set, or fn = sn: r = HASH(0x01 || p || r), then, if LSB(fn)
    //    is not set, shift until LSB(fn) is set or fn = 0.
    //    Otherwise: r = HASH(0x01 || r || p).
    if (isOdd(fn) || fn === sn) {
      r = nodeHash(p, r);
      [fn, sn] = shiftUntilOddOrZero(fn, sn);
    } else {
      r = nodeHash(r, p);
    }
    // c. Shift both once.
    fn = half(fn);
    sn = half(sn);
  }
  // 5. sn = 0 and r = root_hash.
  return sn === 0 && bytesEqual(r, root);
}

/**
 * Inclusion of the complete subtree (level, index) with hash `subtree`. Above
 * that level the tree is the MTH tree of ceil(size / 2^level) chunks (the
 * last one possibly partial): both split at the same powers of two. So the
 * RFC algorithm applies unchanged with the chunk index and chunk count.
 */
export function verifySubtreeInclusion(
  level: number,
  index: number,
  size: number,
  subtree: Hash,
  proof: readonly Hash[],
  root: Hash,
): boolean {
  checkSize(level, 'level');
  checkSize(index, 'index');
  checkSize(size, 'tree size');
  if (level > MAX_PROOF_LENGTH || (index + 1) * 2 ** level > size) return false;
  return verifyInclusion(index, Math.ceil(size / 2 ** level), subtree, proof, root);
}

/**
 * RFC 9162 section 2.1.4.2: is the tree (newSize, newRoot) an append-only
 * extension of (oldSize, oldRoot)? Equal sizes need an empty proof and equal
 * roots; an old size of 0 proves nothing and is refused, as in the reference
 * test data.
 */
export function verifyConsistency(oldSize: number, newSize: number, proof: readonly Hash[], oldRoot: Hash, newRoot: Hash): boolean {
  checkSize(oldSize, 'old tree size');
  checkSize(newSize, 'new tree size');
  checkProof(proof, 'consistency proof');
  checkHash(oldRoot, 'old root hash');
  checkHash(newRoot, 'new root hash');
  if (oldSize === 0 || oldSize > newSize) return false;
  if (oldSize === newSize) return proof.length === 0 && bytesEqual(oldRoot, newRoot);
  // 1. An empty consistency_path fails.
  if (proof.length === 0) return false;
  // 2. If first is an exact power of 2, prepend first_hash.
  const path = isPowerOfTwo(oldSize) ? [oldRoot, ...proof] : proof;
  // 3. fn = first - 1, sn = second - 1.
  let fn = oldSize - 1;
  let sn = newSize - 1;
  // 4. While LSB(fn) is set, shift both.
  while (isOdd(fn)) {
    fn = half(fn);
    sn = half(sn);
  }
  // 5. fr = sr = the first value of consistency_path.
  let fr = path[0]!;
  let sr = path[0]!;
  // 6. For each subsequent value c:
  for (const c of path.slice(1)) {
    // a. sn = 0 fails.
    if (sn === 0) return false;
    // b. LSB(fn) set, or fn = sn: fr = HASH(0x01 || c || fr), sr = HASH(0x01 || c || sr),
    //    then, if LSB(fn) is not set, shift until LSB(fn) is set or fn = 0.
    //    Otherwise: sr = HASH(0x01 || sr || c).
    if (isOdd(fn) || fn === sn) {
      fr = nodeHash(c, fr);
      sr = nodeHash(c, sr);
      [fn, sn] = shiftUntilOddOrZero(fn, sn);
    } else {
      sr = nodeHash(sr, c);
    }
    // c. Shift both once.
    fn = half(fn);
    sn = half(sn);
  }
  // 7. fr = first_hash, sr = second_hash, and sn = 0.
  return sn === 0 && bytesEqual(fr, oldRoot) && bytesEqual(sr, newRoot);
}
