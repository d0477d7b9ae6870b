import { request as httpRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { connect } from 'node:net';
import { errorMessage } from '../../lib/errors.js';
import { parseEndpoint } from '../../lib/gang-problems.js';
import { type GangAnswer, MAX_ANSWER_BYTES, parseGangAnswer } from './gang-answer.js';
import type { GangTls } from './gang-tls.js';

/** What a peer's agent said of a gang, or why it said nothing usable (one line). */
export type PeerReply = { ok: true; answer: GangAnswer } | { ok: false; why: string };

/**
 * Asks the agent at `endpoint` for its ranks of gang `gangId`, within
 * `timeoutMs` (a hung peer is an unreachable one). With TLS the peer must
 * show a certificate of the fleet's CA, and is shown this agent's.
 */
export function askPeer(endpoint: string, gangId: string, timeoutMs: number, tls?: GangTls): Promise<PeerReply> {
  const where = parseEndpoint(endpoint);
  if (!where) return Promise.resolve({ ok: false, why: `agent endpoint ${endpoint} is not host:port` });
  return new Promise((resolve) => {
    let done = false;
    const end = (r: PeerReply) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      req.destroy();
      resolve(r);
    };
    const options = { host: where.host, port: where.port, path: `/v1/gangs/${gangId}`, method: 'GET', agent: false as const };
    const onResponse = (res: import('node:http').IncomingMessage) => {
      if (res.statusCode !== 200) return end({ ok: false, why: `agent ${endpoint} answered HTTP ${res.statusCode}` });
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => {
        body += c;
        if (body.length > MAX_ANSWER_BYTES) end({ ok: false, why: `agent ${endpoint} answered more than ${MAX_ANSWER_BYTES} bytes` });
      });
      res.on('end', () => {
        const a = parseGangAnswer(body);
        end(typeof a === 'string' ? { ok: false, why: `agent ${endpoint}: ${a}` } : { ok: true, answer: a });
      });
      res.on('error', (err) => end({ ok: false, why: `agent ${endpoint}: ${errorMessage(err)}` }));
    };
    // Only the fleet's CA decides: a peer is named by its node's address, not by a name in its certificate.
    const req = tls
      ? httpsRequest({ ...options, cert: tls.cert, key: tls.key, ca: tls.ca, checkServerIdentity: () => undefined }, onResponse)
      : httpRequest(options, onResponse);
    req.on('error', (err) => end({ ok: false, why: `agent ${endpoint}: ${describeConnectError(err)}` }));
    const timer = setTimeout(() => end({ ok: false, why: `agent ${endpoint}: no answer within ${timeoutMs} ms` }), timeoutMs);
    req.end();
  });
}

/** Whether something accepts a TCP connection at host:port within `timeoutMs`: the rendezvous port a rank 0's engine holds open. */
export function probePort(host: string, port: number, timeoutMs: number): Promise<{ ok: true } | { ok: false; why: string }> {
  return new Promise((resolve) => {
    const socket = connect({ host, port });
    const end = (r: { ok: true } | { ok: false; why: string }) => {
      clearTimeout(timer);
      socket.destroy();
      resolve(r);
    };
    const timer = setTimeout(() => end({ ok: false, why: `no connection within ${timeoutMs} ms` }), timeoutMs);
    socket.once('connect', () => end({ ok: true }));
    socket.once('error', (err) => end({ ok: false, why: describeConnectError(err) }));
  });
}

function describeConnectError(err: unknown): string {
  const code = (err as NodeJS.ErrnoException).code;
  return code ? `connect ${code}` : errorMessage(err);
}
