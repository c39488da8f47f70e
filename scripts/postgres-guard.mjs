// Baton's one-line fix to the postgres.js driver, applied to a copy of the
// driver that Baton itself owns: the repository's own node_modules (postinstall
// of this private checkout) or the copy the build vendors into the server
// package. Never to a consumer's dependencies.
//
// postgres.js 3.4.x can throw "Cannot read properties of null (reading
// 'write')" from a setImmediate callback when a connection closes while a
// write is scheduled (porsager/postgres issues 1154, 1066, 1208; no fix
// released). Thrown from a timer, nothing can catch it and the whole service
// process dies when the database goes away under load. The fix fails the
// pending query with CONNECTION_CLOSED instead, which Baton maps to 503.
//
// The same write that applies the fix adds an export, batonClosedSocketGuard,
// re-exported from the driver's entry: the server reads it at start-up
// (src/store/driver-guard.ts) and refuses PostgreSQL without it, so a
// driver that was not patched can never be used silently.
import { readFileSync, writeFileSync, existsSync } from 'node:fs';
import { join } from 'node:path';

export const GUARD_EXPORT = 'batonClosedSocketGuard';
const MARK = '/* baton: closed-socket guard */';
const ORIGINAL = 'function nextWrite(fn) {\n    const x = socket.write(chunk, fn)';
const PATCHED = `function nextWrite(fn) {\n    ${MARK} if (socket === null) { chunk = nextWriteTimer = null; error(Errors.connection('CONNECTION_CLOSED', options)); return false }\n    const x = socket.write(chunk, fn)`;

/**
 * One file: the fix, then the export that says it is there. An older Baton
 * applied the fix without the export; that copy gets the export added.
 */
function patchFile(file, exportLine) {
  let text = readFileSync(file, 'utf8');
  if (!text.includes(MARK)) {
    if (!text.includes(ORIGINAL)) return 'unexpected';
    text = text.replace(ORIGINAL, PATCHED);
  } else if (text.includes(exportLine)) {
    return 'already';
  }
  writeFileSync(file, `${text}\n${exportLine}\n`);
  return 'patched';
}

/**
 * Patches the postgres.js package in `driverDir` (ESM src/ and, when present,
 * cjs/src/). Idempotent. Returns the problems found (empty when guarded).
 */
export function patchPostgresDriver(driverDir) {
  const problems = [];
  const esmConnection = join(driverDir, 'src', 'connection.js');
  const esm = patchFile(esmConnection, `export const ${GUARD_EXPORT} = true ${MARK}`);
  if (esm === 'unexpected') problems.push(`${esmConnection}: the expected nextWrite code was not found`);
  const esmIndex = join(driverDir, 'src', 'index.js');
  const index = readFileSync(esmIndex, 'utf8');
  const reexport = `export { ${GUARD_EXPORT} } from './connection.js' ${MARK}`;
  if (esm !== 'unexpected' && !index.includes(reexport)) writeFileSync(esmIndex, `${index}\n${reexport}\n`);
  const cjsConnection = join(driverDir, 'cjs', 'src', 'connection.js');
  if (existsSync(cjsConnection)) {
    const cjs = patchFile(cjsConnection, `module.exports.${GUARD_EXPORT} = true ${MARK}`);
    if (cjs === 'unexpected') problems.push(`${cjsConnection}: the expected nextWrite code was not found`);
  }
  return problems;
}
