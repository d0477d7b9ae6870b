import type { Socket } from 'node:net';
import { READ_METHODS } from '../lib/admin-read-methods.js';
import { AdminCallError, agentUnreachable, isUnreachable, operatorError, wentAway } from './admin-call-error.js';
import { dialAdminSocket } from './dial-admin-socket.js';
import { parseHttp1Response } from './parse-http1-response.js';
import { unaryAnswer } from './unary-answer.js';

/** How long a unary call (status, adopt) may take before the agent counts as not answering. */
export const UNARY_TIMEOUT_MS = 30_000;
/** Largest answer read: a Status of a full node is a few tens of KB; a runaway one must not fill ctl's memory. */
export const MAX_ANSWER_BYTES = 16 * 1024 * 1024;

export interface UnaryCallOptions {
  timeoutMs?: number;
}

/**
 * The agent's socket did not answer in HTTP/1.1. With bytes (an HTTP/2
 * server's SETTINGS and GOAWAY), proof of an agent older than HTTP/1.1 on its
 * admin socket, which never took the request. Closed without a byte, it may
 * also be an agent that took the call and stopped before it answered.
 */
class NotHttp1 extends Error {
  constructor(readonly bytes: number) {
    super('not HTTP/1.1');
  }
}

/** The read asked to tell an HTTP/2-only agent from one that went away; it changes nothing. */
const PROBE_METHOD = 'Status';

/**
 * One unary AdminService call in the Connect protocol's JSON form: a POST
 * whose body is the request's proto JSON, answered by the response's proto
 * JSON or by an error `{code, message}`. This is the form `curl` speaks,
 * written as HTTP/1.1 on node:net on purpose: `ctl status` is typed by people
 * waiting for it, and loading the Connect and protobuf runtimes costs more
 * than Node takes to start, node:http2 (or node:http) a tenth of its cold
 * start more (bench/RESULTS.md, figure 1b). One request per connection
 * (Connection: close). An agent that answers in HTTP/2 only (started before
 * an upgrade) is asked again over HTTP/2; a write only once that agent is
 * proven not to speak HTTP/1.1 (hence never ran the first request), never
 * because the socket closed without a byte, which is also how an agent that
 * stopped while it held the call looks (ensureNeverRan). Streaming calls
 * (logs, drain) use the Connect client instead.
 */
export async function callUnaryJson<Res>(socketPath: string, method: string, request: object, opts: UnaryCallOptions = {}): Promise<Res> {
  const timeoutMs = opts.timeoutMs ?? UNARY_TIMEOUT_MS;
  try {
    const socket = await dialAdminSocket(socketPath);
    try {
      const { status, body } = await exchange(socket, socketPath, method, JSON.stringify(request), timeoutMs);
      return unaryAnswer<Res>(socketPath, method, status, body);
    } catch (err) {
      if (!(err instanceof NotHttp1)) throw err;
      if (!READ_METHODS.has(method) && err.bytes === 0) await ensureNeverRan(socketPath, method, timeoutMs);
      const { callUnaryJsonHttp2 } = await import('./call-unary-json-http2.js');
      try {
        return await callUnaryJsonHttp2<Res>(socketPath, method, request, timeoutMs);
      } catch (h2err) {
        // Closed without a byte, and then gone: an agent that stopped while it held the call (a `ctl wake` waiting
        // on its engine past the stop's grace), not one that was never there, which the first dial would have said.
        // Whether it was done is not known: "not running" read as "nothing happened" (stop9).
        if (isUnreachable(h2err)) throw wentAway(socketPath, method);
        throw h2err;
      }
    }
  } catch (err) {
    throw err instanceof AdminCallError ? operatorError(err, socketPath) : err;
  }
}

/**
 * A write whose connection closed without a byte is sent again (over HTTP/2)
 * only if the agent on the socket now does not speak HTTP/1.1 either: an
 * agent that answers a read in HTTP/1.1 could have run the write (the one
 * that took it was stopped, and a restarted one listens), and ctl must not
 * run a change twice that the operator asked for once. Throws wentAway then,
 * and when nothing answers at all.
 */
async function ensureNeverRan(socketPath: string, method: string, timeoutMs: number): Promise<void> {
  try {
    await exchange(await dialAdminSocket(socketPath), socketPath, PROBE_METHOD, '{}', timeoutMs);
  } catch (err) {
    if (err instanceof NotHttp1) return;
  }
  throw wentAway(socketPath, method);
}

/** Writes the request and reads its whole response; the socket is destroyed when it settles. */
function exchange(socket: Socket, socketPath: string, method: string, body: string, timeoutMs: number): Promise<{ status: number; body: Buffer }> {
  return new Promise((resolve, reject) => {
    const received: Buffer[] = [];
    let size = 0;
    let parsedAt = 0;
    const timer = setTimeout(() => done(() => reject(new AdminCallError('deadline_exceeded', `no answer within ${timeoutMs / 1000}s`))), timeoutMs);
    const done = (fn: () => void) => {
      clearTimeout(timer);
      socket.removeAllListeners('data');
      socket.destroy();
      fn();
    };
    const read = (ended: boolean) => {
      const data = Buffer.concat(received);
      // What an HTTP/2-only server sends to an HTTP/1.1 request: its SETTINGS and a GOAWAY, or nothing.
      const n = Math.min(HTTP1_START.length, data.length);
      if (!data.subarray(0, n).equals(HTTP1_START.subarray(0, n)) || (ended && data.length === 0)) {
        done(() => reject(new NotHttp1(data.length)));
        return;
      }
      let res: ReturnType<typeof parseHttp1Response>;
      try {
        res = parseHttp1Response(data, ended);
      } catch (err) {
        done(() => reject(agentUnreachable(socketPath, `the answer to ${method} was cut or malformed (${(err as Error).message})`)));
        return;
      }
      if (res) {
        const answer = res;
        done(() => resolve(answer));
      }
    };
    socket.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > MAX_ANSWER_BYTES) {
        done(() => reject(agentUnreachable(socketPath, `the answer to ${method} is larger than ${MAX_ANSWER_BYTES / 1024 / 1024} MiB`)));
        return;
      }
      received.push(chunk);
      // Parsed again only when the answer doubled, or this read could end it (a chunked answer ends in CRLF, a
      // JSON one in '}'): parsing at every read copied the whole answer each time, and 16 MiB took seconds.
      const last = chunk[chunk.length - 1];
      if (size >= 2 * parsedAt || last === 0x0a || last === 0x7d) {
        parsedAt = size;
        read(false);
      }
    });
    socket.once('end', () => read(true));
    // Replaces dialAdminSocket's placeholder: an error now fails the call.
    socket.removeAllListeners('error');
    socket.once('error', (err) =>
      // An HTTP/2-only agent may close before the request is written (EPIPE, ECONNRESET): HTTP/2 then says what is wrong.
      done(() => reject(size === 0 ? new NotHttp1(0) : agentUnreachable(socketPath, `the call failed (${err.message})`))),
    );
    const payload = Buffer.from(body, 'utf8');
    socket.write(
      `POST /llmgw.v1.AdminService/${method} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nConnect-Protocol-Version: 1\r\nConnect-Timeout-Ms: ${timeoutMs}\r\nContent-Length: ${payload.length}\r\nConnection: close\r\n\r\n`,
    );
    // Not end(): a half-closed connection may be closed by the agent before it answers.
    socket.write(payload);
  });
}

const HTTP1_START = Buffer.from('HTTP/', 'latin1');
