// Run one body of store tests on both drivers: describe.each(drivers)(…).
import type { Store } from '../../src/store/db.js';
import { freshDatabase, freshPglite } from './db.js';

export interface DriverCase {
  name: 'postgres' | 'pglite';
  open(): Promise<{ store: Store; drop(): Promise<void> }>;
}

export const drivers: DriverCase[] = [
  { name: 'postgres', open: () => freshDatabase() },
  { name: 'pglite', open: () => freshPglite() },
];
