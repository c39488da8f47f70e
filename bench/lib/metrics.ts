/**
 * The service's group-commit histograms, read from its /metrics: how many
 * statements a run sent, how many verifies each decided, how many went alone,
 * and their round trips as the service saw them; its event loop's delay; and
 * the time its garbage collector paused it.
 */

import { EVENT_LOOP_SAMPLING_MS } from '../../src/service/metrics.js';

export interface GroupCommitTotals {
  readonly statements: number;
  readonly items: number;
  /** Statements that decided one verify only. */
  readonly alone: number;
  /** Sum of the statements' round trips, seconds. */
  readonly seconds: number;
}

/** The value of one series of the exposition, `name` or `name{labels}` (0 when absent: nothing observed yet). */
function sampleValue(exposition: string, series: string): number {
  const line = exposition.split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? 0 : Number(line.slice(series.length + 1));
}

/** The totals of the statements that answered (outcome "ok") in one /metrics exposition. */
export function parseGroupCommit(exposition: string): GroupCommitTotals {
  return {
    statements: sampleValue(exposition, 'baton_verify_batch_items_count{outcome="ok"}'),
    items: sampleValue(exposition, 'baton_verify_batch_items_sum{outcome="ok"}'),
    alone: sampleValue(exposition, 'baton_verify_batch_items_bucket{le="1",outcome="ok"}'),
    seconds: sampleValue(exposition, 'baton_verify_batch_duration_seconds_sum{outcome="ok"}'),
  };
}

export interface EventLoopDelay {
  /** Seconds a timer fired late (past the sampling interval), mean and 99th percentile. */
  readonly mean: number;
  readonly p99: number;
}

/**
 * prom-client's event loop delay gauges. They cover the time since the
 * previous scrape (it resets its histogram on each), so read them once right
 * before a run and once right after it.
 */
export function parseEventLoopDelay(exposition: string): EventLoopDelay {
  // The gauges are the time between samples, so an idle loop reads the sampling interval itself.
  const late = (gauge: string) => Math.max(0, sampleValue(exposition, gauge) - EVENT_LOOP_SAMPLING_MS / 1000);
  return { mean: late('nodejs_eventloop_lag_mean_seconds'), p99: late('nodejs_eventloop_lag_p99_seconds') };
}

export interface GcPauses {
  /** Garbage collections by kind (minor, major, incremental, weakcb), counted since the service started. */
  readonly count: Readonly<Record<string, number>>;
  /** Seconds the main thread spent in them, by kind. */
  readonly seconds: Readonly<Record<string, number>>;
}

/** prom-client's `nodejs_gc_duration_seconds` histogram, by kind. */
export function parseGcPauses(exposition: string): GcPauses {
  const count: Record<string, number> = {};
  const seconds: Record<string, number> = {};
  for (const line of exposition.split('\n')) {
    const m = /^nodejs_gc_duration_seconds_(sum|count)\{kind="([a-z]+)"\} (\S+)$/.exec(line);
    if (!m) continue;
    (m[1] === 'sum' ? seconds : count)[m[2]!] = Number(m[3]);
  }
  return { count, seconds };
}

/** What the collector did between two readings. */
export function gcPausesDelta(before: GcPauses, after: GcPauses): GcPauses {
  const minus = (a: Readonly<Record<string, number>>, b: Readonly<Record<string, number>>) =>
    Object.fromEntries(Object.entries(a).map(([k, v]) => [k, v - (b[k] ?? 0)]));
  return { count: minus(after.count, before.count), seconds: minus(after.seconds, before.seconds) };
}

/**
 * One scrape of a service's /metrics (read with the admin key or the metrics token): its group-commit
 * totals, its event loop delay since the last scrape, its GC pauses.
 */
export async function scrapeService(
  serviceUrl: string,
  bearer: string,
): Promise<{ batches: GroupCommitTotals; loop: EventLoopDelay; gc: GcPauses }> {
  const res = await fetch(`${serviceUrl}/metrics`, { headers: { authorization: `Bearer ${bearer}` } });
  if (!res.ok) throw new Error(`GET ${serviceUrl}/metrics answered ${res.status}`);
  const text = await res.text();
  return { batches: parseGroupCommit(text), loop: parseEventLoopDelay(text), gc: parseGcPauses(text) };
}

/** What happened between two readings. */
export function groupCommitDelta(before: GroupCommitTotals, after: GroupCommitTotals): GroupCommitTotals {
  return {
    statements: after.statements - before.statements,
    items: after.items - before.items,
    alone: after.alone - before.alone,
    seconds: after.seconds - before.seconds,
  };
}
