/**
 * Split-view detection: evidence that a log showed two different histories.
 *
 * A log must never sign two checkpoints that no consistency proof joins.
 * Given two checkpoints of the same log, both already verified under its
 * key (openCheckpoint), there is a finding when
 *  - they have the same size and different roots: proof on its own, since
 *    both are signed; or
 *  - the consistency proof offered from the smaller to the larger does not
 *    verify (or is not even well-formed). When the log itself served that
 *    proof, it has failed to show that it only appended.
 * The finding carries both signed notes, so anyone can re-check it.
 *
 * Pure module: no I/O, no clock.
 */
import { BatonError } from './errors.js';
import { EMPTY_ROOT, verifyConsistency, type Hash } from './merkle.js';
import { bytesEqual, check } from './tlog-input.js';
import type { SignedCheckpoint } from './tlog-proof.js';

export type SplitViewFinding =
  | {
      readonly kind: 'same-size-different-roots';
      readonly origin: string;
      readonly size: number;
      readonly checkpoints: readonly [SignedCheckpoint, SignedCheckpoint];
    }
  | {
      readonly kind: 'not-consistent';
      readonly origin: string;
      readonly older: SignedCheckpoint;
      readonly newer: SignedCheckpoint;
      readonly reason: string;
    };

/** Compares two verified checkpoints of one log; null when they are consistent. */
export function findSplitView(a: SignedCheckpoint, b: SignedCheckpoint, consistencyProof: readonly Hash[]): SplitViewFinding | null {
  const origin = a.checkpoint.origin;
  check(
    b.checkpoint.origin === origin,
    'INVALID_REQUEST',
    `Checkpoints of two logs (${origin}, ${b.checkpoint.origin}) cannot show a split view.`,
  );
  if (a.checkpoint.size === b.checkpoint.size) {
    if (bytesEqual(a.checkpoint.rootHash, b.checkpoint.rootHash)) return null;
    return { kind: 'same-size-different-roots', origin, size: a.checkpoint.size, checkpoints: [a, b] };
  }
  const [older, newer] = a.checkpoint.size < b.checkpoint.size ? [a, b] : [b, a];
  const reason = inconsistency(older, newer, consistencyProof);
  return reason === null ? null : { kind: 'not-consistent', origin, older, newer, reason };
}

function inconsistency(older: SignedCheckpoint, newer: SignedCheckpoint, proof: readonly Hash[]): string | null {
  const o = older.checkpoint;
  const n = newer.checkpoint;
  // Every tree extends the empty tree; only its root can be wrong.
  if (o.size === 0) return bytesEqual(o.rootHash, EMPTY_ROOT) ? null : 'the size-0 checkpoint does not carry the empty-tree root';
  try {
    return verifyConsistency(o.size, n.size, proof, o.rootHash, n.rootHash) ? null : 'the consistency proof does not verify';
  } catch (e) {
    if (e instanceof BatonError && e.code === 'MALFORMED_LOG_PROOF') return 'the consistency proof is malformed';
    throw e;
  }
}
