/**
 * The tenant's tool document: catalog (tools) and tool settings (strict mode,
 * approval rules, default decision, approver DIDs), versioned together.
 *
 * One document, not two: a verify decision records ONE version, and that
 * version alone reproduces everything that decided it (what the tool is, and
 * which rule and which approvers applied). An approver added or a rule
 * loosened is a governance change with its own service receipt, exactly like a tool
 * declaration.
 *
 * Reads go through a short per-node cache; the verify statement re-checks
 * that the version it was decided with is still current, so a stale cache
 * costs one re-decision, never a wrong allow.
 */
import { parseCatalog, parseStoredCatalog, catalogHash, type Catalog } from '../protocol/tool-catalog.js';
import {
  DEFAULT_APPROVAL_RULES,
  DEFAULT_COST_CALIBRATION,
  parseStoredToolSettings,
  parseTenantToolSettings,
  type CostCalibrationSettings,
  type TenantToolSettings,
} from '../protocol/approval-rules.js';
import { BatonError } from '../protocol/errors.js';
import { sha256Hex } from '../protocol/hash.js';
import { canonicalJson } from '../protocol/jcs.js';
import { transactionBehind, type CommitCheck, type Db } from '../store/db.js';
import { insertServiceReceipt } from '../store/service-receipts.js';
import {
  currentToolDocument,
  currentToolDocumentVersion,
  insertToolDocument,
  lockToolCatalog,
  toolDocumentVersion,
  type StoredToolDocument,
} from '../store/tools.js';
import { signServiceReceipt } from './service-receipts.js';
import type { ServiceDeps } from './types.js';

import type { PublishToolsInput } from '../api/tools.js';

/** One version of the tool document, as stored and served. */
export interface ToolDocument {
  readonly version: number;
  readonly catalog: Catalog;
  readonly settings: TenantToolSettings;
  /** sha256 of the JCS form of {catalog (canonical), settings}. */
  readonly hash: string;
}

export interface ToolDocumentJson extends Omit<TenantToolSettings, 'webhook_url' | 'cost_calibration'> {
  webhook_url: string | null;
  cost_calibration: CostCalibrationSettings;
  /** True when the version set no cost_calibration: the defaults shown apply, and `hash` does not cover them. */
  cost_calibration_default: boolean;
  version: number;
  tools: Catalog['tools'];
  hash: string;
  catalog_hash: string;
  created_by: string;
  created_at: string;
}

/** A stored version, read as it was judged when published (the stored parsers, not the publish ones). */
function documentOf(version: number, raw: unknown): ToolDocument {
  const r = raw as Record<string, unknown>;
  const catalog = parseStoredCatalog({ version, tools: r['tools'] });
  const settings = parseStoredToolSettings({
    strict: r['strict'],
    rules: r['rules'],
    default_decision: r['default_decision'],
    approvers: r['approvers'],
    ...(r['webhook_url'] === undefined ? {} : { webhook_url: r['webhook_url'] }),
    ...(r['cost_calibration'] === undefined ? {} : { cost_calibration: r['cost_calibration'] }),
  });
  return { version, catalog, settings, hash: documentHash(catalog, settings) };
}

function documentHash(catalog: Catalog, settings: TenantToolSettings): string {
  return `sha256:${sha256Hex(canonicalJson({ catalog_hash: catalogHash(catalog), settings }))}`;
}

/**
 * Who reads a document: the admin key, which published it and sees it whole, or a tenant key, which
 * learns only that a webhook is set, and its scheme. A webhook URL is often its own credential, in
 * the path (a Slack incoming webhook) or in the host name (a Lambda function URL), and a tenant key
 * may be one tool server's verify key: with the URL it could post to the approvers' channel, forged
 * "approval pending" messages included.
 */
export type ToolDocumentReader = 'admin' | 'tenant';

/** The webhook URL as a tenant key sees it: `https://…` (or `http://…`). */
function webhookUrlForTenantKeys(url: string): string {
  return `${new URL(url).protocol}//…`;
}

export function toolDocumentJson(stored: StoredToolDocument, reader: ToolDocumentReader): ToolDocumentJson {
  const doc = documentOf(stored.version, stored.document);
  const webhook = doc.settings.webhook_url;
  return {
    version: doc.version,
    strict: doc.settings.strict,
    default_decision: doc.settings.default_decision,
    rules: doc.settings.rules,
    approvers: doc.settings.approvers,
    webhook_url: webhook === undefined ? null : reader === 'admin' ? webhook : webhookUrlForTenantKeys(webhook),
    cost_calibration: doc.settings.cost_calibration ?? DEFAULT_COST_CALIBRATION,
    // The hash covers the settings as published: say which of those shown were filled in, so that a
    // reader can recompute it (SDK toolDocumentHashes).
    cost_calibration_default: doc.settings.cost_calibration === undefined,
    tools: doc.catalog.tools,
    hash: stored.hash,
    catalog_hash: catalogHash(doc.catalog),
    created_by: stored.createdBy,
    created_at: stored.createdAt.toISOString(),
  };
}

// ---------------------------------------------------------------- cache

/** How long a node trusts its copy; the verify statement re-checks the version anyway. */
const CACHE_MS = 2_000;
const caches = new WeakMap<ServiceDeps, Map<string, { at: number; doc: ToolDocument | null }>>();
/** The newest version each tenant's document was read at on this node (versions only go up). */
const newestRead = new WeakMap<ServiceDeps, Map<string, number>>();

function cacheOf(deps: ServiceDeps) {
  let c = caches.get(deps);
  if (!c) caches.set(deps, (c = new Map()));
  return c;
}

function newestReadOf(deps: ServiceDeps) {
  let n = newestRead.get(deps);
  if (!n) newestRead.set(deps, (n = new Map()));
  return n;
}

export function forgetToolDocument(deps: ServiceDeps, tenantId: string): void {
  cacheOf(deps).delete(tenantId);
}

/** The current document (null before the first publish), through the per-node cache. */
export async function toolDocumentOf(deps: ServiceDeps, tenantId: string, fresh = false): Promise<ToolDocument | null> {
  const cache = cacheOf(deps);
  const hit = cache.get(tenantId);
  if (!fresh && hit && performance.now() - hit.at < CACHE_MS) return hit.doc;
  const stored = await currentToolDocument(deps.store.db, tenantId);
  const doc = stored === undefined ? null : documentOf(stored.version, stored.document);
  // A read that began before a publish may end after a newer one: it decides its own request (the
  // statement re-checks the version), but does not put the old version back for the node's others.
  const version = doc?.version ?? 0;
  if (version >= (newestReadOf(deps).get(tenantId) ?? 0)) {
    newestReadOf(deps).set(tenantId, version);
    cache.set(tenantId, { at: performance.now(), doc });
  }
  return doc;
}

/**
 * Inside a transaction storing delegations: takes the tenant's catalog lock (shared; a publish takes it
 * exclusive) and returns the document current under it, `judged` itself when still current (read
 * before the transaction, to keep the read out of it) or the newer version read here. Held to the
 * commit, so no version is published between this judgement and the records' commit. Called last,
 * once the records are inserted and their rows locked: a publish waiting for the lock queues every
 * later shared request behind it, so none may be held across a wait on another transaction's row.
 */
export async function toolDocumentWhileStoring(tx: Db, tenantId: string, judged: ToolDocument | null): Promise<ToolDocument | null> {
  await lockToolCatalog(tx, tenantId, 'store');
  if ((await currentToolDocumentVersion(tx, tenantId)) === (judged?.version ?? 0)) return judged;
  const stored = await currentToolDocument(tx, tenantId);
  return stored === undefined ? null : documentOf(stored.version, stored.document);
}

export async function storedToolDocument(deps: ServiceDeps, tenantId: string, version?: number): Promise<StoredToolDocument> {
  const db = deps.store.db;
  const stored = version === undefined ? await currentToolDocument(db, tenantId) : await toolDocumentVersion(db, tenantId, version);
  if (!stored) {
    if (version === undefined) {
      // Nothing is wrong with the identifier: the catalog is missing, so say how to create it.
      throw new BatonError('NOT_FOUND', {
        message: 'This tenant has not published a tool catalog yet.',
        suggestion:
          `Publish the first version with the admin key: baton tools publish <file.json> --tenant ${tenantId}, ` +
          'the file holding {"base_version": 0, "strict": ..., "tools": [...]} ' +
          `(or POST /v1/admin/tenants/${tenantId}/tools).`,
      });
    }
    throw new BatonError('NOT_FOUND', { message: `Tool catalog version ${version} does not exist.` });
  }
  return stored;
}

// ---------------------------------------------------------------- publish

/** Stores base_version + 1 with its service receipt, all or nothing; CONFLICT when the base is no longer current. */
export async function publishToolDocument(
  deps: ServiceDeps,
  tenantId: string,
  input: PublishToolsInput,
  publishedBy: string,
  gate: CommitCheck | undefined,
): Promise<StoredToolDocument> {
  const version = input.base_version + 1;
  const catalog = parseCatalog({ version, tools: input.tools });
  const settings = parseTenantToolSettings({
    strict: input.strict,
    rules: input.rules ?? [...DEFAULT_APPROVAL_RULES],
    default_decision: input.default_decision ?? 'allow',
    approvers: input.approvers ?? [],
    // Only when set: documents without a webhook keep the hash they had before webhooks existed.
    ...(input.webhook_url === undefined ? {} : { webhook_url: input.webhook_url }),
    ...(input.cost_calibration === undefined ? {} : { cost_calibration: input.cost_calibration }),
  });
  const current = await currentToolDocument(deps.store.db, tenantId);
  if ((current?.version ?? 0) !== input.base_version) throw staleBase(input.base_version, current?.version ?? 0);
  const hash = documentHash(catalog, settings);
  const document = { ...settings, tools: catalog.tools };
  const serviceReceipt = signServiceReceipt(deps.signer, {
    tenantId,
    kind: 'tools.catalog.published',
    subject: `tools:v${version}`,
    now: deps.now(),
    data: {
      version,
      hash,
      catalog_hash: catalogHash(catalog),
      tools: catalog.tools.length,
      strict: settings.strict,
      published_by: publishedBy,
    },
  });
  await transactionBehind(deps.store.db, gate, async (tx) => {
    // Waits for the submissions storing delegations under the current version, and they for this one
    // (toolDocumentWhileStoring): each record is judged under the version current when it commits.
    await lockToolCatalog(tx, tenantId, 'publish');
    // Another publish took this version since the check above: the base is stale.
    if (!(await insertToolDocument(tx, { tenantId, version, document, hash, createdBy: publishedBy })))
      throw staleBase(input.base_version, version);
    await insertServiceReceipt(tx, serviceReceipt);
  });
  forgetToolDocument(deps, tenantId);
  return storedToolDocument(deps, tenantId, version);
}

function staleBase(base: number, current: number): BatonError {
  return new BatonError('CONFLICT', {
    message: `The tool catalog is at version ${current}, not ${base}: someone published meanwhile.`,
    suggestion: 'Read the current version, apply your change to it, and publish with its version as base_version.',
    details: { base_version: base, current_version: current },
  });
}
