/**
 * Exact money.
 *
 * Amounts arrive as JSON numbers of US dollars and become integer
 * micro-dollars (1 USD = 1_000_000 micros) at the edge, so every sum and
 * comparison after that is integer arithmetic. The conversion works on the
 * number's shortest decimal form (String(n), which JCS also uses), never on a
 * float product: 0.1 becomes exactly 100_000 micros, not 100_000.00000000001.
 *
 * Rounding is always chosen against the caller of the money: ceilings round
 * down (floor) and spend or estimates round up (ceil), so sub-micro fractions
 * can never be used to slip past a limit.
 */

import { BatonError } from './errors.js';

/** A safe integer count of micro-dollars, >= 0. Only this module mints them. */
export type Micros = number & { readonly __micros: unique symbol };

export type Rounding = 'floor' | 'ceil';

/** Amounts above one billion US dollars are refused (keeps micros far below 2^53). */
export const MAX_USD = 1_000_000_000;
export const MICROS_PER_USD = 1_000_000;
export const MAX_MICROS = (MAX_USD * MICROS_PER_USD) as Micros;
export const ZERO_MICROS = 0 as Micros;

// String(n) of a finite, non-negative double is either plain decimal or
// d[.ddd]e±x (below 1e-6 or from 1e21 up); both are captured here.
const SHORTEST_DECIMAL = /^(\d+)(?:\.(\d+))?(?:e([+-]\d+))?$/;

function outOfRange(message: string, value: unknown): never {
  throw new BatonError('NUMBER_OUT_OF_RANGE', { message, details: { value: String(value) } });
}

/**
 * Converts a US-dollar amount to micro-dollars exactly, rounding any digits
 * beyond the sixth decimal as asked. Throws NUMBER_OUT_OF_RANGE for NaN,
 * infinities, negatives and amounts above MAX_USD; -0 is treated as 0.
 */
export function usdToMicros(usd: number, rounding: Rounding): Micros {
  if (typeof usd !== 'number' || Number.isNaN(usd)) {
    outOfRange('An amount of money is not a number.', usd);
  }
  if (!Number.isFinite(usd) || usd < 0 || usd > MAX_USD) {
    outOfRange(`The amount ${String(usd)} USD is outside 0 to ${MAX_USD} USD.`, usd);
  }
  if (rounding !== 'floor' && rounding !== 'ceil') {
    throw new BatonError('INTERNAL', { message: `Unknown rounding mode ${String(rounding)}.` });
  }
  const match = SHORTEST_DECIMAL.exec(String(usd)); // String(-0) === "0"
  if (match === null) outOfRange(`The amount ${String(usd)} USD has no plain decimal form.`, usd);
  const whole = match[1] ?? '0';
  const fraction = match[2] ?? '';
  const exponent = Number(match[3] ?? '0');
  // value = digits × 10^(exponent − fraction.length); micros shift that by 6.
  const digits = BigInt(whole + fraction);
  const shift = exponent - fraction.length + 6;
  let micros: bigint;
  if (shift >= 0) {
    micros = digits * 10n ** BigInt(shift);
  } else {
    const divisor = 10n ** BigInt(-shift);
    micros = digits / divisor;
    if (rounding === 'ceil' && digits % divisor !== 0n) micros += 1n;
  }
  return Number(micros) as Micros; // <= 1e15, exact in a double
}

/**
 * Micro-dollars back to US dollars for display and JSON. Exact for every
 * amount up to MAX_USD: the quotient is correctly rounded and such amounts
 * have at most 15 significant digits, so usdToMicros(microsToUsd(m)) === m.
 */
export function microsToUsd(m: Micros): number {
  return asMicros(m) / MICROS_PER_USD;
}

/** Checks that a number (e.g. read from the database) is a valid Micros value. */
export function asMicros(n: number): Micros {
  if (!Number.isSafeInteger(n) || n < 0) {
    outOfRange(`${String(n)} is not a non-negative safe integer number of micro-dollars.`, n);
  }
  return (n === 0 ? 0 : n) as Micros; // fold -0
}

/** Exact sum; refuses a result that would leave the safe-integer range. */
export function addMicros(a: Micros, b: Micros): Micros {
  return asMicros(asMicros(a) + asMicros(b));
}

/** Exact sum of many amounts (0 for none). */
export function sumMicros(amounts: readonly Micros[]): Micros {
  return amounts.reduce<Micros>((total, m) => addMicros(total, m), ZERO_MICROS);
}
