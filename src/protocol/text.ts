/**
 * What text a person reads may hold. Names and reasons are shown to operators,
 * approvers and auditors, and a control, bidi or zero-width character can make
 * one display as another ("acme\u202egnp.exe") or as nothing at all.
 *
 * No `u` flag on the patterns, so the OpenAPI document can state them as plain patterns: the
 * excluded characters are in the BMP, except the tag characters (U+E0000-E007F), which hide text
 * that people do not see and language models read; outside the `u` flag they are a surrogate pair.
 */

/** Invisible in the BMP: soft hyphen, joiners, fillers that read as letters, bidi and zero-width formatting. */
const INVISIBLE =
  '\\u00ad\\u034f\\u061c\\u115f\\u1160\\u17b4\\u17b5\\u180b-\\u180f\\u200b-\\u200f\\u202a-\\u202e\\u2060-\\u206f\\u3164\\ufeff\\uffa0';
/** A tag character (U+E0000-E007F) in UTF-16. */
const TAG = '\\udb40[\\udc00-\\udc7f]';

/** One line: no control characters, no bidi, zero-width or other invisible characters. */
// eslint-disable-next-line no-misleading-character-class -- U+034F stands alone in the class on purpose: it is excluded, not combined
export const PLAIN_NAME = new RegExp(`^(?:(?!${TAG})[^\\u0000-\\u001f\\u007f-\\u009f${INVISIBLE}])*$`);

/** As PLAIN_NAME, but tab and newline may appear (reasons, explanations). */
// eslint-disable-next-line no-misleading-character-class -- U+034F stands alone in the class on purpose: it is excluded, not combined
export const PLAIN_TEXT = new RegExp(`^(?:(?!${TAG})[^\\u0000-\\u0008\\u000b-\\u001f\\u007f-\\u009f${INVISIBLE}])*$`);

/** At least one letter or digit that shows: spaces, punctuation or invisible characters (Hangul fillers are letters) alone say nothing. */
export const SAYS_SOMETHING = /(?!\p{Default_Ignorable_Code_Point})[\p{L}\p{N}]/u;

export const NOT_PLAIN = 'must not contain control, bidi, zero-width or other invisible characters';
