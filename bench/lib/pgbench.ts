/**
 * The pgbench ceiling: the same durable work as one allowed verify (insert
 * the invocation, two conditional counter updates, insert a service receipt), in
 * one transaction, on the same PostgreSQL, rows of the same sizes, each
 * client on its own 2-hop chain (as the HTTP scenario), prepared statements.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type postgres from 'postgres';
import { percentile } from './load.js';
import { startCpuSample } from './proc.js';

const run = promisify(execFile);

/** The hash of pgbench's DR number n (root of client c = 2c, leaf = 2c + 1). */
const hashSql = (n: string) => `'sha256:' || lpad(to_hex(${n}), 64, '0')`;

export interface PgbenchShape {
  readonly tenantId: string;
  readonly keyId: string;
  readonly kid: string;
  readonly invocationBytes: number;
  readonly serviceReceiptBytes: number;
}

/** Stores a 2-hop chain per pgbench client (up to `clients`), unlimited counters, and writes the script. */
export async function preparePgbench(sql: postgres.Sql, dir: string, s: PgbenchShape, clients: number): Promise<string> {
  await sql.unsafe(
    `insert into delegations (tenant_id, hash, jws, jti, iss, sub, aud, cmd, policy, nbf, exp, iat,
                              parent_hash, root_hash, depth, ancestors, max_calls)
     select $1, ${hashSql('g')}, repeat('x', 700), 'dr:pgbench-' || g, 'did:key:zPgbench', 'did:key:zPgbench', 'did:key:zPgbench',
            '/mcp/tools/call', '{}'::jsonb, 0, null, 0,
            case when g % 2 = 0 then null else ${hashSql('g - 1')} end, ${hashSql('g - g % 2')}, g % 2,
            case when g % 2 = 0 then '{}'::text[] else array[${hashSql('g - 1')}] end, 1000000000000000
       from generate_series(0, $2::int * 2 - 1) g order by g`,
    [s.tenantId, clients],
  );
  // No ':' before a letter inside the script's literals: pgbench would read it as a variable.
  const t = `'${s.tenantId}'`;
  const script = `\\set r random(1, 1000000000000000)
BEGIN;
INSERT INTO invocations (tenant_id, jti, hash, jws, leaf_hash, dr_chain, tool, estimated_micros, caller_key_id)
  VALUES (${t}, 'inv-pgbench-' || :client_id::text || '-' || :r::text, 'sha256:' || md5(:r::text) || md5(:client_id::text), repeat('i', ${s.invocationBytes}),
          ${hashSql(':client_id::int * 2 + 1')}, array[${hashSql(':client_id::int * 2')}, ${hashSql(':client_id::int * 2 + 1')}], 'web_search', 0, '${s.keyId}');
UPDATE delegations SET calls_used = calls_used + 1 WHERE tenant_id = ${t} AND hash = ${hashSql(':client_id::int * 2')} AND calls_used < max_calls;
UPDATE delegations SET calls_used = calls_used + 1 WHERE tenant_id = ${t} AND hash = ${hashSql(':client_id::int * 2 + 1')} AND calls_used < max_calls;
INSERT INTO receipts (tenant_id, kind, subject, jws, kid) VALUES (${t}, 'invocation.allowed', 'inv-pgbench-' || :client_id::text || '-' || :r::text, repeat('r', ${s.serviceReceiptBytes}), '${s.kid}');
END;
`;
  const file = join(dir, 'verify-work.sql');
  writeFileSync(file, script);
  return file;
}

export interface PgbenchResult {
  readonly clients: number;
  /** Seconds it ran (pgbench's -T: whole seconds). */
  readonly seconds: number;
  readonly tps: number;
  readonly latencyMs: number;
  /** Every transaction's latency in ms, sorted (from pgbench's per-transaction log). */
  readonly latencies: Float64Array;
  /** Median and 99th percentile of `latencies`. */
  readonly p50Ms: number;
  readonly p99Ms: number;
  /** Cores busy on the whole machine while it ran (pgbench's own client included). */
  readonly machineBusy: number;
  /** Cores the host took from the machine meanwhile (steal time: a run slowed from outside). */
  readonly machineSteal: number;
}

/**
 * Runs the script with `clients` clients for `seconds` (rounded to whole seconds, at least 1).
 * pgbench logs every transaction (-l) into a directory of its own, read back for percentiles,
 * so p99 at 8 in flight has a same-run floor beside it.
 */
export async function runPgbench(bin: string, url: string, script: string, clients: number, seconds: number): Promise<PgbenchResult> {
  const logDir = mkdtempSync(join(tmpdir(), 'baton-pgbench-log-'));
  const wholeSeconds = Math.max(1, Math.round(seconds));
  const machine = startCpuSample({});
  try {
    const { stdout } = await run(
      join(bin, 'pgbench'),
      [
        '-n',
        '-M',
        'prepared',
        '-f',
        script,
        '-c',
        String(clients),
        '-j',
        String(Math.min(clients, 2)),
        '-T',
        String(wholeSeconds),
        '-l',
        `--log-prefix=${join(logDir, 'tx')}`,
        url,
      ],
      { timeout: (wholeSeconds + 60) * 1000 },
    );
    const { machineBusy, machineSteal } = machine();
    const tps = /tps = ([\d.]+) \(without initial connection time\)/.exec(stdout)?.[1];
    const lat = /latency average = ([\d.]+) ms/.exec(stdout)?.[1];
    if (tps === undefined || lat === undefined) throw new Error(`pgbench output not understood:\n${stdout}`);
    const latencies = transactionLatenciesMs(logDir);
    if (latencies.length === 0) throw new Error(`pgbench wrote no per-transaction log in ${logDir}`);
    return {
      clients,
      seconds: wholeSeconds,
      tps: Number(tps),
      latencyMs: Number(lat),
      latencies,
      p50Ms: percentile(latencies, 0.5),
      p99Ms: percentile(latencies, 0.99),
      machineBusy,
      machineSteal,
    };
  } finally {
    rmSync(logDir, { recursive: true, force: true });
  }
}

/**
 * Several runs of the same client count as one: transactions and seconds added, latencies
 * merged, the mean latency and the machine's cores weighted by transactions and by seconds.
 */
export function joinPgbenchRuns(runs: readonly PgbenchResult[]): PgbenchResult {
  const first = runs[0];
  if (first === undefined) throw new Error('joinPgbenchRuns: no runs');
  const seconds = runs.reduce((n, r) => n + r.seconds, 0);
  const transactions = runs.reduce((n, r) => n + r.tps * r.seconds, 0);
  const bySeconds = (f: (r: PgbenchResult) => number) => runs.reduce((n, r) => n + f(r) * r.seconds, 0) / seconds;
  const latencies = Float64Array.from(runs.flatMap((r) => Array.from(r.latencies))).sort();
  return {
    clients: first.clients,
    seconds,
    tps: transactions / seconds,
    latencyMs: runs.reduce((n, r) => n + r.latencyMs * r.tps * r.seconds, 0) / transactions,
    latencies,
    p50Ms: percentile(latencies, 0.5),
    p99Ms: percentile(latencies, 0.99),
    machineBusy: bySeconds((r) => r.machineBusy),
    machineSteal: bySeconds((r) => r.machineSteal),
  };
}

/** Every transaction's latency from pgbench's log lines: `client_id transaction_no time_us script_no epoch us`. */
function transactionLatenciesMs(dir: string): Float64Array {
  const out: number[] = [];
  for (const name of readdirSync(dir)) {
    for (const line of readFileSync(join(dir, name), 'utf8').split('\n')) {
      const us = Number(line.split(' ')[2]);
      if (line !== '' && Number.isFinite(us)) out.push(us / 1000);
    }
  }
  return Float64Array.from(out).sort();
}
