import { lstatSync, unlinkSync } from 'node:fs';
import { connect } from 'node:net';
import { errnoCode, errorMessage, failure } from '../../lib/errors.js';

/** How long a socket file may take to accept a connection before it counts as answered (a hung agent still owns it). */
export const SOCKET_PROBE_TIMEOUT_MS = 1000;

export type SocketProbe = 'answers' | 'stale' | 'absent';

/** Whether something listens on a Unix socket path; a connection that neither opens nor fails in time counts as an answer. */
export function probeSocket(path: string, timeoutMs = SOCKET_PROBE_TIMEOUT_MS): Promise<SocketProbe> {
  return new Promise((resolve, reject) => {
    const sock = connect(path);
    const done = (result: SocketProbe | Error) => {
      clearTimeout(timer);
      sock.destroy();
      if (result instanceof Error) reject(result);
      else resolve(result);
    };
    const timer = setTimeout(() => done('answers'), timeoutMs);
    sock.once('connect', () => done('answers'));
    sock.once('error', (err) => {
      const code = errnoCode(err);
      // ECONNREFUSED: a socket file with no listener, left by an agent that was killed.
      if (code === 'ECONNREFUSED') done('stale');
      else if (code === 'ENOENT') done('absent');
      else done(err);
    });
  });
}

/**
 * Makes `path` free for this agent's socket. A socket file nobody listens on
 * is removed (the previous agent was killed before it could); one that
 * answers belongs to a running agent, and starting beside it would have two
 * agents adopting, and killing, the same engines: refused, exit 1. Anything
 * that is not a socket is never removed.
 */
export async function claimSocketPath(path: string, probeTimeoutMs = SOCKET_PROBE_TIMEOUT_MS): Promise<'free' | 'replaced-stale'> {
  let isSocket: boolean;
  try {
    isSocket = lstatSync(path).isSocket();
  } catch (err) {
    if (errnoCode(err) === 'ENOENT') return 'free';
    throw failure(`cannot inspect admin socket ${path}: ${errorMessage(err)}`);
  }
  if (!isSocket) {
    throw failure(`admin socket ${path} exists and is not a socket; move it away or set admin.socket to another path`);
  }
  let probe: SocketProbe;
  try {
    probe = await probeSocket(path, probeTimeoutMs);
  } catch (err) {
    throw failure(`cannot probe admin socket ${path}: ${errorMessage(err)}`);
  }
  if (probe === 'answers') {
    throw failure(
      `another agent is already listening on ${path}; stop it first (systemctl stop llmgw-agent) or give this one another admin.socket`,
    );
  }
  if (probe === 'stale') {
    try {
      unlinkSync(path);
    } catch (err) {
      if (errnoCode(err) !== 'ENOENT') throw failure(`cannot remove the stale admin socket ${path}: ${errorMessage(err)}`);
    }
    return 'replaced-stale';
  }
  return 'free';
}
