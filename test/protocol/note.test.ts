/**
 * C2SP signed notes: the spec's example and golang.org/x/mod's known
 * answers, the rules on unknown, failing and duplicate signatures, limits,
 * malformed input, and parse/format round trips.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  ed25519NoteSigner,
  ed25519NoteVerifier,
  formatNote,
  formatVerifierKey,
  keyIdOf,
  MAX_NOTE_BYTES,
  MAX_NOTE_SIGNATURES,
  NOTE_ED25519,
  openNote,
  parseNote,
  parseVerifierKey,
  signNote,
  verifierKey,
  type Note,
} from '../../src/protocol/note.js';
import { codeOf } from '../support/tlog.js';

const VECTORS = join(import.meta.dirname, '../vectors');
const c2sp = JSON.parse(readFileSync(join(VECTORS, 'c2sp-tlog/examples.json'), 'utf8')) as {
  signedNote: { quasimodo: string; fooNote: string; fooVerifierKey: string };
};
const go = JSON.parse(readFileSync(join(VECTORS, 'go-sumdb-note/note.json'), 'utf8')) as {
  text: string;
  peterNeumann: { signerKey: string; verifierKey: string; signatureLine: string };
  enochRoot: { verifierKey: string; signatureLine: string };
};

/** The seed inside Go's signer key format PRIVATE+KEY+<name>+<id>+base64(0x01 || seed). */
function seedOfGoSignerKey(skey: string): Uint8Array {
  const b = Buffer.from(skey.split('+').slice(4).join('+'), 'base64');
  expect(b[0]).toBe(NOTE_ED25519);
  return Uint8Array.from(b.subarray(1));
}

const peter = parseVerifierKey(go.peterNeumann.verifierKey);
const enoch = parseVerifierKey(go.enochRoot.verifierKey);
const signed = (...lines: string[]): string => go.text + '\n' + lines.join('');

describe('known answers', () => {
  it('the C2SP example note verifies under its published verifier key', () => {
    const key = parseVerifierKey(c2sp.signedNote.fooVerifierKey);
    expect(key.keyId).toBe(0x530d903a);
    expect(keyIdOf(key.name, NOTE_ED25519, key.publicKey)).toBe(0x530d903a);
    expect(formatVerifierKey(key)).toBe(c2sp.signedNote.fooVerifierKey);
    const note = openNote(c2sp.signedNote.fooNote, [ed25519NoteVerifier(key)]);
    expect(note.text).toBe('This is an example message.\n');
    expect(note.verified.map((v) => v.key.name)).toEqual(['example.com/foo']);
  });

  it('the text is separated by the last blank line (the C2SP opening example)', () => {
    const note = parseNote(c2sp.signedNote.quasimodo);
    expect(note.text).toBe('Ognuno sta solo sul cuor della terra\ntrafitto da un raggio di sole:\n\ned è subito sera.\n');
    expect(note.signatures.map((s) => s.name)).toEqual(['quasimodo.example/salvatore']);
    expect(formatNote(note)).toBe(c2sp.signedNote.quasimodo);
  });

  it('signing the Go test text with the Go test seed gives the published signature byte for byte', () => {
    const signer = ed25519NoteSigner('PeterNeumann', seedOfGoSignerKey(go.peterNeumann.signerKey));
    expect(formatVerifierKey(signer.key)).toBe(go.peterNeumann.verifierKey);
    expect(signNote(go.text, [signer])).toBe(signed(go.peterNeumann.signatureLine));
  });

  it('verifies the trusted signature and sets the unknown one aside', () => {
    const message = signed(go.peterNeumann.signatureLine, go.enochRoot.signatureLine);
    const one = openNote(message, [ed25519NoteVerifier(peter)]);
    expect(one.verified.map((v) => v.key.name)).toEqual(['PeterNeumann']);
    expect(one.unverified.map((s) => s.name)).toEqual(['EnochRoot']);
    const both = openNote(message, [ed25519NoteVerifier(peter), ed25519NoteVerifier(enoch)]);
    expect(both.verified.map((v) => v.key.name)).toEqual(['PeterNeumann', 'EnochRoot']);
    expect(codeOf(() => openNote(message, []))).toBe('NOTE_NOT_VERIFIED');
  });
});

describe('trust rules', () => {
  const message = signed(go.peterNeumann.signatureLine);

  it('ignores a key that shares only the name, or only the key ID, with the trusted key', () => {
    const sameName = verifierKey('PeterNeumann', NOTE_ED25519, enoch.publicKey);
    const sameIdOtherName = { ...peter, name: 'CarmenSandiego' };
    for (const k of [sameName, sameIdOtherName]) {
      expect(codeOf(() => openNote(message, [ed25519NoteVerifier(k)]))).toBe('NOTE_NOT_VERIFIED');
      expect(
        openNote(signed(go.peterNeumann.signatureLine, go.enochRoot.signatureLine), [ed25519NoteVerifier(k), ed25519NoteVerifier(enoch)])
          .verified,
      ).toHaveLength(1);
    }
  });

  it('rejects the whole note when a trusted signature fails, even if another verifies', () => {
    const bad =
      go.enochRoot.signatureLine.slice(0, 40) + (go.enochRoot.signatureLine[40] === 'A' ? 'B' : 'A') + go.enochRoot.signatureLine.slice(41);
    expect(
      codeOf(() => openNote(signed(go.peterNeumann.signatureLine, bad), [ed25519NoteVerifier(peter), ed25519NoteVerifier(enoch)])),
    ).toBe('NOTE_NOT_VERIFIED');
  });

  it('refuses a trusted key that signed twice, so it is never counted twice', () => {
    expect(codeOf(() => openNote(signed(go.peterNeumann.signatureLine, go.peterNeumann.signatureLine), [ed25519NoteVerifier(peter)]))).toBe(
      'MALFORMED_NOTE',
    );
  });

  it('lists a repeated unknown signature once', () => {
    const note = openNote(signed(go.peterNeumann.signatureLine, go.enochRoot.signatureLine, go.enochRoot.signatureLine), [
      ed25519NoteVerifier(peter),
    ]);
    expect(note.unverified).toHaveLength(1);
  });

  it('refuses two trusted keys with the same name and key ID', () => {
    expect(codeOf(() => openNote(message, [ed25519NoteVerifier(peter), ed25519NoteVerifier(peter)]))).toBe('INVALID_VERIFIER_KEY');
  });

  it(`accepts ${MAX_NOTE_SIGNATURES} signatures and refuses one more`, () => {
    const others = Array.from({ length: MAX_NOTE_SIGNATURES - 1 }, (_, i) => `— other${i} ${Buffer.alloc(68, i).toString('base64')}\n`);
    expect(openNote(signed(go.peterNeumann.signatureLine, ...others), [ed25519NoteVerifier(peter)]).unverified).toHaveLength(
      MAX_NOTE_SIGNATURES - 1,
    );
    expect(codeOf(() => openNote(signed(go.peterNeumann.signatureLine, ...others, others[0]!), [ed25519NoteVerifier(peter)]))).toBe(
      'MALFORMED_NOTE',
    );
  });
});

describe('malformed notes are refused with MALFORMED_NOTE', () => {
  const sig = go.peterNeumann.signatureLine;
  const cases: [string, string][] = [
    ['text only', go.text],
    ['no signature after the blank line', go.text + '\n'],
    ['signature line without final newline', go.text + '\n' + sig.slice(0, -1)],
    ['control character', '\x01' + go.text + '\n' + sig],
    ['tab', go.text.replace(' ', '\t') + '\n' + sig],
    ['carriage return', go.text.replace('\n', '\r\n') + '\n' + sig],
    ['lone surrogate', '\ud800' + go.text + '\n' + sig],
    ['space in key name', go.text + '\n' + sig.replace('PeterNeumann', 'Peter Neumann')],
    ['plus in key name', go.text + '\n' + sig.replace('PeterNeumann', 'Peter+Neumann')],
    ['no-break space in key name', go.text + '\n' + sig.replace('PeterNeumann', 'Peter\u00a0Neumann')],
    ['empty key name', go.text + '\n' + sig.replace('PeterNeumann ', ' ')],
    ['hyphen instead of em dash', go.text + '\n' + sig.replace('—', '-')],
    ['line after the signatures', go.text + '\n' + sig + 'Unexpected line.\n'],
    ['unpadded base64', go.text + '\n' + sig.replace('=\n', '\n')],
    ['base64 with whitespace', go.text + '\n' + sig.replace('x08go', 'x08 go')],
    ['only a key ID', go.text + '\n' + '— PeterNeumann x08gow==\n'],
    ['too large', 'a'.repeat(MAX_NOTE_BYTES) + '\n\n' + sig],
  ];
  it.each(cases)('%s', (_name, message) => {
    expect(codeOf(() => parseNote(message))).toBe('MALFORMED_NOTE');
    expect(codeOf(() => openNote(message, [ed25519NoteVerifier(peter)]))).toBe('MALFORMED_NOTE');
  });
});

describe('verifier keys', () => {
  it('refuses every truncation and every one-character change of a valid key', () => {
    const vkey = go.peterNeumann.verifierKey;
    for (let i = 0; i <= vkey.length; i++) {
      for (let j = i + 1; j <= vkey.length; j++)
        if (i !== 0 || j !== vkey.length) expect(codeOf(() => parseVerifierKey(vkey.slice(i, j)))).not.toBe('ok');
    }
    for (let i = 0; i < vkey.length; i++) {
      const changed = vkey.slice(0, i) + String.fromCharCode(vkey.charCodeAt(i) + 1) + vkey.slice(i + 1);
      expect(codeOf(() => parseVerifierKey(changed))).toBe('INVALID_VERIFIER_KEY');
    }
  });

  it('refuses a small-order public key even with a matching key ID', () => {
    const identity = Uint8Array.from(Buffer.from('0100000000000000000000000000000000000000000000000000000000000000', 'hex'));
    expect(codeOf(() => verifierKey('weak', NOTE_ED25519, identity))).toBe('INVALID_VERIFIER_KEY');
    const id = keyIdOf('weak', NOTE_ED25519, identity).toString(16).padStart(8, '0');
    expect(codeOf(() => parseVerifierKey(`weak+${id}+${Buffer.concat([Buffer.of(1), identity]).toString('base64')}`))).toBe(
      'INVALID_VERIFIER_KEY',
    );
  });

  it('refuses unknown signature types', () => {
    expect(codeOf(() => verifierKey('k', 0x02, peter.publicKey))).toBe('INVALID_VERIFIER_KEY');
  });
});

describe('round trips', () => {
  const nameArb = fc.stringMatching(/^[a-z0-9./_\u00e9\u2014-]{1,24}$/);
  const lineArb = fc.string({ unit: fc.constantFrom('a', 'Z', '0', ' ', '+', '—', 'é', '\u{1F600}', '='), maxLength: 20 });
  const textArb = fc.array(lineArb, { minLength: 1, maxLength: 6 }).map((lines) => lines.join('\n') + '\n');
  const noteArb: fc.Arbitrary<Note> = fc.record({
    text: textArb,
    signatures: fc.array(
      fc.record({ name: nameArb, keyId: fc.nat({ max: 0xffffffff }), signature: fc.uint8Array({ minLength: 1, maxLength: 80 }) }),
      {
        minLength: 1,
        maxLength: 5,
      },
    ),
  });

  it('parseNote(formatNote(n)) is n, and formatNote(parseNote(m)) is m', () => {
    fc.assert(
      fc.property(noteArb, (note) => {
        const message = formatNote(note);
        const parsed = parseNote(message);
        expect(parsed.text).toBe(note.text);
        expect(parsed.signatures).toEqual(note.signatures);
        expect(formatNote(parsed)).toBe(message);
      }),
    );
  });

  it('a note signed by random keys opens under them, and not after any change to its text', () => {
    fc.assert(
      fc.property(textArb, nameArb, fc.uint8Array({ minLength: 32, maxLength: 32 }), fc.nat(), (text, name, seed, at) => {
        const signer = ed25519NoteSigner(name, seed);
        const message = signNote(text, [signer]);
        const verifiers = [ed25519NoteVerifier(signer.key)];
        expect(openNote(message, verifiers).text).toBe(text);
        expect(openNote(message, [ed25519NoteVerifier(parseVerifierKey(formatVerifierKey(signer.key)))]).text).toBe(text);
        // Change one character of the text, keeping its lines (or add one where it has none).
        const chars = Array.from(text);
        const i = at % chars.length;
        const changed = chars[i] === '\n' ? 'x' + text : chars.map((c, j) => (j !== i ? c : c === 'x' ? 'y' : 'x')).join('');
        expect(codeOf(() => openNote(changed + message.slice(text.length), verifiers))).toBe('NOTE_NOT_VERIFIED');
      }),
      { numRuns: 50 },
    );
  });
});
