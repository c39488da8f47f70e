/**
 * The client's wire types against the service's own: checked by the type
 * checker (npx tsc --noEmit), so a field added, renamed or retyped on one
 * side and not the other fails the build. Policies are the one deliberate
 * difference: the service keeps them as Record<string, unknown>, the client
 * types them as Policy (they were validated before being stored).
 */
import { describe, expect, it } from 'vitest';
import type * as Client from '../../src/sdk/client.js';
import type * as Admin from '../../src/sdk/admin.js';
import type { ApiKeyJson, createApiKeyHandler, RootJson, TenantJson } from '../../src/service/admin.handlers.js';
import type { rotateApiKeyHandler } from '../../src/service/api-keys.handlers.js';
import type {
  chainOfDelegation,
  describeDelegation,
  DelegationView,
  SubmitResult,
  TreeNode,
  treeOfDelegation,
  UsageView,
} from '../../src/service/delegations.handlers.js';
import type {
  ActualView,
  describeInvocation,
  InvocationListItem,
  invocationsOfDelegation,
} from '../../src/service/invocations.handlers.js';
import type { issueCustodialRoot } from '../../src/service/issue.handlers.js';
import type { RevokeResult } from '../../src/service/revoke.handlers.js';
import type { Counter, VerifyResponse, Warning } from '../../src/service/verify.handlers.js';

type Result<F extends (...args: never[]) => unknown> = Awaited<ReturnType<F>>;
/** The same keys, both ways. */
type SameKeys<A, B> = [Exclude<keyof A, keyof B>, Exclude<keyof B, keyof A>] extends [never, never]
  ? true
  : { onlyIn: [Exclude<keyof A, keyof B>, Exclude<keyof B, keyof A>] };
/** Server value assignable to the client type (server -> client is what the wire carries). */
type Fits<Server, ClientT> = Server extends ClientT ? true : false;
type NoPolicy<T> = Omit<T, 'policy' | 'children'>;

type Allowed = Extract<VerifyResponse, { status: 200 }>['body'];
type Denied = Extract<VerifyResponse, { status: 403 }>['body'];

// Keys, both ways, for every response the client types.
export const sameKeys: true[] = [
  true satisfies SameKeys<DelegationView, Client.DelegationView>,
  true satisfies SameKeys<SubmitResult, Client.SubmitResult>,
  true satisfies SameKeys<SubmitResult['delegations'][number], Client.SubmitResult['delegations'][number]>,
  true satisfies SameKeys<Result<typeof describeDelegation>, Client.DelegationDetail>,
  true satisfies SameKeys<UsageView, Client.Usage>,
  true satisfies SameKeys<Result<typeof chainOfDelegation>, Client.ChainResult>,
  true satisfies SameKeys<Result<typeof chainOfDelegation>['records'][number], Client.ChainResult['records'][number]>,
  true satisfies SameKeys<Result<typeof treeOfDelegation>, Client.TreeResult>,
  true satisfies SameKeys<TreeNode, Client.TreeNode>,
  true satisfies SameKeys<Result<typeof issueCustodialRoot>, Client.IssueResult>,
  true satisfies SameKeys<Allowed, Omit<Client.VerifyAllowed, 'request_id'>>,
  true satisfies SameKeys<Denied, Omit<Client.VerifyDenied, 'request_id'>>,
  true satisfies SameKeys<ActualView, Client.ActualView>,
  true satisfies SameKeys<InvocationListItem, Client.InvocationListItem>,
  true satisfies SameKeys<Result<typeof invocationsOfDelegation>, Client.InvocationPage>,
  true satisfies SameKeys<RevokeResult, Client.RevokeResult>,
  true satisfies SameKeys<TenantJson, Client.TenantView>,
  true satisfies SameKeys<RootJson, Client.RootView>,
  // API keys with their lifecycle fields: typed in src/sdk/admin.ts.
  true satisfies SameKeys<ApiKeyJson, Admin.LifecycleApiKey>,
  true satisfies SameKeys<Result<typeof createApiKeyHandler>, Admin.CreatedLifecycleApiKey>,
  true satisfies SameKeys<Result<typeof rotateApiKeyHandler>, Admin.RotatedApiKey>,
];

// Values: what the service sends fits what the client promises.
export const fits: true[] = [
  true satisfies Fits<NoPolicy<DelegationView>, NoPolicy<Client.DelegationView>>,
  true satisfies Fits<UsageView, Client.Usage>,
  true satisfies Fits<Counter, Client.Counter>,
  true satisfies Fits<Warning, Client.LimitWarning>,
  true satisfies Fits<Omit<Allowed, 'counters' | 'warnings'>, Omit<Client.VerifyAllowed, 'request_id' | 'counters' | 'warnings'>>,
  true satisfies Fits<Denied, Omit<Client.VerifyDenied, 'request_id'>>,
  true satisfies Fits<ActualView, Client.ActualView>,
  true satisfies Fits<InvocationListItem, Client.InvocationListItem>,
  true satisfies Fits<Result<typeof invocationsOfDelegation>, Client.InvocationPage>,
  true satisfies Fits<Result<typeof describeInvocation>, Client.InvocationDetail>,
  true satisfies Fits<RevokeResult, Client.RevokeResult>,
  true satisfies Fits<TenantJson, Client.TenantView>,
  true satisfies Fits<RootJson, Client.RootView>,
  true satisfies Fits<ApiKeyJson, Admin.LifecycleApiKey>,
  true satisfies Fits<Result<typeof createApiKeyHandler>, Admin.CreatedLifecycleApiKey>,
  true satisfies Fits<Result<typeof rotateApiKeyHandler>, Admin.RotatedApiKey>,
];

describe('client wire types', () => {
  it('match the service types (enforced by tsc over this file)', () => {
    expect(sameKeys.every(Boolean) && fits.every(Boolean)).toBe(true);
  });
});
