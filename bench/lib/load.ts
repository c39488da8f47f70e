/**
 * The load generator: a fixed number of in-flight POSTs over keep-alive
 * connections, each worker sending its own pre-serialised bodies back to
 * back (closed loop), latency per request recorded in a typed array.
 *
 * The generator shares 2 cores with the service and PostgreSQL, so its own
 * CPU per request takes throughput from what it measures (pgbench, the
 * ceiling, is a lean C client). The default client is therefore `raw`: one
 * TCP socket per worker, each request written as one pre-built buffer, and
 * only the status line and the framing (Content-Length or chunked) of the
 * answer parsed. `BENCH_CLIENT=http` uses node:http with a keep-alive Agent,
 * `BENCH_CLIENT=fetch` the built-in fetch (undici); every phase prints the
 * generator's CPU per request.
 */
import { Agent, request } from 'node:http';
import { connect, type Socket } from 'node:net';

const CLIENT_KINDS = ['raw', 'http', 'fetch'] as const;
export type ClientKind = (typeof CLIENT_KINDS)[number];

const isClientKind = (v: string): v is ClientKind => (CLIENT_KINDS as readonly string[]).includes(v);

/** The client of every phase: BENCH_CLIENT, else `raw`. */
export function clientFromEnv(): ClientKind {
  const v = process.env['BENCH_CLIENT'] ?? 'raw';
  if (!isClientKind(v)) throw new Error(`BENCH_CLIENT must be one of ${CLIENT_KINDS.join(', ')}; got "${v}"`);
  return v;
}

export interface LoadOptions {
  readonly url: string; // http://127.0.0.1:port
  readonly path: string;
  readonly headers: Record<string, string>;
  /** One array of bodies per worker; its length is the number of in-flight requests. */
  readonly bodies: readonly (readonly Buffer[])[];
  readonly seconds: number;
  readonly client: ClientKind;
  /** Status that counts as success (default 200). */
  readonly okStatus?: number;
  /** Per worker, the index of its next unused body; read at the start, advanced at the end (interleaved rounds). */
  readonly cursors?: number[];
}

export interface LoadResult {
  readonly requests: number;
  readonly ok: number;
  readonly statuses: Record<number, number>;
  readonly firstError: string | undefined;
  readonly seconds: number;
  /** Sorted latencies of successful requests, milliseconds. */
  readonly latencies: Float64Array;
  /** CPU the generator process itself used during the run (user+system), microseconds. */
  readonly clientCpuUs: number;
  /** True if a worker ran out of pre-signed bodies before the deadline (the run stopped there). */
  readonly exhausted: boolean;
}

interface Reply {
  status: number;
  body: Buffer | undefined;
}

function httpSender(url: string, path: string, headers: Record<string, string>, sockets: number) {
  const u = new URL(url);
  const agent = new Agent({ keepAlive: true, maxSockets: sockets, maxFreeSockets: sockets });
  const send = (body: Buffer, keepBody: boolean) =>
    new Promise<Reply>((resolve, reject) => {
      const req = request(
        {
          agent,
          host: u.hostname,
          port: Number(u.port),
          path,
          method: 'POST',
          headers: { ...headers, 'content-length': String(body.length) },
        },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => {
            if (keepBody) chunks.push(c);
          });
          res.on('end', () => resolve({ status: res.statusCode ?? 0, body: keepBody ? Buffer.concat(chunks) : undefined }));
          res.on('error', reject);
        },
      );
      req.on('error', reject);
      req.end(body);
    });
  return { send, close: () => agent.destroy() };
}

/**
 * One keep-alive socket per worker, used by one request at a time (closed
 * loop). The request is the header block and the body in one buffer; the
 * answer is framed by Content-Length or chunked encoding, anything else
 * (a close-delimited body, a 1xx) is an error of the bench.
 */
function rawSender(url: string, path: string, headers: Record<string, string>) {
  const u = new URL(url);
  const head = `POST ${path} HTTP/1.1\r\nhost: ${u.host}\r\nconnection: keep-alive\r\n${Object.entries(headers)
    .map(([k, v]) => `${k}: ${v}\r\n`)
    .join('')}`;
  const idle: Socket[] = [];
  const all = new Set<Socket>();
  const open = () =>
    new Promise<Socket>((resolve, reject) => {
      const s = connect({ host: u.hostname, port: Number(u.port), noDelay: true }, () => resolve(s));
      s.once('error', reject);
      // Closed while idle (the server's keep-alive timeout): never handed out again.
      s.on('error', () => {});
      s.on('close', () => {
        const i = idle.indexOf(s);
        if (i >= 0) idle.splice(i, 1);
        all.delete(s);
      });
      all.add(s);
    });
  const send = async (body: Buffer, keepBody: boolean): Promise<Reply> => {
    const socket = idle.pop() ?? (await open());
    return new Promise<Reply>((resolve, reject) => {
      let buf: Buffer = Buffer.alloc(0);
      let status = 0;
      let bodyStart = -1;
      let length = -1; // Content-Length, or -1 while chunked
      let chunked = false;
      const finish = (reply: Reply) => {
        socket.off('data', onData);
        socket.off('error', onError);
        socket.off('close', onClose);
        idle.push(socket);
        resolve(reply);
      };
      const fail = (e: Error) => {
        socket.off('data', onData);
        all.delete(socket);
        socket.destroy();
        reject(e);
      };
      const onError = (e: Error) => fail(e);
      const onClose = () => fail(new Error('connection closed before the answer ended'));
      const onData = (c: Buffer) => {
        buf = buf.length === 0 ? c : Buffer.concat([buf, c]);
        if (bodyStart < 0) {
          const end = buf.indexOf('\r\n\r\n');
          if (end < 0) return;
          const lines = buf.subarray(0, end).toString('latin1').split('\r\n');
          status = Number(lines[0]!.split(' ')[1]);
          for (const l of lines.slice(1)) {
            const colon = l.indexOf(':');
            const name = l.slice(0, colon).trim().toLowerCase();
            const value = l.slice(colon + 1).trim();
            if (name === 'content-length') length = Number(value);
            else if (name === 'transfer-encoding' && value.toLowerCase().includes('chunked')) chunked = true;
          }
          if (!chunked && length < 0) return fail(new Error(`HTTP ${status} answer without Content-Length or chunked encoding`));
          bodyStart = end + 4;
        }
        if (!chunked) {
          if (buf.length - bodyStart < length) return;
          return finish({ status, body: keepBody ? buf.subarray(bodyStart, bodyStart + length) : undefined });
        }
        // Chunked: walk the chunks present; done at the zero-size chunk and its final CRLF.
        const parts: Buffer[] = [];
        let at = bodyStart;
        for (;;) {
          const eol = buf.indexOf('\r\n', at);
          if (eol < 0) return;
          const size = parseInt(buf.subarray(at, eol).toString('latin1'), 16);
          if (Number.isNaN(size)) return fail(new Error('bad chunk size in answer'));
          if (size === 0) {
            if (buf.length < eol + 4) return;
            return finish({ status, body: keepBody ? Buffer.concat(parts) : undefined });
          }
          if (buf.length < eol + 2 + size + 2) return;
          parts.push(buf.subarray(eol + 2, eol + 2 + size));
          at = eol + 2 + size + 2;
        }
      };
      socket.on('data', onData);
      socket.on('error', onError);
      socket.on('close', onClose);
      socket.write(Buffer.concat([Buffer.from(`${head}content-length: ${body.length}\r\n\r\n`, 'latin1'), body]));
    });
  };
  return {
    send,
    close: () => {
      for (const s of all) s.destroy();
    },
  };
}

function fetchSender(url: string, path: string, headers: Record<string, string>) {
  const target = `${url}${path}`;
  const send = async (body: Buffer, keepBody: boolean): Promise<Reply> => {
    const res = await fetch(target, { method: 'POST', headers, body });
    const buf = Buffer.from(await res.arrayBuffer());
    return { status: res.status, body: keepBody ? buf : undefined };
  };
  return { send, close: () => {} };
}

/** p in [0, 1] over a sorted array (nearest rank). */
export function percentile(sorted: Float64Array, p: number): number {
  if (sorted.length === 0) return NaN;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil(p * sorted.length) - 1));
  return sorted[i]!;
}

export async function runLoad(o: LoadOptions): Promise<LoadResult> {
  const okStatus = o.okStatus ?? 200;
  const total = o.bodies.reduce((n, b) => n + b.length, 0);
  const lat = new Float64Array(total);
  let done = 0;
  let ok = 0;
  const statuses: Record<number, number> = {};
  let firstError: string | undefined;
  let exhausted = false;
  let stop = false;
  const sender =
    o.client === 'fetch'
      ? fetchSender(o.url, o.path, o.headers)
      : o.client === 'http'
        ? httpSender(o.url, o.path, o.headers, o.bodies.length)
        : rawSender(o.url, o.path, o.headers);

  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  const deadline = t0 + o.seconds * 1000;
  let tEnd = 0;
  const timer = setTimeout(() => {
    stop = true;
  }, o.seconds * 1000);

  const worker = async (mine: readonly Buffer[], w: number) => {
    for (let i = o.cursors?.[w] ?? 0; !stop; i++) {
      if (o.cursors) o.cursors[w] = i + 1;
      const body = mine[i];
      if (body === undefined) {
        exhausted = true;
        stop = true;
        break;
      }
      const start = performance.now();
      let reply: Reply;
      try {
        reply = await sender.send(body, firstError === undefined);
      } catch (e) {
        // The server is gone (or broke the connection): end the run here rather
        // than burn the pre-signed pool in a tight loop of refused connections.
        statuses[0] = (statuses[0] ?? 0) + 1;
        firstError ??= `transport error: ${e instanceof Error ? e.message : String(e)}`;
        done++;
        stop = true;
        break;
      }
      const end = performance.now();
      // A request that completes after the deadline still counted its work, but
      // the throughput window is the deadline (or the moment a worker ran dry).
      done++;
      statuses[reply.status] = (statuses[reply.status] ?? 0) + 1;
      if (reply.status === okStatus) {
        lat[ok++] = end - start;
      } else if (firstError === undefined) {
        firstError = `HTTP ${reply.status}: ${reply.body?.toString('utf8').slice(0, 400) ?? ''}`;
      }
      if (end >= deadline) break;
    }
    tEnd = Math.max(tEnd, performance.now());
  };
  await Promise.all(o.bodies.map((b, w) => worker(b, w)));
  clearTimeout(timer);
  const cpu = process.cpuUsage(cpu0);
  sender.close();
  const seconds = (tEnd - t0) / 1000; // the last in-flight request after the deadline included
  const latencies = lat.slice(0, ok).sort();
  return { requests: done, ok, statuses, firstError, seconds, latencies, clientCpuUs: cpu.user + cpu.system, exhausted };
}

/** The same closed loop over an async operation instead of HTTP (the SQL ceiling): `workers` loops, no body list. */
export async function runClosedLoop(
  workers: number,
  seconds: number,
  op: (worker: number) => Promise<boolean>,
): Promise<{
  requests: number;
  ok: number;
  failed: number;
  firstError: string | undefined;
  seconds: number;
  latencies: Float64Array;
  clientCpuUs: number;
}> {
  const lat: number[] = [];
  let done = 0;
  let failed = 0;
  let firstError: string | undefined;
  let stop = false;
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  let tEnd = 0;
  const timer = setTimeout(() => {
    stop = true;
  }, seconds * 1000);
  const worker = async (w: number) => {
    while (!stop) {
      const start = performance.now();
      try {
        const good = await op(w);
        done++;
        if (good) lat.push(performance.now() - start);
        else failed++;
      } catch (e) {
        done++;
        failed++;
        firstError ??= e instanceof Error ? e.message : String(e);
      }
    }
    tEnd = Math.max(tEnd, performance.now());
  };
  await Promise.all(Array.from({ length: workers }, (_, w) => worker(w)));
  clearTimeout(timer);
  const cpu = process.cpuUsage(cpu0);
  return {
    requests: done,
    ok: lat.length,
    failed,
    firstError,
    seconds: (tEnd - t0) / 1000,
    latencies: Float64Array.from(lat).sort(),
    clientCpuUs: cpu.user + cpu.system,
  };
}

/**
 * Bodies signed per verify the service made per second in the warm-up. A closed loop cannot be
 * told to slow down, and a worker that runs out of pre-signed bodies ends its phase: on a machine
 * three times faster than the one the old fixed rate was set on, every phase ended early.
 */
export const BODY_MARGIN = 2;

/**
 * Bodies each of `workers` closed-loop workers needs for `seconds` at `rps` verifies/s in all
 * (with the margin), one worker's share capped at `workerCap` per second, plus a few spare.
 */
export function bodiesPerWorker(rps: number, workers: number, seconds: number, workerCap = Number.POSITIVE_INFINITY): number {
  if (!(rps > 0) || !(workers > 0) || !(seconds > 0))
    throw new Error(`bodiesPerWorker: rps, workers and seconds must be positive (${rps}, ${workers}, ${seconds})`);
  return Math.ceil(Math.min((BODY_MARGIN * rps) / workers, workerCap) * seconds) + 50;
}

export interface WarmUp {
  /** The fastest rate a warm-up round measured (answers of the expected status per second). */
  readonly rps: number;
  readonly rounds: readonly LoadResult[];
}

/**
 * Load for `seconds`, not measured, in rounds of at most `roundSeconds`: each round signs bodies
 * for the rate the previous one measured (the first for `startRps`) and is run by `run`. Returns
 * the fastest rate seen, for sizing the measured phases' bodies.
 */
export async function warmUpMeasuringRate(o: {
  readonly seconds: number;
  readonly startRps: number;
  readonly workers: number;
  readonly roundSeconds?: number;
  readonly sign: (perWorker: number) => readonly (readonly Buffer[])[];
  readonly run: (bodies: readonly (readonly Buffer[])[], seconds: number) => Promise<LoadResult>;
}): Promise<WarmUp> {
  const roundSeconds = o.roundSeconds ?? 5;
  const rounds: LoadResult[] = [];
  let best = 0;
  for (let left = o.seconds; left > 0.05;) {
    const s = Math.min(roundSeconds, left);
    const r = await o.run(o.sign(bodiesPerWorker(Math.max(o.startRps, best), o.workers, s)), s);
    if (r.ok === 0) throw new Error(`warm-up: no request answered as expected (${r.firstError ?? 'no answer'})`);
    rounds.push(r);
    // A round that ran dry still measured its rate over the time it ran.
    best = Math.max(best, r.ok / r.seconds);
    left -= r.exhausted ? Math.min(s, r.seconds) : s;
  }
  return { rps: best, rounds };
}
