/** What every route handler can reach: the store, configuration, the clock, signing keys. */
import type { DelegationCache } from '../protocol/chain.js';
import type { ApiKeyScope } from '../protocol/lists.js';
import type { Config } from '../config.js';
import type { Store } from '../store/db.js';
import type { Logger } from './log.js';
import type { ServiceSigner } from './signer.js';
import type { CommitGate, UploadClock } from './deadline.js';

/** Who is calling, established by auth middleware from the API key. */
export interface AuthContext {
  readonly keyId: string;
  /** null only for admin keys, which belong to no tenant. */
  readonly tenantId: string | null;
  readonly scopes: readonly ApiKeyScope[];
  /** A verify key bound to one tool server only verifies invocations naming it. */
  readonly toolServer: string | null;
  /** The request this key came with (set per request: the cached context has none), for logs. */
  readonly requestId?: string;
}

export interface ServiceDeps {
  readonly store: Store;
  readonly config: Config;
  readonly log: Logger;
  /** Unix seconds; injectable so tests control time. */
  readonly now: () => number;
  readonly signer: ServiceSigner;
  /** Encrypts custodial root keys and service keys at rest (BATON_MASTER_KEY). */
  readonly masterKey: Uint8Array;
  /** Verified DRs by hash: immutable, so shared across requests. */
  readonly drCache: DelegationCache;
}

export interface AppEnv {
  Variables: {
    requestId: string;
    auth: AuthContext;
    /** When this request stops waiting for the database (deadline.ts). */
    deadline: Date;
    /** Time spent receiving the body, which moves the deadlines on (deadline.ts). */
    upload: UploadClock;
    /** A write request's: each commit of its work passes it, and none does once it was answered 503 (deadline.ts). */
    commitGate: CommitGate | undefined;
  };
}
