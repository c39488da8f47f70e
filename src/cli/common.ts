/**
 * What the online commands share: server flags and the client, and the one
 * way refusals are shown and turned into exit codes. Everything that needs
 * no server is in basics.ts (re-exported here for the online commands).
 */
import { ERROR_TABLE, BatonError, errorBody, isErrorCode, isMalformed, requirementText, type ErrorBody } from '../protocol/errors.js';
import { BatonApiError, BatonClient } from '../sdk/client.js';
import { DEFAULT_SERVER, integerFlag, type ServerValues } from './basics.js';
import { resolveTarget } from './context.js';
import { EXIT_DENIED, EXIT_UNREACHABLE, EXIT_USAGE, printableLines, printedItems, UsageError, type CliIo } from './io.js';

export * from './basics.js';

export function clientFrom(values: ServerValues, io: CliIo): BatonClient {
  const { server: baseUrl, serverFrom, apiKey, keyWithheld, envSetAside } = resolveTarget(values, io, DEFAULT_SERVER);
  const timeoutMs = values.timeout !== undefined ? integerFlag('--timeout', values.timeout, 1) : undefined;
  let client: BatonClient;
  try {
    client = new BatonClient({ baseUrl, ...(apiKey ? { apiKey } : {}), ...(timeoutMs !== undefined ? { timeoutMs } : {}) });
  } catch (e) {
    throw new UsageError(`${serverFrom}: ${(e as Error).message}`);
  }
  // Said before any request: a refusal for want of a key then explains itself.
  if (keyWithheld !== undefined) io.err(`note: ${keyWithheld}`);
  if (envSetAside !== undefined) io.err(`note: ${envSetAside}`);
  return client;
}

// ---------------------------------------------------------------- refusals and exit codes

export function exitCodeFor(e: BatonApiError | BatonError): number {
  if (e instanceof BatonApiError) {
    if (e.status === 0 || e.status >= 500 || e.code === 'UNEXPECTED_RESPONSE') return EXIT_UNREACHABLE;
    if (e.status === 400 || e.status === 413) return EXIT_USAGE;
    return EXIT_DENIED;
  }
  // Checked locally: input that is not well-formed is unusable (exit 2), not a refusal.
  return isMalformed(e.code) ? EXIT_USAGE : EXIT_DENIED;
}

/**
 * The error envelope the service sends, for --json; when the service
 * answered, its HTTP status joins it and the request id is the service's.
 */
export function errorJson(e: BatonApiError | BatonError): { error: ErrorBody<string>; status?: number; request_id?: string } {
  const error = errorBody({ ...refusalOf(e), code: e.code });
  if (!(e instanceof BatonApiError)) return { error };
  return { error, ...(e.status ? { status: e.status } : {}), ...(e.requestId ? { request_id: e.requestId } : {}) };
}

/** The parts of a refusal both error types carry. */
function refusalOf(e: BatonApiError | BatonError) {
  return {
    code: e.code as string,
    block: e.block,
    message: e.message,
    suggestion: e.suggestion ?? '',
    details: e.details,
    violations: e.violations,
  };
}

/** A person-readable refusal: what, every unmet condition, what to do, and the request id. */
export function explainRefusal(
  e: BatonApiError | BatonError,
  action: string,
  /** The closing line of a refusal found on this machine; an online command found it in what it read. */
  foundLocally = 'Checked locally with the rules the service applies: nothing was signed or sent.',
): string {
  const r = refusalOf(e);
  const status = e instanceof BatonApiError && e.status ? e.status : undefined;
  const requestId = e instanceof BatonApiError ? e.requestId : undefined;
  const exit = exitCodeFor(e);
  const head = exit === EXIT_UNREACHABLE ? 'FAILED' : exit === EXIT_USAGE ? 'UNUSABLE INPUT' : 'REFUSED';
  const lines = [
    `${head}: ${action}: ${r.code}${r.block ? ` (block ${r.block})` : ''}${status ? ` [HTTP ${status}]` : ''}`,
    `  ${r.message}`,
  ];
  if (r.violations.length > 0) {
    lines.push('', `Unmet conditions (${r.violations.length}):`);
    lines.push(
      ...printedItems(r.violations, (v, i) => {
        const where = v.dr_index === undefined ? '' : ` at receipts[${v.dr_index}]`;
        return [`  ${i + 1}. ${v.code}${where}, ${v.field}${requirementText(v)}`, ...(v.message ? [`     ${v.message}`] : [])];
      }),
    );
  }
  const issues = r.details?.['issues'];
  if (Array.isArray(issues) && issues.length > 0) {
    lines.push('', 'Problems:');
    for (const issue of issues.slice(0, 20) as { field?: string; path?: string; message?: string }[]) {
      lines.push(`  - ${issue.field ?? issue.path ?? '(body)'}: ${issue.message ?? ''}`);
    }
  }
  const suggestions = new Set<string>();
  if (r.suggestion) suggestions.add(r.suggestion);
  // Advice the service wrote for this refusal replaces its code's own (a call held behind a grant is
  // not told to wait for an approval the answer does not name); the other codes' advice is added.
  const replaced = isErrorCode(r.code) && r.suggestion !== undefined && r.suggestion !== ERROR_TABLE[r.code].suggestion;
  for (const v of r.violations) {
    if (isErrorCode(v.code) && !(replaced && v.code === r.code)) suggestions.add(ERROR_TABLE[v.code].suggestion);
  }
  if (suggestions.size > 0) lines.push('', 'What to do:', ...[...suggestions].map((s) => `  - ${s}`));
  if (e instanceof BatonError) lines.push('', foundLocally);
  if (requestId) lines.push('', `Request id: ${requestId} (quote it to the operator)`);
  // Each line holds the service's text (or a proxy's): kept on its one line and cut (printableLines).
  return printableLines(lines);
}
