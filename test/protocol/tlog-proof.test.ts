/**
 * Signed checkpoints under a log policy, witness cosignatures and quorums,
 * and tlog-proof bundles verified end to end: every generated bundle
 * verifies, and any tampered leaf, proof hash, index, size, root or
 * signature is refused with a stable code.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { formatCheckpoint } from '../../src/protocol/checkpoint.js';
import { cosignatureSigner, cosignedMessage, MAX_COSIGNATURE_CLOCK_SKEW } from '../../src/protocol/cosignature.js';
import { signEd25519 } from '../../src/protocol/ed25519.js';
import { inclusionProof, leafHash, rootOf, subtreeHashesOf, type Hash } from '../../src/protocol/merkle.js';
import { COSIGNATURE_V1, ed25519NoteSigner, parseNote, signNote, verifierKey, type NoteSigner } from '../../src/protocol/note.js';
import { formatTlogProof, openCheckpoint, parseTlogProof, verifyTlogProof, type LogPolicy } from '../../src/protocol/tlog-proof.js';
import { codeOf } from '../support/tlog.js';

const examples = JSON.parse(readFileSync(join(import.meta.dirname, '../vectors/c2sp-tlog/examples.json'), 'utf8')) as {
  cosignature: { cosignedCheckpoint: string; signedMessageExample: string };
  tlogProof: { example: string };
};

const NOW = 1_800_000_000;
const ORIGIN = 'baton.example/log/tenant-1';
const seed = (n: number): Uint8Array => new Uint8Array(32).fill(n);
const log = ed25519NoteSigner(ORIGIN, seed(1));
const witnesses = [1, 2, 3].map((i) => (t: number) => cosignatureSigner(`witness${i}.example`, seed(10 + i), t));
const witnessKeys = witnesses.map((w) => w(0).key);
const policy = (required = 0): LogPolicy => ({
  origin: ORIGIN,
  logKeys: [log.key],
  witnesses: witnessKeys,
  requiredCosignatures: required,
});

function checkpointText(size: number, root: Hash, origin = ORIGIN): string {
  return formatCheckpoint({ origin, size, rootHash: root, extensions: [] });
}
function signedCheckpoint(size: number, root: Hash, signers: readonly NoteSigner[] = [log]): string {
  return signNote(checkpointText(size, root), signers);
}

describe('cosignature known answers (C2SP tlog-cosignature example)', () => {
  it('the example cosignature carries key ID, then the big-endian timestamp of the example message', () => {
    const note = parseNote(examples.cosignature.cosignedCheckpoint);
    const witness = note.signatures.find((s) => s.name === 'witness.example.com/w1')!;
    expect(witness.keyId).toBe(0x8d66cf3f);
    expect(witness.signature).toHaveLength(72);
    expect(Buffer.from(witness.signature.subarray(0, 8)).readBigUInt64BE()).toBe(1679315147n);
    expect(Buffer.from(cosignedMessage(1679315147, new TextEncoder().encode(note.text))).toString()).toBe(
      examples.cosignature.signedMessageExample,
    );
  });

  it('cosignature key IDs use type 0x04, so the same key has different IDs as log key and as witness', () => {
    const asWitness = verifierKey(ORIGIN, COSIGNATURE_V1, log.key.publicKey);
    expect(asWitness.keyId).not.toBe(log.key.keyId);
  });
});

describe('openCheckpoint', () => {
  const root = rootOf([leafHash(Uint8Array.of(1))]);

  it('accepts a checkpoint signed by the log, and reports valid trusted cosignatures', () => {
    const note = signedCheckpoint(1, root, [log, witnesses[0]!(NOW - 5), witnesses[2]!(NOW)]);
    const opened = openCheckpoint(note, policy(2), NOW);
    expect(opened.checkpoint.size).toBe(1);
    expect(opened.logKey).toBe(log.key);
    expect(opened.cosignatures.map((c) => [c.key.name, c.timestamp])).toEqual([
      ['witness1.example', NOW - 5],
      ['witness3.example', NOW],
    ]);
  });

  it('does not take a witness cosignature for the log signature', () => {
    expect(codeOf(() => openCheckpoint(signedCheckpoint(1, root, [witnesses[0]!(NOW)]), policy(), NOW))).toBe('NOTE_NOT_VERIFIED');
  });

  it('refuses a checkpoint of another origin, even signed by a trusted key', () => {
    const note = signNote(checkpointText(1, root, 'other.example/log'), [log]);
    expect(codeOf(() => openCheckpoint(note, policy(), NOW))).toBe('NOTE_NOT_VERIFIED');
  });

  it('refuses a quorum that is not met, and counts a witness once however it is listed', () => {
    const one = signedCheckpoint(1, root, [log, witnesses[0]!(NOW)]);
    expect(codeOf(() => openCheckpoint(one, policy(2), NOW))).toBe('COSIGNATURES_INSUFFICIENT');
    // The same witness key listed under a second name: its one signature, copied under that name, must not count twice.
    const alias = verifierKey('alias.example', COSIGNATURE_V1, witnessKeys[0]!.publicKey);
    const aliasSigner = cosignatureSigner('alias.example', seed(11), NOW);
    const twice = signedCheckpoint(1, root, [log, witnesses[0]!(NOW), aliasSigner]);
    const aliasPolicy = { ...policy(), witnesses: [...witnessKeys, alias] };
    expect(openCheckpoint(twice, { ...aliasPolicy, requiredCosignatures: 1 }, NOW).cosignatures).toHaveLength(2);
    expect(codeOf(() => openCheckpoint(twice, { ...aliasPolicy, requiredCosignatures: 2 }, NOW))).toBe('COSIGNATURES_INSUFFICIENT');
  });

  it('does not count cosignatures dated in the future beyond the allowed skew', () => {
    const note = signedCheckpoint(1, root, [
      log,
      witnesses[0]!(NOW + MAX_COSIGNATURE_CLOCK_SKEW),
      witnesses[1]!(NOW + MAX_COSIGNATURE_CLOCK_SKEW + 1),
    ]);
    expect(openCheckpoint(note, policy(1), NOW).cosignatures).toHaveLength(2);
    expect(codeOf(() => openCheckpoint(note, policy(2), NOW))).toBe('COSIGNATURES_INSUFFICIENT');
  });

  it('takes a cosignature dated past 2^53 (the u64 allows it) as the witness signed it: verified, and dated in the future', () => {
    const witness = witnesses[0]!(0);
    for (const t of [2n ** 53n + 5n, 2n ** 63n - 1n, 2n ** 63n, 2n ** 64n - 1n]) {
      const time = new Uint8Array(8);
      new DataView(time.buffer).setBigUint64(0, t);
      const dated: NoteSigner = {
        key: witness.key,
        sign: (text) => new Uint8Array([...time, ...signEd25519(seed(11), cosignedMessage(t, text))]),
      };
      const note = signedCheckpoint(1, root, [log, dated]);
      // The log's own signature stands: the note is not refused for the witness's date. Past 2^63 - 1,
      // which C2SP forbids, it is no cosignature at all, whatever clock it would be compared with.
      expect(
        openCheckpoint(note, policy(0), NOW).cosignatures.map((c) => c.timestamp > NOW + MAX_COSIGNATURE_CLOCK_SKEW),
        String(t),
      ).toEqual(t > 2n ** 63n - 1n ? [] : [true]);
      expect(codeOf(() => openCheckpoint(note, policy(1), NOW))).toBe('COSIGNATURES_INSUFFICIENT');
    }
  });

  it('rejects the checkpoint when a trusted witness cosignature does not verify', () => {
    const note = parseNote(signedCheckpoint(1, root, [log, witnesses[0]!(NOW)]));
    const forged = {
      ...note,
      signatures: note.signatures.map((s, i) =>
        i === 1 ? { ...s, signature: Uint8Array.from(s.signature, (b, j) => (j === 70 ? b ^ 1 : b)) } : s,
      ),
    };
    expect(codeOf(() => openCheckpoint(signNote(forged, []), policy(), NOW))).toBe('NOTE_NOT_VERIFIED');
    // Re-dating a cosignature breaks it too: the timestamp is signed.
    const redated = {
      ...note,
      signatures: note.signatures.map((s, i) =>
        i === 1 ? { ...s, signature: Uint8Array.from(s.signature, (b, j) => (j === 7 ? b ^ 1 : b)) } : s,
      ),
    };
    expect(codeOf(() => openCheckpoint(signNote(redated, []), policy(), NOW))).toBe('NOTE_NOT_VERIFIED');
  });

  it('refuses a policy whose witness key is the log key, or whose quorum cannot be met', () => {
    const self = verifierKey('self.example', COSIGNATURE_V1, log.key.publicKey);
    expect(codeOf(() => openCheckpoint(signedCheckpoint(1, root), { ...policy(), witnesses: [self] }, NOW))).toBe('INVALID_VERIFIER_KEY');
    expect(codeOf(() => openCheckpoint(signedCheckpoint(1, root), policy(4), NOW))).toBe('INVALID_REQUEST');
  });

  it('a witness refuses to cosign a text that is not a checkpoint', () => {
    expect(codeOf(() => signNote('not a checkpoint\n', [witnesses[0]!(NOW)]))).toBe('MALFORMED_CHECKPOINT');
  });
});

describe('tlog-proof bundles', () => {
  it('reads the C2SP example bundle and writes it back byte for byte', () => {
    const bundle = parseTlogProof(examples.tlogProof.example);
    expect(bundle.index).toBe(73894);
    expect(bundle.proof).toHaveLength(5);
    expect(Buffer.from(bundle.proof[0]!).toString('base64')).toBe('gSKyXoYZUgZ6jduWYrkDOARinOMGJveXjgMkBTcdPlQ=');
    expect(bundle.extra).toBeDefined();
    expect(bundle.checkpoint.startsWith('example.com/fancylog\n109482\n')).toBe(true);
    expect(formatTlogProof(bundle)).toBe(examples.tlogProof.example);
  });

  const hash = Buffer.alloc(32, 7).toString('base64');
  const cp = 'log.example\n1\n' + hash + '\n\n— log.example AAAAAAA=\n';
  const malformed: [string, string][] = [
    ['wrong header', `c2sp.org/tlog-proof@v2\nindex 0\n\n${cp}`],
    ['missing index', `c2sp.org/tlog-proof@v1\n\n${cp}`],
    ['index with leading zero', `c2sp.org/tlog-proof@v1\nindex 01\n\n${cp}`],
    ['index beyond 2^53', `c2sp.org/tlog-proof@v1\nindex 18446744073709551615\n\n${cp}`],
    ['extra after index', `c2sp.org/tlog-proof@v1\nindex 0\nextra AAAA\n\n${cp}`],
    ['empty extra', `c2sp.org/tlog-proof@v1\nextra \nindex 0\n\n${cp}`],
    ['31-byte proof hash', `c2sp.org/tlog-proof@v1\nindex 0\n${Buffer.alloc(31).toString('base64')}\n\n${cp}`],
    ['unpadded proof hash', `c2sp.org/tlog-proof@v1\nindex 0\n${hash.slice(0, -1)}\n\n${cp}`],
    ['no empty line', `c2sp.org/tlog-proof@v1\nindex 0\n${hash}\n`],
    ['no checkpoint', `c2sp.org/tlog-proof@v1\nindex 0\n\n`],
    ['too many proof hashes', `c2sp.org/tlog-proof@v1\nindex 0\n${`${hash}\n`.repeat(54)}\n${cp}`],
  ];
  it('says why a bundle saved with CR LF line endings is refused, and what the first line must be', () => {
    const crlf = examples.tlogProof.example.replace(/\n/g, '\r\n');
    expect(() => parseTlogProof(crlf)).toThrow(/^Line 1 of the tlog-proof ends in CR LF: its line endings must be LF alone/);
    // Only the proof lines in CR LF: the first of them is named.
    const [head, ...rest] = examples.tlogProof.example.split('\n');
    expect(() => parseTlogProof([head, ...rest.slice(0, 2).map((l) => `${l}\r`), ...rest.slice(2)].join('\n'))).toThrow(
      /^Line 2 .* ends in CR LF/,
    );
    expect(() => parseTlogProof(`c2sp.org/tlog-proof@v2\nindex 0\n\n${cp}`)).toThrow(
      /^The tlog-proof does not start with the line c2sp\.org\/tlog-proof@v1\.$/,
    );
  });

  it.each(malformed)('refuses %s with MALFORMED_LOG_PROOF', (_name, text) => {
    expect(codeOf(() => parseTlogProof(text))).toBe('MALFORMED_LOG_PROOF');
  });
});

describe('end to end over random trees', () => {
  const treeArb = fc.record({
    size: fc.integer({ min: 1, max: 300 }),
    pick: fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true }),
    salt: fc.nat(),
  });

  function build({ size, pick, salt }: { size: number; pick: number; salt: number }) {
    const leaves = Array.from({ length: size }, (_, i) => leafHash(new TextEncoder().encode(`receipt ${salt}/${i}`)));
    const index = Math.floor(pick * size);
    const checkpoint = signedCheckpoint(size, rootOf(leaves), [log, witnesses[0]!(NOW), witnesses[1]!(NOW)]);
    const proof = inclusionProof(index, size, subtreeHashesOf(leaves));
    return { leaves, index, checkpoint, proof, text: formatTlogProof({ index, proof, checkpoint }) };
  }

  it('every generated bundle verifies under the log key with a 2-of-3 witness quorum, and round-trips', () => {
    fc.assert(
      fc.property(treeArb, (t) => {
        const { leaves, index, text } = build(t);
        const verified = verifyTlogProof(text, leaves[index]!, policy(2), NOW);
        expect(verified.index).toBe(index);
        expect(verified.checkpoint.checkpoint.size).toBe(t.size);
        expect(formatTlogProof(parseTlogProof(text))).toBe(text);
      }),
      { numRuns: 100 },
    );
  });

  it('any tampered leaf, proof hash, index, size, root or signature is refused', () => {
    fc.assert(
      fc.property(treeArb, fc.nat(), fc.nat(255), ({ size, pick, salt }, at, bit) => {
        const { leaves, index, checkpoint, proof, text } = build({ size, pick, salt });
        const leaf = leaves[index]!;
        const flip = (h: Uint8Array): Uint8Array => Uint8Array.from(h, (b, j) => (j === bit % h.length ? b ^ (1 << (bit % 8)) : b));
        const verify = (bundle: string, l = leaf): string => codeOf(() => verifyTlogProof(bundle, l, policy(2), NOW));

        expect(verify(text, flip(leaf))).toBe('LOG_PROOF_INVALID');
        if (proof.length > 0) {
          const i = at % proof.length;
          expect(verify(formatTlogProof({ index, checkpoint, proof: proof.map((h, j) => (j === i ? flip(h) : h)) }))).toBe(
            'LOG_PROOF_INVALID',
          );
        }
        const otherIndex = (index + 1 + (at % size)) % (size + 1);
        if (otherIndex !== index) expect(verify(formatTlogProof({ index: otherIndex, checkpoint, proof }))).toBe('LOG_PROOF_INVALID');

        // Size or root changed in the checkpoint without the log's key: its signature no longer verifies.
        const note = parseNote(checkpoint);
        const [origin, sizeLine, rootLine] = note.text.split('\n') as [string, string, string];
        const resize = `${origin}\n${Number(sizeLine) + 1 + (at % 5)}\n${rootLine}\n`;
        const reroot = `${origin}\n${sizeLine}\n${Buffer.from(flip(Buffer.from(rootLine, 'base64'))).toString('base64')}\n`;
        for (const body of [resize, reroot]) {
          expect(verify(formatTlogProof({ index, proof, checkpoint: signNote({ text: body, signatures: note.signatures }, []) }))).toBe(
            'NOTE_NOT_VERIFIED',
          );
        }
        // A flipped bit in the log's signature, or a checkpoint re-signed by another key of the same name.
        const forged = { ...note, signatures: note.signatures.map((s, i) => (i === 0 ? { ...s, signature: flip(s.signature) } : s)) };
        expect(verify(formatTlogProof({ index, proof, checkpoint: signNote(forged, []) }))).toBe('NOTE_NOT_VERIFIED');
        const impostor = ed25519NoteSigner(ORIGIN, seed(99));
        expect(verify(formatTlogProof({ index, proof, checkpoint: signedCheckpoint(size, rootOf(leaves), [impostor]) }))).toBe(
          'NOTE_NOT_VERIFIED',
        );
      }),
      { numRuns: 100 },
    );
  });
});
