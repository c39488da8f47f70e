// The whole schema, as drizzle-kit and drizzle({ schema }) see it.
export * from './tenants.js';
export * from './keys.js';
export * from './delegations.js';
export * from './invocations.js';
export * from './actuals.js';
export * from './service-receipts.js';
export * from './log.js';
export * from './tools.js';
