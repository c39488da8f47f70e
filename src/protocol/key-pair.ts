/** An Ed25519 key pair named by its did:key (an agent's identity is its key). */
import { didKeyFromPublicKey } from './did-key.js';
import { publicKeyFromSeed } from './ed25519.js';

export interface KeyPair {
  readonly did: string;
  readonly publicKey: Uint8Array;
  /** 32-byte Ed25519 seed: the secret. */
  readonly seed: Uint8Array;
}

export function keyPairFromSeed(seed: Uint8Array): KeyPair {
  if (seed.length !== 32) throw new TypeError(`An Ed25519 seed is 32 bytes, got ${seed.length}.`);
  const publicKey = publicKeyFromSeed(seed);
  return { did: didKeyFromPublicKey(publicKey), publicKey, seed: Uint8Array.from(seed) };
}
