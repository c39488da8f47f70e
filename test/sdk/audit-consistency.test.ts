/**
 * verifyCheckpointConsistency(older, newer): the arguments are in the order the auditor saw the
 * checkpoints, so a newer one that is smaller (a log rolled back, or a stale view served) is a
 * finding, not a consistent pair; a fork of equal size stays a split view.
 */
import { describe, expect, it } from 'vitest';
import { formatCheckpoint } from '../../src/protocol/checkpoint.js';
import { consistencyProof, leafHash, rootOf, subtreeHashesOf, type Hash } from '../../src/protocol/merkle.js';
import { ed25519NoteSigner, formatVerifierKey, signNote } from '../../src/protocol/note.js';
import { encodeBase64 } from '../../src/protocol/tlog-input.js';
import { verifyCheckpointConsistency, type LogTrust } from '../../src/sdk/audit.js';

const NOW = 1_800_000_000;
const ORIGIN = 'baton.example/log/tenant-1';
const log = ed25519NoteSigner(ORIGIN, new Uint8Array(32).fill(1));
const trust: LogTrust = { origin: ORIGIN, logKeys: [formatVerifierKey(log.key)] };

const leaves: Hash[] = Array.from({ length: 49 }, (_, i) => leafHash(new TextEncoder().encode(`entry ${i}`)));
const note = (size: number, root: Hash = rootOf(leaves.slice(0, size))): string =>
  signNote(formatCheckpoint({ origin: ORIGIN, size, rootHash: root, extensions: [] }), [log]);
/** The proof joining the first `from` leaves to the first `to`, base64 as the service serves it. */
const proofOf = (from: number, to: number): string[] => consistencyProof(from, to, subtreeHashesOf(leaves.slice(0, to))).map(encodeBase64);

describe('verifyCheckpointConsistency', () => {
  it('a newer checkpoint that extends the older one is consistent', () => {
    const r = verifyCheckpointConsistency(note(42), note(49), proofOf(42, 49), trust, NOW);
    expect(r).toMatchObject({ consistent: true, older: { checkpoint: { size: 42 } }, newer: { checkpoint: { size: 49 } } });
    expect(verifyCheckpointConsistency(note(49), note(49), [], trust, NOW).consistent).toBe(true);
  });

  it('a newer checkpoint smaller than the older one is a rollback, even when it is a prefix', () => {
    // The same valid proof joins the pair; only the order the auditor saw them in shows the shrink.
    const seenEarlier = note(49);
    const servedNow = note(42);
    const r = verifyCheckpointConsistency(seenEarlier, servedNow, proofOf(42, 49), trust, NOW);
    expect(r.consistent).toBe(false);
    if (r.consistent) return;
    expect(r.finding).toMatchObject({
      kind: 'rollback',
      origin: ORIGIN,
      older: { note: seenEarlier, checkpoint: { size: 49 } },
      newer: { note: servedNow, checkpoint: { size: 42 } },
      reason: expect.stringContaining('shrank from 49 to 42'),
    });
  });

  it('a smaller newer checkpoint that is not even a prefix is reported as the split view it proves', () => {
    const forked = note(42, rootOf(leaves.slice(1, 43)));
    const r = verifyCheckpointConsistency(note(49), forked, proofOf(42, 49), trust, NOW);
    expect(r.consistent === false && r.finding.kind).toBe('not-consistent');
  });

  it('the same size with another root is a split view', () => {
    const forked = note(49, rootOf(leaves.slice(1).concat(leaves[0]!)));
    const r = verifyCheckpointConsistency(note(49), forked, [], trust, NOW);
    expect(r.consistent).toBe(false);
    expect(r.consistent === false && r.finding).toMatchObject({ kind: 'same-size-different-roots', size: 49 });
  });
});
