/**
 * The body budget's tests (test/service/body-budget*.test.ts): a real server (startServer) with a
 * small body limit and budget, and raw sockets that send a head and part of a body, then stall.
 */
import { connect, type Socket } from 'node:net';
import { startServer, type RunningServer } from '../../src/server.js';
import { silentLogger, type Logger } from '../../src/service/log.js';
import { serverConfigOf, type TestService } from './service.js';

/** A server on `svc`'s database with these body limits (and any other settings), integrating no log. */
export function startBudgetServer(
  svc: TestService,
  limits: { readonly maxBody: number; readonly budget: number },
  log: Logger = silentLogger,
  settings: Record<string, string> = {},
): Promise<RunningServer> {
  return startServer(
    serverConfigOf(svc, {
      BATON_TLOG_INTERVAL_MS: '0',
      BATON_MAX_BODY_BYTES: String(limits.maxBody),
      BATON_MAX_BODY_BUFFER_BYTES: String(limits.budget),
      ...settings,
    }),
    log,
    () => {},
  );
}

/** What a stalled sender reads back: the status, the error code and request id if an answer came whole. */
export interface StalledAnswer {
  readonly status: number;
  readonly code: string | undefined;
  readonly requestId: string | undefined;
}

/**
 * Sends `head` and `body` on a new connection to `port` and keeps it open (stalled) until the answer
 * comes or the test destroys it (every socket is pushed to `open`). Resolves with status 0 when the
 * connection closes without an answer.
 */
export function sendAndStall(port: number, open: Socket[], head: string, body = ''): Promise<StalledAnswer> {
  const socket = connect(port, '127.0.0.1');
  open.push(socket);
  let text = '';
  socket.on('error', () => {});
  socket.write(`${head}\r\n${body}`);
  return new Promise<StalledAnswer>((resolve) => {
    socket.on('data', (b: Buffer) => {
      text += b.toString('utf8');
      const end = text.indexOf('\r\n\r\n');
      const length = /content-length: (\d+)/i.exec(text)?.[1];
      if (end >= 0 && length !== undefined && text.length >= end + 4 + Number(length))
        resolve({
          status: Number(text.split(' ')[1]),
          code: /"code":"([A-Z_]+)"/.exec(text)?.[1],
          requestId: /^x-request-id: (\S+)/im.exec(text)?.[1],
        });
    });
    socket.on('close', () => resolve({ status: Number(text.split(' ')[1]) || 0, code: undefined, requestId: undefined }));
  });
}
