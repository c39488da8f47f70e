/**
 * Properties of Merkle proofs over random trees of 1..300 leaves: every
 * generated inclusion and consistency proof verifies, and changing any one
 * input (leaf, proof hash, index, old size, root, proof length) makes it fail.
 *
 * The (new) tree size alone is not bound by a proof: the last sibling of a
 * path can stand for a larger right subtree, so a proof for size 257 also
 * "verifies" for size 258 against the same root. The size is bound by the
 * signed checkpoint that carries it; tlog-proof.test.ts tampers it there.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  consistencyProof,
  inclusionProof,
  leafHash,
  rootOf,
  subtreeHashesOf,
  verifyConsistency,
  verifyInclusion,
  type Hash,
} from '../../src/protocol/merkle.js';

const MAX_LEAVES = 300;

function leavesOf(size: number, salt: number): Hash[] {
  return Array.from({ length: size }, (_, i) => leafHash(Uint8Array.from(Buffer.from(`entry ${salt} ${i}`))));
}

function flipBit(h: Hash, bit: number): Hash {
  const out = h.slice();
  out[(bit >> 3) % out.length]! ^= 1 << (bit & 7);
  return out;
}

const treeArb = fc.record({
  size: fc.integer({ min: 1, max: MAX_LEAVES }),
  salt: fc.nat(),
  pick: fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true }),
});
const otherIntArb = fc.integer({ min: 0, max: 2 * MAX_LEAVES });

describe('inclusion proofs', () => {
  it('every generated proof verifies', () => {
    fc.assert(
      fc.property(treeArb, ({ size, salt, pick }) => {
        const leaves = leavesOf(size, salt);
        const index = Math.floor(pick * size);
        const proof = inclusionProof(index, size, subtreeHashesOf(leaves));
        expect(verifyInclusion(index, size, leaves[index]!, proof, rootOf(leaves))).toBe(true);
      }),
      { numRuns: 300 },
    );
  });

  it('any tampered leaf, proof hash, index, size, root or proof length fails', () => {
    fc.assert(
      fc.property(treeArb, fc.nat(255), otherIntArb, fc.nat(), ({ size, salt, pick }, bit, other, at) => {
        const leaves = leavesOf(size, salt);
        const index = Math.floor(pick * size);
        const proof = inclusionProof(index, size, subtreeHashesOf(leaves));
        const root = rootOf(leaves);
        const leaf = leaves[index]!;
        expect(verifyInclusion(index, size, flipBit(leaf, bit), proof, root)).toBe(false);
        expect(verifyInclusion(index, size, leaf, proof, flipBit(root, bit))).toBe(false);
        if (proof.length > 0) {
          const i = at % proof.length;
          expect(
            verifyInclusion(
              index,
              size,
              leaf,
              proof.map((h, j) => (j === i ? flipBit(h, bit) : h)),
              root,
            ),
          ).toBe(false);
          expect(
            verifyInclusion(
              index,
              size,
              leaf,
              proof.filter((_, j) => j !== i),
              root,
            ),
          ).toBe(false);
        }
        expect(verifyInclusion(index, size, leaf, [...proof, root], root)).toBe(false);
        if (other !== index) expect(verifyInclusion(other, size, leaf, proof, root)).toBe(false);
      }),
      { numRuns: 300 },
    );
  });
});

describe('consistency proofs', () => {
  const pairArb = fc
    .record({
      newSize: fc.integer({ min: 1, max: MAX_LEAVES }),
      salt: fc.nat(),
      pick: fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true }),
    })
    .map(({ newSize, salt, pick }) => ({ newSize, salt, oldSize: 1 + Math.floor(pick * newSize) }));

  it('every generated proof verifies', () => {
    fc.assert(
      fc.property(pairArb, ({ oldSize, newSize, salt }) => {
        const leaves = leavesOf(newSize, salt);
        const proof = consistencyProof(oldSize, newSize, subtreeHashesOf(leaves));
        expect(verifyConsistency(oldSize, newSize, proof, rootOf(leaves.slice(0, oldSize)), rootOf(leaves))).toBe(true);
      }),
      { numRuns: 300 },
    );
  });

  it('any tampered proof hash, size, root or proof length fails, and a rewritten old entry is caught', () => {
    fc.assert(
      fc.property(pairArb, fc.nat(255), otherIntArb, fc.nat(), ({ oldSize, newSize, salt }, bit, other, at) => {
        const leaves = leavesOf(newSize, salt);
        const proof = consistencyProof(oldSize, newSize, subtreeHashesOf(leaves));
        const oldRoot = rootOf(leaves.slice(0, oldSize));
        const newRoot = rootOf(leaves);
        expect(verifyConsistency(oldSize, newSize, proof, flipBit(oldRoot, bit), newRoot)).toBe(false);
        expect(verifyConsistency(oldSize, newSize, proof, oldRoot, flipBit(newRoot, bit))).toBe(false);
        if (proof.length > 0) {
          const i = at % proof.length;
          expect(
            verifyConsistency(
              oldSize,
              newSize,
              proof.map((h, j) => (j === i ? flipBit(h, bit) : h)),
              oldRoot,
              newRoot,
            ),
          ).toBe(false);
          expect(
            verifyConsistency(
              oldSize,
              newSize,
              proof.filter((_, j) => j !== i),
              oldRoot,
              newRoot,
            ),
          ).toBe(false);
        }
        expect(verifyConsistency(oldSize, newSize, [...proof, newRoot], oldRoot, newRoot)).toBe(false);
        if (other !== oldSize) expect(verifyConsistency(other, newSize, proof, oldRoot, newRoot)).toBe(false);
        // The log rewrote one entry of the old tree: no proof from the new tree reaches the old root.
        const rewritten = leaves.map((h, j) => (j === at % oldSize ? flipBit(h, bit) : h));
        const forged = consistencyProof(oldSize, newSize, subtreeHashesOf(rewritten));
        expect(verifyConsistency(oldSize, newSize, forged, oldRoot, rootOf(rewritten))).toBe(false);
      }),
      { numRuns: 300 },
    );
  });
});
