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

/**
 * The largest cost one invocation may declare (args.estimated_cost_usd) or
 * report (an actual's cost_usd): one million US dollars. No single tool call
 * plausibly costs more, and keeping each amount a thousand times below
 * MAX_USD means thousands of calls at the maximum still sum exactly, and a
 * counter plus one amount never nears the bigint range. Ceilings in policies
 * may still go up to MAX_USD (a budget can span many calls).
 */
export const MAX_INVOCATION_USD = 1_000_000;
export const MAX_INVOCATION_MICROS = (MAX_INVOCATION_USD * MICROS_PER_USD) as Micros;

/**
 * The largest amount that is stored or reported exactly: 2^53 − 1 micros
 * (about 9.007 billion USD). Sums and spend counters saturate here rather
 * than overflow, so reading them can never fail; a saturated value is a
 * lower bound of the true one, and it is far above every budget (at most
 * MAX_MICROS), so budget checks against it still deny.
 */
export const MAX_EXACT_MICROS = Number.MAX_SAFE_INTEGER as Micros;

// String(n) of a finite, non-negative double is either plain decimal or
// d[.ddd]e±x (below 1e-6 or from 1e21 up); both are captured here.
const SHORTEST_DECIMAL = /^(\d+)(?:\.(\d+))?(?:e([+-]\d+))?$/;

function outOfRange(message: string, value: unknown): never {
  throw new BatonError('NUMBER_OUT_OF_RANGE', { message, details: { value: String(value) } });
}

/** A finite, non-negative amount as the exact decimal digits × 10^−scale of its shortest form. */
interface ExactDecimal {
  readonly digits: bigint;
  readonly scale: number;
}

/**
 * The exact decimal value a JSON number stands for: its shortest decimal
 * form (String(n), which JCS also signs), read with integer arithmetic.
 * Throws NUMBER_OUT_OF_RANGE for NaN, infinities, negatives and amounts
 * above MAX_USD; -0 is treated as 0.
 */
function exactDecimal(usd: number): ExactDecimal {
  if (typeof usd !== 'number' || Number.isNaN(usd)) {
    outOfRange('An amount of money is not a number.', usd);
  }
  if (!Number.isFinite(usd) || usd < 0 || usd > MAX_USD) {
    outOfRange(`The amount ${String(usd)} USD is outside 0 to ${MAX_USD} USD.`, usd);
  }
  const match = SHORTEST_DECIMAL.exec(String(usd)); // String(-0) === "0"
  if (match === null) outOfRange(`The amount ${String(usd)} USD has no plain decimal form.`, usd);
  const whole = match[1] ?? '0';
  const fraction = match[2] ?? '';
  const exponent = Number(match[3] ?? '0');
  // value = digits × 10^(exponent − fraction.length)
  return { digits: BigInt(whole + fraction), scale: fraction.length - exponent };
}

/**
 * Converts a US-dollar amount to micro-dollars exactly, rounding any digits
 * beyond the sixth decimal as asked. Throws NUMBER_OUT_OF_RANGE for NaN,
 * infinities, negatives and amounts above MAX_USD; -0 is treated as 0.
 */
export function usdToMicros(usd: number, rounding: Rounding): Micros {
  const { digits, scale } = exactDecimal(usd);
  if (rounding !== 'floor' && rounding !== 'ceil') {
    throw new BatonError('INTERNAL', { message: `Unknown rounding mode ${String(rounding)}.` });
  }
  const shift = 6 - scale; // micros shift the value by six decimal places
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
 * Compares two US-dollar amounts exactly as the decimals they are signed as
 * (no rounding to micros, no float arithmetic): negative when a < b, zero
 * when equal, positive when a > b. So 0.3000001 is above 0.3 although both
 * floor to the same micros. Throws NUMBER_OUT_OF_RANGE like usdToMicros.
 */
export function compareUsd(a: number, b: number): number {
  const x = exactDecimal(a);
  const y = exactDecimal(b);
  const scale = Math.max(x.scale, y.scale);
  const left = x.digits * 10n ** BigInt(scale - x.scale);
  const right = y.digits * 10n ** BigInt(scale - y.scale);
  return left < right ? -1 : left > right ? 1 : 0;
}

/**
 * Why `value` is not a usable cost of one invocation (a finite JSON number
 * of US dollars from 0 to MAX_INVOCATION_USD), or undefined when it is.
 */
export function invocationAmountProblem(value: unknown): string | undefined {
  if (typeof value !== 'number') return 'is not a number';
  if (!Number.isFinite(value)) return 'is not a finite number';
  if (value < 0) return 'is negative';
  if (value > MAX_INVOCATION_USD) return `is above the per-invocation maximum of ${MAX_INVOCATION_USD} USD`;
  return undefined;
}

/**
 * A non-negative integer count of micro-dollars read from the database
 * (a bigint, or a numeric sum as text), clamped to MAX_EXACT_MICROS.
 * `saturated` says it reached that bound, so the true amount may be larger.
 */
export function saturatingMicros(value: bigint | number | string): { micros: Micros; saturated: boolean } {
  let n: bigint;
  try {
    n = typeof value === 'number' ? BigInt(Math.trunc(value)) : BigInt(value);
  } catch {
    outOfRange(`${String(value)} is not an integer number of micro-dollars.`, value);
  }
  if (n < 0n) outOfRange(`${String(value)} is a negative number of micro-dollars.`, value);
  // Reaching the bound counts: a counter clamped there may stand for more.
  if (n >= BigInt(MAX_EXACT_MICROS)) return { micros: MAX_EXACT_MICROS, saturated: true };
  return { micros: Number(n) as Micros, saturated: false };
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
