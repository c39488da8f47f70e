/** Ed25519 key pairs named by did:key: an agent's identity is its key. */
import { generateSeed } from '../protocol/ed25519.js';
import { keyPairFromSeed, type KeyPair } from '../protocol/key-pair.js';

export { keyPairFromSeed, type KeyPair };

export function generateKeyPair(): KeyPair {
  return keyPairFromSeed(generateSeed());
}

/** The portable form of a key pair (a JSON key file). */
export interface KeyFile {
  readonly did: string;
  readonly seed_hex: string;
}

export function keyPairToFile(key: KeyPair): KeyFile {
  return { did: key.did, seed_hex: Buffer.from(key.seed).toString('hex') };
}

/**
 * The key pair of a key file's parsed JSON (`baton keygen --out` writes one), not of its path:
 * `keyPairFromFile(JSON.parse(readFileSync(path, 'utf8')))`.
 */
export function keyPairFromFile(file: unknown): KeyPair {
  if (typeof file === 'string') {
    throw new TypeError(
      "keyPairFromFile takes the key file's parsed JSON, not its path or text: keyPairFromFile(JSON.parse(readFileSync(path, 'utf8'))).",
    );
  }
  const f = file as Partial<KeyFile> | null;
  if (!f || typeof f.seed_hex !== 'string' || !/^[0-9a-fA-F]{64}$/.test(f.seed_hex)) {
    throw new TypeError('A key file is JSON {"did": "...", "seed_hex": "<64 hex digits>"}.');
  }
  const key = keyPairFromSeed(Uint8Array.from(Buffer.from(f.seed_hex, 'hex')));
  if (f.did !== undefined && f.did !== key.did) {
    throw new TypeError(`The key file names ${f.did} but its seed belongs to ${key.did}.`);
  }
  return key;
}
