// Applies Baton's one-line fix to the postgres.js driver after install.
//
// postgres.js 3.4.x can throw "Cannot read properties of null (reading
// 'write')" from a setImmediate callback when a connection closes while a
// write is scheduled (porsager/postgres issues 1154, 1066, 1208; no fix
// released). Thrown from a timer, nothing can catch it and the whole service
// process dies when the database goes away under load. The fix fails the
// pending query with CONNECTION_CLOSED instead, which Baton maps to 503.
//
// Idempotent. If the driver changes so the code is no longer found, it says
// so loudly and exits 0: check whether upstream fixed it, then update this.
import { readFileSync, writeFileSync, existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const MARK = '/* baton: closed-socket guard */';
const ORIGINAL = 'function nextWrite(fn) {\n    const x = socket.write(chunk, fn)';
const PATCHED = `function nextWrite(fn) {\n    ${MARK} if (socket === null) { chunk = nextWriteTimer = null; error(Errors.connection('CONNECTION_CLOSED', options)); return false }\n    const x = socket.write(chunk, fn)`;

const root = join(dirname(fileURLToPath(import.meta.url)), '..', 'node_modules', 'postgres');
let problems = 0;
for (const rel of ['src/connection.js', 'cjs/src/connection.js']) {
  const file = join(root, rel);
  if (!existsSync(file)) continue;
  const text = readFileSync(file, 'utf8');
  if (text.includes(MARK)) continue;
  if (!text.includes(ORIGINAL)) {
    problems++;
    console.warn(`[baton] WARNING: could not patch ${file}: the expected nextWrite code was not found.`);
    continue;
  }
  writeFileSync(file, text.replace(ORIGINAL, PATCHED));
  console.log(`[baton] patched ${rel} (closed-socket guard)`);
}
if (problems > 0) {
  console.warn(
    '[baton] The postgres.js closed-socket guard is missing: a database outage under load may crash the service. See scripts/patch-postgres.mjs.',
  );
}
