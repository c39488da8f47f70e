/**
 * Split-view detection: two signed checkpoints of one log that no
 * consistency proof joins are reported as a typed finding with both notes.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { formatCheckpoint } from '../../src/protocol/checkpoint.js';
import { consistencyProof, EMPTY_ROOT, leafHash, rootOf, subtreeHashesOf, type Hash } from '../../src/protocol/merkle.js';
import { ed25519NoteSigner, signNote } from '../../src/protocol/note.js';
import { findSplitView } from '../../src/protocol/split-view.js';
import { openCheckpoint, type SignedCheckpoint } from '../../src/protocol/tlog-proof.js';
import { codeOf } from '../support/tlog.js';

const NOW = 1_800_000_000;
const ORIGIN = 'baton.example/log/tenant-1';
const log = ed25519NoteSigner(ORIGIN, new Uint8Array(32).fill(1));

function signed(size: number, root: Hash, origin = ORIGIN): SignedCheckpoint {
  const note = signNote(formatCheckpoint({ origin, size, rootHash: root, extensions: [] }), [log]);
  return openCheckpoint(note, { origin, logKeys: [log.key] }, NOW);
}

const leavesOf = (n: number, tag = ''): Hash[] => Array.from({ length: n }, (_, i) => leafHash(new TextEncoder().encode(`${tag}${i}`)));

describe('findSplitView', () => {
  const leaves = leavesOf(20);

  it('two checkpoints of the same size with different roots are a finding on their own', () => {
    const a = signed(7, rootOf(leaves.slice(0, 7)));
    const b = signed(7, rootOf(leavesOf(7, 'fork')));
    const finding = findSplitView(a, b, []);
    expect(finding).toMatchObject({ kind: 'same-size-different-roots', origin: ORIGIN, size: 7 });
    expect(finding?.kind === 'same-size-different-roots' && finding.checkpoints.map((c) => c.note)).toEqual([a.note, b.note]);
    expect(findSplitView(a, signed(7, rootOf(leaves.slice(0, 7))), [])).toBeNull();
  });

  it('consistent checkpoints give no finding, in either order', () => {
    const source = subtreeHashesOf(leaves);
    const old = signed(5, rootOf(leaves.slice(0, 5)));
    const now = signed(20, rootOf(leaves));
    const proof = consistencyProof(5, 20, source);
    expect(findSplitView(old, now, proof)).toBeNull();
    expect(findSplitView(now, old, proof)).toBeNull();
    expect(findSplitView(signed(0, EMPTY_ROOT), now, [])).toBeNull();
  });

  it('a log that rewrote history cannot join its old and new checkpoints', () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 120 }), fc.integer({ min: 0, max: 120 }), fc.nat(), (oldSize, grow, at) => {
        const honest = leavesOf(oldSize + grow);
        const rewritten = honest.map((h, i) => (i === at % oldSize ? leafHash(Uint8Array.of(0xff, i)) : h));
        const old = signed(oldSize, rootOf(honest.slice(0, oldSize)));
        const forked = signed(oldSize + grow, rootOf(rewritten));
        const proof = grow === 0 ? [] : consistencyProof(oldSize, oldSize + grow, subtreeHashesOf(rewritten));
        const finding = findSplitView(old, forked, proof);
        expect(finding?.kind).toBe(grow === 0 ? 'same-size-different-roots' : 'not-consistent');
      }),
      { numRuns: 100 },
    );
  });

  it('a malformed proof, a missing proof, or a wrong empty-tree root is a finding, not a crash', () => {
    const old = signed(5, rootOf(leaves.slice(0, 5)));
    const now = signed(20, rootOf(leaves));
    expect(findSplitView(old, now, [new Uint8Array(31)])).toMatchObject({
      kind: 'not-consistent',
      reason: 'the consistency proof is malformed',
    });
    expect(findSplitView(old, now, [])).toMatchObject({ kind: 'not-consistent', older: old, newer: now });
    expect(findSplitView(signed(0, leaves[0]!), now, [])).toMatchObject({ kind: 'not-consistent' });
  });

  it('refuses to compare checkpoints of two different logs', () => {
    const other = ed25519NoteSigner('other.example/log', new Uint8Array(32).fill(2));
    const note = signNote(formatCheckpoint({ origin: 'other.example/log', size: 5, rootHash: EMPTY_ROOT, extensions: [] }), [other]);
    const foreign = openCheckpoint(note, { origin: 'other.example/log', logKeys: [other.key] }, NOW);
    expect(codeOf(() => findSplitView(signed(5, EMPTY_ROOT), foreign, []))).toBe('INVALID_REQUEST');
  });
});
