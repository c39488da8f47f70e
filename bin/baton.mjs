#!/usr/bin/env node
// `npx baton` in a source checkout. When the compiled server package in
// dist/packages is current (`npm run build`, or `npm start` builds it), runs
// that: it starts fast and is what ships. Otherwise runs the TypeScript
// sources through tsx, so the command always runs the code as it is now.
// `demo` always runs from source: it lives in examples/, which no package ships.
import { builtPackagesAreCurrent } from '../scripts/build-inputs.mjs';

const argv = process.argv.slice(2);
let main;
if (argv[0] !== 'demo' && builtPackagesAreCurrent()) {
  ({ main } = await import('../dist/packages/server/cli/main.js'));
} else {
  const { register } = await import('tsx/esm/api');
  register();
  ({ main } = await import('../src/cli/main.ts'));
}
process.exitCode = await main(argv);
