/**
 * Prometheus text exposition, hand-rolled: a few counters and one latency
 * histogram are all Baton needs, and each node keeps its own.
 */
const BUCKETS_MS = [1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500];

function labels(obj: Record<string, string | number>): string {
  const parts = Object.entries(obj).map(([k, v]) => `${k}="${String(v).replace(/["\\\n]/g, '_')}"`);
  return parts.length ? `{${parts.join(',')}}` : '';
}

class Registry {
  private readonly requests = new Map<string, number>();
  private readonly latency = new Map<string, { buckets: number[]; sum: number; count: number }>();
  private readonly decisions = new Map<string, number>();

  observeRequest(method: string, route: string, status: number, ms: number): void {
    const key = labels({ method, route, status });
    this.requests.set(key, (this.requests.get(key) ?? 0) + 1);
    const lkey = labels({ method, route });
    const h = this.latency.get(lkey) ?? { buckets: BUCKETS_MS.map(() => 0), sum: 0, count: 0 };
    BUCKETS_MS.forEach((b, i) => {
      if (ms <= b) h.buckets[i]! += 1;
    });
    h.sum += ms;
    h.count += 1;
    this.latency.set(lkey, h);
  }

  observeDecision(outcome: 'allow' | 'deny', code: string): void {
    const key = labels({ outcome, code });
    this.decisions.set(key, (this.decisions.get(key) ?? 0) + 1);
  }

  render(): string {
    const out: string[] = [];
    out.push('# HELP baton_http_requests_total HTTP requests by method, route and status.');
    out.push('# TYPE baton_http_requests_total counter');
    for (const [k, v] of this.requests) out.push(`baton_http_requests_total${k} ${v}`);
    out.push('# HELP baton_http_request_duration_ms Request latency in milliseconds.');
    out.push('# TYPE baton_http_request_duration_ms histogram');
    for (const [k, h] of this.latency) {
      const inner = k.slice(1, -1);
      BUCKETS_MS.forEach((b, i) => out.push(`baton_http_request_duration_ms_bucket{${inner},le="${b}"} ${h.buckets[i]}`));
      out.push(`baton_http_request_duration_ms_bucket{${inner},le="+Inf"} ${h.count}`);
      out.push(`baton_http_request_duration_ms_sum${k} ${h.sum}`);
      out.push(`baton_http_request_duration_ms_count${k} ${h.count}`);
    }
    out.push('# HELP baton_verify_decisions_total Verify decisions by outcome and code.');
    out.push('# TYPE baton_verify_decisions_total counter');
    for (const [k, v] of this.decisions) out.push(`baton_verify_decisions_total${k} ${v}`);
    return `${out.join('\n')}\n`;
  }
}

export const metrics = new Registry();
