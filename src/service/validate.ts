/** zod at the HTTP edge: every problem listed under one stable code. */
import type { z } from 'zod';
import { parseWith } from '../protocol/records.js';

export function parseRequest<T>(schema: z.ZodType<T>, value: unknown, what: string): T {
  return parseWith(schema, value, what, 'INVALID_REQUEST');
}
