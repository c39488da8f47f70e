/**
 * `baton keygen --out <file>`: a new Ed25519 key pair as a did:key, written
 * as a JSON key file {did, seed_hex} readable only by its owner (0600).
 */
import { randomBytes } from 'node:crypto';
import { open, rename, unlink } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { parseCliArgs } from './args.js';
import { generateKeyPair, keyPairToFile } from '../sdk/keys.js';
import { COMMON_OPTIONS, printJson, STDOUT_PATH } from './basics.js';
import { UsageError, type CliIo } from './io.js';

export const KEYGEN_HELP = `Usage: baton keygen --out <file> [--force] [--json]

Generates an Ed25519 key pair and writes it as a key file
{"did": "did:key:z6Mk...", "seed_hex": "<64 hex digits>"} with mode 0600
(readable by you only). Prints the DID, the public name other parties use:
an operator registers it as a trusted root, a delegator names it with --to.

The seed is the secret: whoever holds the file acts as this DID. It is
never printed.

Options:
  -o, --out <file>   where to write the key file (required; not "-": the
                     seed is never printed)
  --force            replace an existing file (otherwise refused)
  --json             print {"did", "file"}
  -h, --help         show this help

Exit codes: 0 written, 2 bad flags or the file exists / cannot be written.`;

export async function runKeygen(argv: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseCliArgs('keygen', {
    args: argv,
    allowPositionals: true,
    options: { out: { type: 'string', short: 'o' }, force: { type: 'boolean', default: false }, ...COMMON_OPTIONS },
  });
  if (values.help) {
    io.out(KEYGEN_HELP);
    return 0;
  }
  if (positionals.length > 0) throw new UsageError(`unexpected argument "${positionals[0]}"`, KEYGEN_HELP);
  const out = values.out;
  if (!out) throw new UsageError('give --out <file> for the key file (it holds a secret, so Baton never prints it)', KEYGEN_HELP);
  // "-" is stdout for other commands' --out: a secret seed there would land in terminals, logs and scrollback.
  if (out === STDOUT_PATH)
    throw new UsageError('--out - would print the secret seed; give a file path (it is written with mode 0600)', KEYGEN_HELP);

  const key = generateKeyPair();
  await writeSecretFile(out, `${JSON.stringify(keyPairToFile(key), null, 2)}\n`, values.force);
  if (values.json) printJson(io, { did: key.did, file: out });
  else {
    io.out(key.did);
    io.err(`wrote ${out} (mode 0600): keep it secret, it signs as ${key.did}`);
  }
  return 0;
}

/**
 * Writes a file that is created with mode 0600 and never exists with looser
 * permissions. Without force it is created exclusively ('wx': an existing
 * file is refused, atomically). With force the content goes to a fresh
 * temporary file first, renamed over the old one, so the old file is never
 * left half-overwritten.
 */
async function writeSecretFile(path: string, content: string, force: boolean): Promise<void> {
  const target = force ? join(dirname(path), `.${basename(path)}.${randomBytes(6).toString('hex')}.tmp`) : path;
  let created = false;
  try {
    const handle = await open(target, 'wx', 0o600);
    created = true;
    try {
      await handle.chmod(0o600); // whatever the umask did
      await handle.writeFile(content, 'utf8');
      await handle.sync();
    } finally {
      await handle.close();
    }
    if (force) await rename(target, path);
  } catch (e) {
    if (created) await unlink(target).catch(() => undefined);
    const code = (e as NodeJS.ErrnoException).code;
    throw new UsageError(
      code === 'EEXIST'
        ? `${path} already exists; refusing to overwrite a key (use --force to replace it)`
        : `cannot write ${path}: ${(e as Error).message}`,
    );
  }
}
