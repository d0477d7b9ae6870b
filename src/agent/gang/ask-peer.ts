import { request as httpRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { connect } from 'node:net';
import type { PeerCertificate } from 'node:tls';
import { parseEndpoint } from '../../lib/gang-problems.js';
import { certNames, rawCertNamesNode } from '../../lib/cert-names-node.js';
import { printable } from '../../lib/printable.js';
import { foreignListener } from '../../lib/port-listeners.js';
import { type GangAnswer, MAX_ANSWER_BYTES, parseGangAnswer } from './gang-answer.js';
import type { GangTls, GangTlsRead } from './gang-tls.js';
import { noAnswerWithin, type PeerFailure, peerFailure } from './peer-failure.js';

/** What a peer's agent said of a gang, or why it said nothing usable (one line) and what that says of the peer. */
export type PeerReply = { ok: true; answer: GangAnswer } | ({ ok: false } & PeerFailure);

/** Whether a peer's socket accepted (or its /health answered 200), or why not; `accepted`: it did accept, then answered no. */
export type ProbeResult = { ok: true } | ({ ok: false; accepted?: boolean } & PeerFailure);

/**
 * askPeer with the agent's TLS read at each ask (readGangTls): TLS files that
 * cannot be read are ours to fix, and say nothing of the peer (issue 48).
 */
export function askWithTls(tls?: () => GangTlsRead): (endpoint: string, gangId: string, timeoutMs: number, nodeId?: string) => Promise<PeerReply> {
  return (endpoint, gangId, timeoutMs, nodeId) => {
    const read = tls?.() ?? { tls: undefined };
    if ('error' in read) return Promise.resolve({ ok: false, cause: 'unknown', why: `agent ${endpoint} not asked: ${read.error}` });
    return askPeer(endpoint, gangId, timeoutMs, read.tls, nodeId);
  };
}

/**
 * Asks the agent at `endpoint` for its ranks of gang `gangId`, within
 * `timeoutMs` (a hung peer is a silent one). With TLS the peer must
 * show a certificate of the fleet's CA that names node `nodeId`
 * (certNamesNode, tls.peer_name), and is shown this agent's. A peer
 * that answered, but not a gang answer, is alive: its failure is `unknown`.
 * So is one whose certificate names another node, or whose answer says it
 * is another node: whoever holds that port (another node's agent, a local
 * user who took it during a restart) is not the member, and what it says,
 * FAILED or alive, is no evidence of the member (security review 4, F5).
 */
export function askPeer(endpoint: string, gangId: string, timeoutMs: number, tls?: GangTls, nodeId?: string): Promise<PeerReply> {
  const where = parseEndpoint(endpoint);
  if (!where) return Promise.resolve({ ok: false, cause: 'unknown', why: `agent endpoint ${endpoint} is not host:port` });
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
      if (res.statusCode !== 200) return end({ ok: false, cause: 'unknown', why: `agent ${endpoint} answered HTTP ${res.statusCode}${res.statusCode === 403 ? ` (${printable(res.statusMessage ?? '').slice(0, 120)})` : ''}` });
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => {
        body += c;
        if (body.length > MAX_ANSWER_BYTES) end({ ok: false, cause: 'unknown', why: `agent ${endpoint} answered more than ${MAX_ANSWER_BYTES} bytes` });
      });
      res.on('end', async () => {
        const a = parseGangAnswer(body);
        if (typeof a === 'string') return end({ ok: false, cause: 'unknown', why: `agent ${endpoint}: ${a}` });
        if (nodeId !== undefined && nodeId !== '' && a.node !== nodeId) return end({ ok: false, cause: 'unknown', why: `agent ${endpoint} says it is node ${a.node}, not ${nodeId}: not this member's agent, its answer is no evidence` });
        const squat = tls ? undefined : await loopbackSquatter(where.host, where.port);
        if (squat) return end({ ok: false, cause: 'unknown', why: `agent ${endpoint}: ${squat}` });
        end({ ok: true, answer: a });
      });
      res.on('error', (err) => end(failed(`agent ${endpoint}`, peerFailure(err))));
    };
    // The fleet's CA, then the member's node id in the certificate (certNamesNode), not the address: a peer is
    // reached by its node's address, which names no certificate. A certificate of another node fails the
    // handshake with this error: `unknown`, never the member's death.
    const checkServerIdentity = (_host: string, cert: PeerCertificate): Error | undefined => {
      if (nodeId === undefined || nodeId === '' || rawCertNamesNode(cert.raw, nodeId, tls?.peerName)) return undefined;
      return new Error(`its certificate names ${certNames(cert.raw)}, not node ${nodeId} (tls.peer_name ${JSON.stringify(tls?.peerName ?? '{node_id}')}): refused, no evidence of ${nodeId}`);
    };
    const req = tls ? httpsRequest({ ...options, cert: tls.cert, key: tls.key, ca: tls.ca, checkServerIdentity }, onResponse) : httpRequest(options, onResponse);
    req.on('error', (err) => end(failed(`agent ${endpoint}`, peerFailure(err))));
    const timer = setTimeout(() => end(failed(`agent ${endpoint}`, noAnswerWithin(timeoutMs))), timeoutMs);
    req.end();
  });
}

/**
 * Whether something accepts a TCP connection at host:port within
 * `timeoutMs`: the rendezvous port (a TCPStore) a rank 0's engine holds once
 * bound. A probe sends nothing; the store closes it as a peer gone
 * (engine-fidelity-3 §4).
 */
export function probePort(host: string, port: number, timeoutMs: number): Promise<ProbeResult> {
  return new Promise((resolve) => {
    const socket = connect({ host, port });
    const end = (r: ProbeResult) => {
      clearTimeout(timer);
      socket.destroy();
      resolve(r);
    };
    const timer = setTimeout(() => end({ ok: false, ...noAnswerWithin(timeoutMs) }), timeoutMs);
    socket.once('connect', () => end({ ok: true }));
    socket.once('error', (err) => end({ ok: false, ...peerFailure(err) }));
  });
}

/**
 * Whether a rank 0's API answers GET /health with 200 within `timeoutMs`.
 * vLLM answers 503 once its engine core is dead
 * (V:vllm/entrypoints/serve/instrumentator/health.py:22-33), and its API
 * server exits 5 s later (V:vllm/entrypoints/launchers/launcher.py:180-202):
 * a 503 is a refusal; another status is an API alive that we cannot read.
 */
export function probeHealth(host: string, port: number, timeoutMs: number): Promise<ProbeResult> {
  return new Promise((resolve) => {
    let done = false;
    const end = (r: ProbeResult) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      req.destroy();
      resolve(r);
    };
    const req = httpRequest({ host, port, path: '/health', method: 'GET', agent: false }, (res) => {
      res.resume();
      if (res.statusCode === 200) return end({ ok: true });
      end({ ok: false, accepted: true, cause: res.statusCode === 503 ? 'refused' : 'unknown', why: `answered HTTP ${res.statusCode}` });
    });
    req.on('error', (err) => end({ ok: false, ...peerFailure(err) }));
    const timer = setTimeout(() => end({ ok: false, ...noAnswerWithin(timeoutMs) }), timeoutMs);
    req.end();
  });
}

/**
 * Plaintext is for agents on one machine (gang_addr on loopback, or
 * insecure_plaintext): nothing authenticates the answer, but on loopback the
 * kernel says who holds the port. Agents on one machine run as one user, so
 * a port held by another uid is a local user's process (one that took it
 * during the agent's restart, security review 4 F5): what it says is no
 * evidence. Off loopback nothing can be told (insecure_plaintext's price).
 */
async function loopbackSquatter(host: string, port: number): Promise<string | undefined> {
  const uid = process.getuid?.();
  if (uid === undefined || !(host === 'localhost' || host.startsWith('127.') || host === '::1' || host === '[::1]')) return undefined;
  const l = await foreignListener(host === 'localhost' ? '127.0.0.1' : host, port, uid);
  return l ? `port ${port} is held by uid ${l.uid}, not this agent's user (uid ${uid}): another user's process answered, its answer is no evidence` : undefined;
}

function failed(who: string, f: PeerFailure): PeerReply {
  return { ok: false, cause: f.cause, why: `${who}: ${f.why}` };
}
