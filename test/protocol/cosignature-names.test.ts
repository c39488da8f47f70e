/**
 * Which witness names a log takes from now on (checkWitnessName): printable ASCII without `%`, since
 * a percent-escape lets any character back in, invisible ones and other scripts with it (review of
 * fixF, fixF2 of s52).
 */
import { describe, expect, it } from 'vitest';
import { checkWitnessName, witnessNameProblem } from '../../src/protocol/cosignature.js';
import { BatonError } from '../../src/protocol/errors.js';

const refusal = (name: string): BatonError | undefined => {
  try {
    checkWitnessName(name);
    return undefined;
  } catch (e) {
    return e as BatonError;
  }
};

describe('checkWitnessName', () => {
  it('takes the host and path names witnesses go by', () => {
    for (const name of ['witness.example', 'witness.example:8443/w1', 'transparency.dev/armored-witness/x_1', 'a~b!c', 'x'.repeat(256)]) {
      expect(refusal(name), name).toBeUndefined();
    }
  });

  it('refuses a name holding `%`, whatever the escape decodes to, with a message saying why', () => {
    for (const name of [
      'baton%E2%80%8B.test/baton/ten_1', // a zero-width space
      'baton%C2%AD.test/x', // a soft hyphen
      'bat%D6%85n.test/x', // Armenian օ
      'bat%CE%BFn.test', // Greek ο
      'baton%E3%80%82test/x', // ideographic full stop
      'baton.test%00/x', // NUL
      'baton%2Etest', // an ASCII dot
      '%2562aton.test', // nested
      'witness.example/100%25',
      'witness.example/50%',
      '%',
    ]) {
      const refused = refusal(name);
      expect(refused, name).toBeInstanceOf(BatonError);
      expect(refused!.code, name).toBe('INVALID_VERIFIER_KEY');
      expect(refused!.message, name).toMatch(
        /^A witness name holds no `%`: a percent-escape .* could read as another\. Write the host and path name as it is\.$/,
      );
    }
    // What the log still serves (stored lines) is another rule: `%` alone makes no name unservable.
    expect(witnessNameProblem('baton%2Etest')).toBeUndefined();
  });

  it('still names the first character outside printable ASCII, and the length, before `%`', () => {
    expect(refusal('b\u0430ton%2E.test')!.message).toMatch(/holds U\+0430/);
    expect(refusal(`${'x'.repeat(256)}%`)!.message).toMatch(/at most 256 bytes/);
  });
});
