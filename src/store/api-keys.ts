// API keys: how secrets look, how they are stored (only as a SHA-256 hash),
// and the queries over api_keys. The plaintext secret leaves this module once,
// in the result of the function that minted it, and is never stored or logged.
import { createHash, randomBytes } from 'node:crypto';
import { and, asc, eq, gt, isNull, or, sql } from 'drizzle-orm';
import { transactionBehind, type CommitCheck, type Db } from './db.js';
import { inExistingTenant } from './errors.js';
import { newId } from './ids.js';
import { rows } from './rows.js';
import type { TenantKeyScope } from '../protocol/lists.js';
import { apiKeys, type ApiKey } from './schema/index.js';

/** Tenant keys: 'bt_' + base64url(32 random bytes) (43 characters, no padding). */
export const TENANT_KEY_PREFIX = 'bt_';
/** Generated admin keys: 'bt_admin_' + base64url(32 random bytes). */
export const ADMIN_KEY_PREFIX = 'bt_admin_';
/** The shape of every key Baton mints (both prefixes); anything else is not one of ours. */
export const MINTED_KEY_PATTERN = /^bt_(?:admin_)?[A-Za-z0-9_-]{43}$/;

export function mintApiKeySecret(kind: 'tenant' | 'admin'): string {
  return (kind === 'admin' ? ADMIN_KEY_PREFIX : TENANT_KEY_PREFIX) + randomBytes(32).toString('base64url');
}

/** The stored form of a secret: lowercase hex SHA-256 of its UTF-8 bytes. */
export function hashApiKeySecret(secret: string): string {
  return createHash('sha256').update(secret, 'utf8').digest('hex');
}

/** The columns authentication needs; never the plaintext (it is not stored). */
export type ApiKeyForAuth = Pick<ApiKey, 'id' | 'tenantId' | 'secretHash' | 'scopes' | 'toolServer' | 'revokedAt' | 'expiresAt'>;

/** One indexed lookup (api_keys_secret_hash_uq). Revoked keys are returned too; the caller refuses them. */
export async function findApiKeyByHash(db: Db, secretHash: string): Promise<ApiKeyForAuth | undefined> {
  const [row] = await db
    .select({
      id: apiKeys.id,
      tenantId: apiKeys.tenantId,
      secretHash: apiKeys.secretHash,
      scopes: apiKeys.scopes,
      toolServer: apiKeys.toolServer,
      revokedAt: apiKeys.revokedAt,
      expiresAt: apiKeys.expiresAt,
    })
    .from(apiKeys)
    .where(eq(apiKeys.secretHash, secretHash))
    .limit(1);
  return row;
}

/** An api_keys row without its hash: what listings may show. */
export type ApiKeyInfo = Omit<ApiKey, 'secretHash'>;

const infoColumns = {
  id: apiKeys.id,
  tenantId: apiKeys.tenantId,
  scopes: apiKeys.scopes,
  name: apiKeys.name,
  toolServer: apiKeys.toolServer,
  createdAt: apiKeys.createdAt,
  revokedAt: apiKeys.revokedAt,
  expiresAt: apiKeys.expiresAt,
  lastUsedAt: apiKeys.lastUsedAt,
  rotatedFrom: apiKeys.rotatedFrom,
};

/** now() + seconds on the database clock, so every node agrees on the instant. */
const inSeconds = (seconds: number) => sql`now() + make_interval(secs => ${seconds})`;

/** Live: not revoked and not expired, on the database clock. */
const isLive = () => and(isNull(apiKeys.revokedAt), or(isNull(apiKeys.expiresAt), gt(apiKeys.expiresAt, sql`now()`)));

export async function createTenantApiKey(
  db: Db,
  opts: {
    tenantId: string;
    scopes: readonly TenantKeyScope[];
    name: string | null;
    toolServer: string | null;
    /** null: the key never expires. */
    expiresInSeconds?: number | null;
    rotatedFrom?: string | null;
  },
): Promise<{ key: string; info: ApiKeyInfo }> {
  const key = mintApiKeySecret('tenant');
  const [info] = await inExistingTenant(() =>
    db
      .insert(apiKeys)
      .values({
        id: newId('key'),
        tenantId: opts.tenantId,
        secretHash: hashApiKeySecret(key),
        scopes: [...opts.scopes],
        name: opts.name,
        toolServer: opts.toolServer,
        expiresAt: opts.expiresInSeconds != null ? inSeconds(opts.expiresInSeconds) : null,
        rotatedFrom: opts.rotatedFrom ?? null,
      })
      .returning(infoColumns),
  );
  if (!info) throw new Error('createTenantApiKey: INSERT … RETURNING gave no row');
  return { key, info };
}

/** Every key of the tenant, revoked ones included (with revoked_at), oldest first. */
export function listTenantApiKeys(db: Db, tenantId: string): Promise<ApiKeyInfo[]> {
  return db.select(infoColumns).from(apiKeys).where(eq(apiKeys.tenantId, tenantId)).orderBy(asc(apiKeys.createdAt), asc(apiKeys.id));
}

/**
 * Sets revoked_at once; revoking again keeps the first time. Returns the row
 * (so the caller can evict it from caches) or undefined when no key has this id.
 *
 * Verifies read the key without locking it (a lock on one hot row per verify
 * would make them queue on it), so one that began before this revocation
 * committed may still be allowed, with a created_at after the revocation's
 * now(). An auditor would read that as a use after revocation. So the time is
 * written again once the revocation has committed, from the database clock,
 * rounded up to the millisecond the API shows: every verify that saw the key
 * live began before it. revoked_at is only ever tested for NULL, so a later
 * time lets nothing through. `db` must not be inside a transaction.
 */
export async function revokeApiKey(db: Db, id: string, gate?: CommitCheck): Promise<ApiKeyInfo | undefined> {
  const [revoked] = await transactionBehind(db, gate, (tx) =>
    tx
      .update(apiKeys)
      .set({ revokedAt: sql`now()` })
      .where(and(eq(apiKeys.id, id), isNull(apiKeys.revokedAt)))
      .returning(infoColumns),
  );
  if (!revoked) {
    const [already] = await db.select(infoColumns).from(apiKeys).where(eq(apiKeys.id, id));
    return already;
  }
  const [stamped] = await bestEffortAfterCommit(
    db
      .update(apiKeys)
      .set({ revokedAt: sql`greatest(${apiKeys.revokedAt}, date_trunc('milliseconds', clock_timestamp()) + interval '1 millisecond')` })
      .where(eq(apiKeys.id, id))
      .returning(infoColumns),
  );
  return stamped ?? revoked;
}

/**
 * The first-start admin key: creates one (tenant null, scopes ['admin']) and
 * returns its plaintext, unless an unrevoked admin key is already stored, in
 * which case it returns null. An advisory lock makes nodes starting together
 * on one fresh database mint exactly one.
 */
export function createBootstrapAdminKey(db: Db): Promise<string | null> {
  return db.transaction(async (tx) => {
    await tx.execute(sql`select pg_advisory_xact_lock(hashtextextended('baton:bootstrap-admin-key', 0))`);
    const [existing] = await tx
      .select({ id: apiKeys.id })
      .from(apiKeys)
      .where(and(isNull(apiKeys.tenantId), isNull(apiKeys.revokedAt), sql`'admin' = any(${apiKeys.scopes})`))
      .limit(1);
    if (existing) return null;
    const key = mintApiKeySecret('admin');
    await tx.insert(apiKeys).values({
      id: newId('key'),
      tenantId: null,
      secretHash: hashApiKeySecret(key),
      scopes: ['admin'],
      name: 'bootstrap admin key',
      toolServer: null,
    });
    return key;
  });
}

/**
 * Revokes the generated admin key whose secret is `key`: a start that failed after minting it
 * never showed it, so nobody holds it, and the next start mints and shows a new one.
 */
export async function withdrawBootstrapAdminKey(db: Db, key: string): Promise<void> {
  await db
    .update(apiKeys)
    .set({ revokedAt: new Date() })
    .where(and(isNull(apiKeys.tenantId), isNull(apiKeys.revokedAt), eq(apiKeys.secretHash, hashApiKeySecret(key))));
}

/** Revokes every stored admin key (tenant-less, unrevoked); returns how many. */
export async function retireStoredAdminKeys(db: Db): Promise<number> {
  const retired = await db
    .update(apiKeys)
    .set({ revokedAt: new Date() })
    .where(and(isNull(apiKeys.tenantId), isNull(apiKeys.revokedAt), sql`'admin' = any(${apiKeys.scopes})`))
    .returning({ id: apiKeys.id });
  return retired.length;
}

/**
 * The key's rotation family: every key it was rotated from, and every key rotated from any of those
 * (rotated_from, both ways, siblings included): one holder's credentials over time. An id that is
 * no key (a DID) is its own lineage.
 */
export async function rotationLineage(db: Db, id: string): Promise<string[]> {
  // One definition, shared with the verify statement's approval check (migrations 0033, 0039).
  const [row] = await rows<{ ids: string[] }>(db, sql`select baton_key_lineage(${id}) as ids`);
  return row?.ids ?? [id];
}

/** Whether the key exists, is not revoked and not expired: read fresh, for paths no statement re-checks. */
export async function isApiKeyActive(db: Db, id: string): Promise<boolean> {
  const [row] = await db
    .select({ id: apiKeys.id })
    .from(apiKeys)
    .where(and(eq(apiKeys.id, id), isLive()))
    .limit(1);
  return row !== undefined;
}

export type RotateOutcome =
  | { readonly kind: 'rotated'; readonly key: string; readonly created: ApiKeyInfo; readonly previous: ApiKeyInfo }
  | { readonly kind: 'not-found' }
  /** Revoked or already expired: nothing to keep alive, create a new key instead. */
  | { readonly kind: 'not-live' }
  /** Rotated before, and that successor is live: a second one would be a live secret nobody deployed. */
  | { readonly kind: 'already-rotated'; readonly successor: string };

/**
 * Rotation without downtime, in one transaction: a new key with the old
 * one's tenant, scopes, name and tool server, and the old key's expiry
 * brought forward to now + grace (never pushed later). Admin keys (no tenant)
 * are not rotated here. The old row is locked, so two rotations of one key
 * run one after the other, and the second finds the first's successor: a key
 * with a live successor is not rotated again (rotate the successor, or revoke it first).
 *
 * An expiry already passed when the rotation committed (a grace shorter than the transaction:
 * grace 0) is written again as the database clock after the commit, for the reason revokeApiKey
 * gives: a verify that still saw the old expiry began before the commit, so its created_at is
 * earlier. Not rounded up: a verify checks expires_at > now(), and a later expiry would let one in.
 * `db` must not be inside a transaction.
 */
export async function rotateApiKey(
  db: Db,
  id: string,
  opts: { graceSeconds: number; expiresInSeconds: number | null },
  gate?: CommitCheck,
): Promise<RotateOutcome> {
  const outcome = await rotateInTransaction(db, id, opts, gate);
  // A grace of a minute or more outlasts any transaction: the expiry cannot have passed at the commit.
  if (outcome.kind !== 'rotated' || opts.graceSeconds >= 60) return outcome;
  const [stamped] = await bestEffortAfterCommit(
    db
      .update(apiKeys)
      .set({ expiresAt: sql`clock_timestamp()` })
      .where(and(eq(apiKeys.id, outcome.previous.id), sql`${apiKeys.expiresAt} < clock_timestamp()`))
      .returning(infoColumns),
  );
  return stamped ? { ...outcome, previous: stamped } : outcome;
}

/** How long a caller waits for a time written again after its change committed. */
const RESTAMP_WAIT_MS = 1_000;

/**
 * A write made after the change it refines has committed: its failure, or a database that stops
 * answering (the write is then left to finish or fail on its own), must not turn the committed
 * change into a 503 (a rotation's new secret would never reach its caller). Rows, or none.
 */
function bestEffortAfterCommit<T>(write: Promise<T[]>): Promise<T[]> {
  let timer: NodeJS.Timeout | undefined;
  const waited = new Promise<T[]>((resolve) => {
    timer = setTimeout(() => resolve([]), RESTAMP_WAIT_MS);
    timer.unref();
  });
  return Promise.race([write.catch(() => []), waited]).finally(() => clearTimeout(timer));
}

function rotateInTransaction(
  db: Db,
  id: string,
  opts: { graceSeconds: number; expiresInSeconds: number | null },
  gate: CommitCheck | undefined,
): Promise<RotateOutcome> {
  return transactionBehind(db, gate, async (tx) => {
    const [old] = await tx
      .select({ ...infoColumns, live: sql<boolean>`${isLive()}` })
      .from(apiKeys)
      .where(and(eq(apiKeys.id, id), sql`${apiKeys.tenantId} is not null`))
      .for('update');
    if (!old) return { kind: 'not-found' } as const;
    if (!old.live) return { kind: 'not-live' } as const;
    // Any live key rotated from it, directly or through a retired successor (the newest named: the
    // one to rotate instead): a second line of
    // successors would be a live key nobody deployed (and one holder on two lines, each able to
    // decide what the other asked, until baton_key_lineage reads the whole family: 0039).
    const [successor] = await rows<{ id: string }>(
      tx,
      sql`with recursive newer(id) as (
            select id from api_keys where rotated_from = ${old.id}
            union select k.id from api_keys k join newer on k.rotated_from = newer.id
          )
          select api_keys.id from api_keys join newer using (id) where ${isLive()} order by api_keys.created_at desc limit 1`,
    );
    if (successor) return { kind: 'already-rotated', successor: successor.id } as const;
    const { key, info: created } = await createTenantApiKey(tx, {
      tenantId: old.tenantId!,
      scopes: old.scopes.filter((s): s is TenantKeyScope => s !== 'admin'),
      name: old.name,
      toolServer: old.toolServer,
      expiresInSeconds: opts.expiresInSeconds,
      rotatedFrom: old.id,
    });
    const [previous] = await tx
      .update(apiKeys)
      .set({ expiresAt: sql`least(coalesce(${apiKeys.expiresAt}, 'infinity'::timestamptz), ${inSeconds(opts.graceSeconds)})` })
      .where(eq(apiKeys.id, old.id))
      .returning(infoColumns);
    if (!previous) throw new Error('rotateApiKey: the locked row vanished');
    return { kind: 'rotated', key, created, previous } as const;
  });
}

/**
 * Records a use of the key: one UPDATE that writes only when the stored time
 * is at least a minute old, so a busy key costs one write a minute across
 * all nodes (the caller also limits how often it asks, per node).
 */
export async function touchApiKeyLastUsed(db: Db, id: string): Promise<void> {
  await db
    .update(apiKeys)
    .set({ lastUsedAt: sql`now()` })
    .where(and(eq(apiKeys.id, id), or(isNull(apiKeys.lastUsedAt), sql`${apiKeys.lastUsedAt} < now() - interval '1 minute'`)));
}
