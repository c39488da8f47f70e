#!/usr/bin/env node
// Prints the failed tests of a vitest JSON results file, one block each, for the end of a CI log.
// Usage: node scripts/failed-tests.mjs results.json
import { readFileSync } from 'node:fs';
import { relative } from 'node:path';

const file = process.argv[2];
if (!file) {
  console.error('usage: node scripts/failed-tests.mjs <vitest-results.json>');
  process.exit(2);
}
let results;
try {
  results = JSON.parse(readFileSync(file, 'utf8'));
} catch (e) {
  console.log(`(no test results to summarise: ${e.message})`);
  process.exit(0);
}
const failures = [];
for (const f of results.testResults ?? []) {
  const name = relative(process.cwd(), f.name);
  for (const t of f.assertionResults ?? []) {
    if (t.status === 'failed') failures.push(`${name} > ${t.fullName}\n    ${firstLines(t.failureMessages?.join('\n') ?? '')}`);
  }
  // A file that failed outside any test (import error, failing hook) has no failed assertion.
  if (f.status === 'failed' && !(f.assertionResults ?? []).some((t) => t.status === 'failed')) {
    failures.push(`${name} (the file itself)\n    ${firstLines(f.message ?? '')}`);
  }
}
console.log(failures.length ? `failed (${failures.length}):\n${failures.map((x) => `  ${x}`).join('\n')}` : 'no failed tests');

function firstLines(text) {
  return text.split('\n').slice(0, 6).join('\n    ');
}
