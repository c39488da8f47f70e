import { randomBytes } from 'node:crypto';
import { cosignatureSigner } from '../../src/protocol/cosignature.js';
import { publicKeyFromSeed } from '../../src/protocol/ed25519.js';
import { COSIGNATURE_V1, formatVerifierKey, parseNote, signNote, verifierKey } from '../../src/protocol/note.js';
/** Running `baton` in tests: in-process through main(argv, io), or through the real bin. */
import { execFile, type ChildProcess } from 'node:child_process';
import { createServer } from 'node:http';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { main } from '../../src/cli/main.js';
import { scratchFolders } from '../support/scratch.js';

export interface RunResult {
  code: number;
  out: string;
  err: string;
}

/** In-process; the environment is only what `env` gives (no BATON_URL leaking in from the shell). */
export async function run(argv: string[], env: Record<string, string | undefined> = {}): Promise<RunResult> {
  let out = '';
  let err = '';
  const code = await main(argv, { out: (t) => (out += `${t}\n`), err: (t) => (err += `${t}\n`), env });
  return { code, out, err };
}

export const BIN = fileURLToPath(new URL('../../bin/baton.mjs', import.meta.url));

/** Through bin/baton.mjs in a child process, as `npx baton` runs it; in `cwd` when given (a file it writes lands there). */
export function runBin(argv: string[], env: Record<string, string> = {}, timeoutMs = 30_000, cwd?: string): Promise<RunResult> {
  return new Promise((resolve) => {
    const cleanEnv: Record<string, string> = {};
    for (const [k, v] of Object.entries(process.env)) if (v !== undefined && !k.startsWith('BATON_')) cleanEnv[k] = v;
    const options = { env: { ...cleanEnv, ...env }, timeout: timeoutMs, ...(cwd !== undefined ? { cwd } : {}) };
    execFile(process.execPath, [BIN, ...argv], options, (error, stdout, stderr) => {
      const code = error ? (typeof error.code === 'number' ? error.code : -1) : 0;
      resolve({ code, out: stdout, err: stderr });
    });
  });
}

/** The `baton` of the built server package (dist/packages/server), as an installed package runs it. */
export const PACKAGED_BIN = fileURLToPath(new URL('../../dist/packages/server/bin/baton.js', import.meta.url));

/** Builds dist/packages when an input changed (scripts/build.mjs --if-stale; one build at a time). */
export function buildPackages(): Promise<void> {
  const root = fileURLToPath(new URL('../..', import.meta.url));
  return new Promise((resolve, reject) =>
    execFile(process.execPath, [join(root, 'scripts/build.mjs'), '--if-stale'], { cwd: root, timeout: 600_000 }, (e, _o, stderr) =>
      e ? reject(new Error(`build failed: ${stderr}`)) : resolve(),
    ),
  );
}

/** Through the built package's bin in a child process, in a folder of its own (no source checkout around it). */
export function runPackaged(argv: string[], timeoutMs = 30_000): Promise<RunResult> {
  const cwd = tempDir();
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [PACKAGED_BIN, ...argv],
      { cwd, env: { PATH: process.env['PATH'] ?? '', HOME: cwd }, timeout: timeoutMs },
      (error, stdout, stderr) => {
        const code = error ? (typeof error.code === 'number' ? error.code : -1) : 0;
        resolve({ code, out: stdout, err: stderr });
      },
    );
  });
}

/** A new empty folder, removed after the tests of the file that imports these helpers. */
export const tempDir = scratchFolders('baton-cli-');

/**
 * The URL from a starting service's "Baton is listening on …" line, read from
 * the child's stdout and stderr; rejects when the child exits first or after `timeoutMs`.
 */
export async function waitForListening(child: ChildProcess, timeoutMs: number): Promise<string> {
  return (await waitForListeningLine(child, timeoutMs)).url;
}

/** waitForListening, with the database the line names (`(database: pglite)`). */
export function waitForListeningLine(child: ChildProcess, timeoutMs: number): Promise<{ url: string; database: string }> {
  return new Promise((resolve, reject) => {
    let output = '';
    const timer = setTimeout(() => reject(new Error(`no "listening" line within ${timeoutMs / 1000} s:\n${output}`)), timeoutMs);
    const read = (chunk: Buffer) => {
      output += chunk.toString();
      const m = /Baton is listening on (http:\/\/\S+) \(database: (\w+)[,)]/.exec(output);
      if (m) {
        clearTimeout(timer);
        resolve({ url: m[1]!, database: m[2]! });
      }
    };
    child.stdout?.on('data', read);
    child.stderr?.on('data', read);
    child.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`exited ${code} before listening:\n${output}`));
    });
  });
}

/** What a request to answeringServer asked: its method, path and JSON body (undefined when none). */
export interface AskedRequest {
  readonly method: string;
  readonly path: string;
  readonly body: unknown;
}

/**
 * A server on 127.0.0.1 answering every request with `answer`'s status and JSON: a hostile or
 * mistaken service, for what baton makes of its answers. Close it when done.
 */
export async function answeringServer(
  answer: (asked: AskedRequest) => { status: number; json: unknown },
): Promise<{ url: string; close(): Promise<void> }> {
  const server = createServer((req, res) => {
    let text = '';
    req.on('data', (chunk: Buffer) => (text += chunk.toString()));
    req.on('end', () => {
      const { status, json } = answer({
        method: req.method ?? 'GET',
        path: req.url ?? '/',
        body: text === '' ? undefined : JSON.parse(text),
      });
      res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(json));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  return {
    url: `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

/** A fresh witness (witness.example) cosigning a checkpoint note: its verifier key and the cosigned note. */
export function witnessCosigned(note: string, now: number): { witnessKey: string; cosigned: string } {
  const seed = randomBytes(32);
  const witnessKey = formatVerifierKey(verifierKey('witness.example', COSIGNATURE_V1, publicKeyFromSeed(seed)));
  return { witnessKey, cosigned: signNote(parseNote(note), [cosignatureSigner('witness.example', seed, now)]) };
}
