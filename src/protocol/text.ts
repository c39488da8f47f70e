/**
 * What text a person reads may hold. Names and reasons are shown to operators,
 * approvers and auditors, and a control, bidi or zero-width character can make
 * one display as another ("acme\u202egnp.exe") or as nothing at all.
 *
 * No `u` flag on the patterns: every excluded character is in the BMP, so they
 * match the same, and the OpenAPI document can state them as plain patterns.
 */

/** One line: no control characters, no bidi or zero-width formatting. */
export const PLAIN_NAME = /^[^\u0000-\u001f\u007f-\u009f\u061c\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]*$/;

/** As PLAIN_NAME, but tab and newline may appear (reasons, explanations). */
export const PLAIN_TEXT = /^[^\u0000-\u0008\u000b-\u001f\u007f-\u009f\u061c\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]*$/;

/** At least one letter or digit: spaces, punctuation or invisible characters alone say nothing. */
export const SAYS_SOMETHING = /[\p{L}\p{N}]/u;

export const NOT_PLAIN = 'must not contain control, bidi or zero-width characters';
