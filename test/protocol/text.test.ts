/** What a person reads: names and reasons that print as something else, or as nothing, are refused. */
import { describe, expect, it } from 'vitest';
import { PLAIN_NAME, PLAIN_TEXT, SAYS_SOMETHING } from '../../src/protocol/text.js';

const TAGGED = `dana${[...' (agent-7 approving itself)'].map((c) => String.fromCodePoint(0xe0000 + c.charCodeAt(0))).join('')}`;

describe('plain text', () => {
  it('refuses invisible characters: tag characters, fillers, soft hyphens, joiners, bidi and zero-width formatting', () => {
    for (const s of [
      TAGGED,
      'a\u00adb',
      'a\u034fb',
      '\u3164',
      '\uffa0x',
      'a\u115fb',
      'a\u180eb',
      'a\u200bb',
      'acme\u202egnp.exe',
      'a\u2066b',
      'a\u206ab',
      '\ufeffa',
    ]) {
      expect(PLAIN_NAME.test(s), JSON.stringify(s)).toBe(false);
      expect(PLAIN_TEXT.test(s), JSON.stringify(s)).toBe(false);
    }
  });
  it('takes what people write: accents, scripts, emoji (with their variation selectors and modifiers), and other characters past the BMP', () => {
    for (const s of ['Zoë Ångström', '山田 太郎', 'محمد', 'ship it ❤️ 👍🏽', '𝒜 math', 'looks good: 10/10 (v2.1)']) {
      expect(PLAIN_NAME.test(s), s).toBe(true);
      expect(SAYS_SOMETHING.test(s), s).toBe(true);
    }
    expect(PLAIN_TEXT.test('first line\n\tsecond')).toBe(true);
    expect(PLAIN_NAME.test('first line\nsecond')).toBe(false);
  });
  it('a reason must show a letter or digit: invisible letters (Hangul fillers) say nothing', () => {
    for (const s of ['\u3164', '\uffa0\uffa0', '\u115f\u1160', ' - ... ', ''])
      expect(SAYS_SOMETHING.test(s), JSON.stringify(s)).toBe(false);
    expect(SAYS_SOMETHING.test('\u3164ok')).toBe(true);
  });
});
