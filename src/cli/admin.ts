/**
 * Operator commands over the admin API, with the current context's server
 * and key (or --context/--server/--api-key): tenants, their API keys, their
 * trusted roots.
 */
import { parseCliArgs, groupHelp, runSubcommand, type Subcommand } from './args.js';
import { clientFrom, COMMON_OPTIONS, durationFlag, EXIT_HELP, listFlag, printJson, SERVER_HELP, SERVER_OPTIONS } from './common.js';
import { oneLine, UsageError, type CliIo } from './io.js';
import { TENANT_KEY_SCOPES, type TenantKeyScope } from '../protocol/lists.js';
import { adminKeys, type LifecycleApiKey } from '../sdk/admin.js';

type Values = Record<string, string | boolean | string[] | undefined>;

/**
 * One admin subcommand: parses its flags (plus the server flags, --json,
 * --help), checks the positional count, and hands the parsed values over.
 */
function adminCommand(
  path: string,
  usage: string,
  about: string,
  options: Record<string, { type: 'string' | 'boolean'; default?: boolean }>,
  optionHelp: string,
  positionals: { min: number; max: number; what: string },
  act: (values: Values, args: string[], io: CliIo, help: string) => Promise<number>,
): Subcommand & { help: string } {
  const help = `Usage: baton ${path} ${usage}

${about}

Options:
${optionHelp ? `${optionHelp}\n` : ''}  --json               print the service's answer
  -h, --help           show this help

${SERVER_HELP}

${EXIT_HELP}`;
  return {
    help,
    summary: about.split('\n')[0]!.replace(/\.$/, ''),
    run: async (argv, io) => {
      const parsed = parseCliArgs(path, {
        args: argv,
        allowPositionals: true,
        options: { ...options, ...SERVER_OPTIONS, ...COMMON_OPTIONS },
      });
      const values = parsed.values as Values;
      if (values['help']) {
        io.out(help);
        return 0;
      }
      const args = parsed.positionals;
      if (args.length < positionals.min) throw new UsageError(`give ${positionals.what}`, help);
      if (args.length > positionals.max) throw new UsageError(`unexpected argument "${args[positionals.max]}"`, help);
      return act(values, args, io, help);
    },
  };
}

const str = (v: Values[string]): string | undefined => (typeof v === 'string' ? v : undefined);

function requireTenantFlag(values: Values, help: string): string {
  const tenant = str(values['tenant']);
  if (!tenant) throw new UsageError('give --tenant <id> (baton tenants list shows them)', help);
  return tenant;
}

const clientOf = (values: Values, io: CliIo) => clientFrom(values as Parameters<typeof clientFrom>[0], io);

// ---------------------------------------------------------------- tenants

const tenantsCreate = adminCommand(
  'tenants create',
  '<name> [options]',
  'Creates a tenant.\nThen trust its root key (baton roots add) and give it API keys (baton keys create).',
  {},
  '',
  { min: 1, max: 1, what: 'the tenant name' },
  async (values, [name], io) => {
    const tenant = await clientOf(values, io).admin.createTenant(name!);
    if (values['json']) printJson(io, tenant);
    else io.out(oneLine(`CREATED: tenant ${tenant.id} "${tenant.name}"`));
    return 0;
  },
);

const tenantsList = adminCommand(
  'tenants list',
  '[options]',
  'Lists every tenant.',
  {},
  '',
  { min: 0, max: 0, what: '' },
  async (values, _args, io) => {
    const { tenants } = await clientOf(values, io).admin.listTenants();
    if (values['json']) printJson(io, { tenants });
    else if (tenants.length === 0) io.out('No tenants yet: baton tenants create <name>');
    else for (const t of tenants) io.out(oneLine(`${t.id}  ${t.created_at}  ${t.name}`));
    return 0;
  },
);

const TENANTS: Record<string, Subcommand> = { create: tenantsCreate, list: tenantsList };
const TENANTS_HELP = groupHelp('tenants', 'Tenants (the admin key).', TENANTS, EXIT_HELP);

export function runTenants(argv: string[], io: CliIo): Promise<number> {
  return runSubcommand('tenants', argv, io, TENANTS, TENANTS_HELP);
}

// ---------------------------------------------------------------- API keys

function keyLine(k: LifecycleApiKey): string {
  const state =
    k.revoked_at !== null
      ? `revoked ${k.revoked_at}`
      : k.expires_at
        ? `${Date.parse(k.expires_at) <= Date.now() ? 'expired' : 'expires'} ${k.expires_at}`
        : 'active';
  return [
    k.id,
    `[${k.scopes.join(',')}]`,
    state,
    `last used ${k.last_used_at ?? 'never'}`,
    ...(k.name ? [`"${k.name}"`] : []),
    ...(k.tool_server ? [`tool server ${k.tool_server}`] : []),
    ...(k.rotated_from ? [`replaces ${k.rotated_from}`] : []),
  ]
    .map(oneLine)
    .join('  ');
}

const keysCreate = adminCommand(
  'keys create',
  '--tenant <id> --scopes <list> [options]',
  'Creates an API key for a tenant.\nThe secret is printed once: store it now (Baton keeps only its hash).',
  {
    tenant: { type: 'string' },
    scopes: { type: 'string' },
    name: { type: 'string' },
    'tool-server': { type: 'string' },
    'expires-in': { type: 'string' },
  },
  `  --tenant <id>        the tenant
  --scopes <list>      comma-separated: ${TENANT_KEY_SCOPES.join(', ')}
  --name <text>        a label for the key
  --tool-server <uri>  bind a verify or report key to invocations naming this tool server
  --expires-in <dur>   the key stops working after this long (3600, 30m, 12h, 90d)`,
  { min: 0, max: 0, what: '' },
  async (values, _args, io, help) => {
    const tenant = requireTenantFlag(values, help);
    const scopes = listFlag(str(values['scopes']) ?? '');
    if (scopes.length === 0) throw new UsageError(`give --scopes, some of ${TENANT_KEY_SCOPES.join(', ')}`, help);
    const unknown = scopes.find((s) => !(TENANT_KEY_SCOPES as readonly string[]).includes(s));
    if (unknown !== undefined) throw new UsageError(`unknown scope "${unknown}": the scopes are ${TENANT_KEY_SCOPES.join(', ')}`, help);
    const expiresIn = str(values['expires-in']);
    const created = await adminKeys(clientOf(values, io)).create(tenant, {
      scopes: scopes as TenantKeyScope[],
      ...(str(values['name']) !== undefined ? { name: str(values['name'])! } : {}),
      ...(str(values['tool-server']) !== undefined ? { tool_server: str(values['tool-server'])! } : {}),
      ...(expiresIn !== undefined ? { expires_in_seconds: durationFlag('--expires-in', expiresIn) } : {}),
    });
    if (values['json']) {
      printJson(io, created);
      return 0;
    }
    // Each line holds the service's text: kept on its one line (as keyLine's are).
    [
      `CREATED: API key ${created.id} for tenant ${created.tenant_id} [${created.scopes.join(',')}]`,
      ...(created.expires_at ? [`  expires  ${created.expires_at}`] : []),
      `  key      ${created.key}`,
    ]
      .map(oneLine)
      .forEach((l) => io.out(l));
    io.err('The key is shown this once: store it now.');
    return 0;
  },
);

const keysList = adminCommand(
  'keys list',
  '--tenant <id> [options]',
  "Lists a tenant's API keys (never their secrets), revoked and expired ones too.",
  { tenant: { type: 'string' } },
  '  --tenant <id>        the tenant',
  { min: 0, max: 0, what: '' },
  async (values, _args, io, help) => {
    const { api_keys } = await adminKeys(clientOf(values, io)).list(requireTenantFlag(values, help));
    if (values['json']) printJson(io, { api_keys });
    else if (api_keys.length === 0) io.out('No API keys: baton keys create --tenant <id> --scopes verify');
    else for (const k of api_keys) io.out(keyLine(k));
    return 0;
  },
);

const keysRevoke = adminCommand(
  'keys revoke',
  '<key-id> [options]',
  'Revokes an API key at once (revoking again is harmless).\nTo replace a key without downtime, use baton keys rotate instead.',
  {},
  '',
  { min: 1, max: 1, what: 'the key id (baton keys list shows them)' },
  async (values, [id], io) => {
    await clientOf(values, io).admin.revokeApiKey(id!);
    if (values['json']) printJson(io, { id, revoked: true });
    else io.out(`REVOKED: API key ${id}`);
    return 0;
  },
);

const keysRotate = adminCommand(
  'keys rotate',
  '<key-id> [--grace <dur>] [--expires-in <dur>] [options]',
  'Replaces an API key without downtime.\nThe new key has the same tenant, scopes, name and tool server; the old one\nkeeps working for the grace period (default 24h) and then expires. Deploy the\nnew key within that window.',
  { grace: { type: 'string' }, 'expires-in': { type: 'string' } },
  `  --grace <dur>        how long the old key stays valid (0 to 30d; default 24h)
  --expires-in <dur>   the new key expires after this long (default: never)`,
  { min: 1, max: 1, what: 'the key id to rotate (baton keys list shows them)' },
  async (values, [id], io) => {
    const grace = str(values['grace']);
    const expiresIn = str(values['expires-in']);
    const rotated = await adminKeys(clientOf(values, io)).rotate(id!, {
      ...(grace !== undefined ? { grace_seconds: grace === '0' ? 0 : durationFlag('--grace', grace) } : {}),
      ...(expiresIn !== undefined ? { expires_in_seconds: durationFlag('--expires-in', expiresIn) } : {}),
    });
    if (values['json']) {
      printJson(io, rotated);
      return 0;
    }
    [
      `ROTATED: ${rotated.previous.id} -> ${rotated.key.id} [${rotated.key.scopes.join(',')}]`,
      `  old key valid until  ${rotated.previous.expires_at}`,
      ...(rotated.key.expires_at ? [`  new key expires      ${rotated.key.expires_at}`] : []),
      `  new key              ${rotated.key.key}`,
    ]
      .map(oneLine)
      .forEach((l) => io.out(l));
    io.err('The new key is shown this once: store it now, and deploy it before the old one expires.');
    return 0;
  },
);

const KEYS: Record<string, Subcommand> = { create: keysCreate, list: keysList, revoke: keysRevoke, rotate: keysRotate };
const KEYS_HELP = groupHelp('keys', "Tenants' API keys (the admin key): create, list, rotate, revoke.", KEYS, EXIT_HELP);

export function runKeys(argv: string[], io: CliIo): Promise<number> {
  return runSubcommand('keys', argv, io, KEYS, KEYS_HELP);
}

// ---------------------------------------------------------------- trusted roots

const rootsAdd = adminCommand(
  'roots add',
  '<did:key> --tenant <id> [--label <text>] [options]',
  'Trusts a root did:key for a tenant (adding it again is harmless).\nDelegations rooted in it belong to that tenant, so a DID is the root of one tenant only:\none another tenant trusts is refused (409).',
  { tenant: { type: 'string' }, label: { type: 'string' } },
  `  --tenant <id>        the tenant
  --label <text>       what the root is (e.g. "ops signing key")`,
  { min: 1, max: 1, what: 'the root did:key (baton keygen prints it)' },
  async (values, [did], io, help) => {
    const label = str(values['label']);
    const root = await clientOf(values, io).admin.addRoot(requireTenantFlag(values, help), did!, label);
    if (values['json']) printJson(io, root);
    else io.out(oneLine(`TRUSTED: ${root.did} for tenant ${root.tenant_id}${root.label ? ` "${root.label}"` : ''}`));
    return 0;
  },
);

const rootsList = adminCommand(
  'roots list',
  '--tenant <id> [options]',
  "Lists a tenant's trusted root DIDs.",
  { tenant: { type: 'string' } },
  '  --tenant <id>        the tenant',
  { min: 0, max: 0, what: '' },
  async (values, _args, io, help) => {
    const { roots } = await clientOf(values, io).admin.listRoots(requireTenantFlag(values, help));
    if (values['json']) printJson(io, { roots });
    else if (roots.length === 0) io.out('No trusted roots: baton roots add <did:key> --tenant <id>');
    else for (const r of roots) io.out(oneLine(`${r.did}  ${r.created_at}${r.label ? `  "${r.label}"` : ''}`));
    return 0;
  },
);

const rootsRemove = adminCommand(
  'roots remove',
  '<did:key> --tenant <id> [options]',
  'Stops trusting a root DID: verifies of chains rooted in it are denied from now on.',
  { tenant: { type: 'string' } },
  '  --tenant <id>        the tenant',
  { min: 1, max: 1, what: 'the root did:key' },
  async (values, [did], io, help) => {
    const tenant = requireTenantFlag(values, help);
    await clientOf(values, io).admin.removeRoot(tenant, did!);
    if (values['json']) printJson(io, { tenant_id: tenant, did, removed: true });
    else io.out(`REMOVED: ${did} is no longer trusted by tenant ${tenant}`);
    return 0;
  },
);

const ROOTS: Record<string, Subcommand> = { add: rootsAdd, list: rootsList, remove: rootsRemove };
const ROOTS_HELP = groupHelp('roots', "Tenants' trusted root DIDs (the admin key).", ROOTS, EXIT_HELP);

export function runRoots(argv: string[], io: CliIo): Promise<number> {
  return runSubcommand('roots', argv, io, ROOTS, ROOTS_HELP);
}
