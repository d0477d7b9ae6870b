import { statSync } from 'node:fs';
import { type Socket, connect } from 'node:net';
import { dirname } from 'node:path';
import { LlmgwError, errnoCode, errorMessage, failure } from '../lib/errors.js';
import { findGroup } from '../lib/find-group.js';
import { agentUnreachable } from './admin-call-error.js';

/** How long opening the socket may take; an agent that accepts nothing for this long is not answering. */
export const DIAL_TIMEOUT_MS = 5000;

/**
 * Connects to the agent's admin socket, and turns the ways that fails into
 * what the operator should do: ENOENT or ECONNREFUSED, the agent is not
 * running (exit 69); EACCES, the operator is not in the socket's group
 * (exit 77, naming it). Every ctl command dials through here first, so
 * these errors are decided once, before any protocol is spoken.
 */
export function dialAdminSocket(path: string, timeoutMs = DIAL_TIMEOUT_MS): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const sock = connect(path);
    const timer = setTimeout(() => {
      sock.destroy();
      reject(agentUnreachable(path, `nothing accepted a connection within ${timeoutMs / 1000}s`));
    }, timeoutMs);
    const onError = (err: Error) => {
      clearTimeout(timer);
      sock.destroy();
      reject(dialError(path, err));
    };
    sock.once('connect', () => {
      clearTimeout(timer);
      sock.off('error', onError);
      // Until the HTTP/2 session takes the socket over (and reports its errors), an error must not go unhandled.
      sock.on('error', () => {});
      resolve(sock);
    });
    sock.once('error', onError);
  });
}

function dialError(path: string, err: Error): LlmgwError {
  switch (errnoCode(err)) {
    case 'ENOENT':
      return agentUnreachable(path, 'no socket');
    case 'ECONNREFUSED':
      // A socket file without a listener: the agent died without removing it.
      return agentUnreachable(path, 'nothing listens');
    case 'EACCES':
    case 'EPERM':
      return permissionDenied(path);
    case 'ENOTDIR':
      return failure(`cannot reach the agent: a part of ${path} is not a directory; check --socket / LLMGW_SOCKET`);
    default:
      return failure(`cannot connect to the agent on ${path}: ${errorMessage(err)}`);
  }
}

/**
 * Exit 77, naming the group to join. It is read from the socket itself, or,
 * when its directory is closed to us as well, from the directory (the agent
 * gives both the admin group).
 */
export function permissionDenied(path: string): LlmgwError {
  const gid = gidOf(path) ?? gidOf(dirname(path));
  const name = gid === undefined ? undefined : findGroup({ gid })?.name;
  const fix = name
    ? `join group ${name} (sudo usermod -aG ${name} $USER, then log in again) or run as root`
    : gid !== undefined
      ? `join the group with gid ${gid} or run as root`
      : 'run as root, or as a member of the group that owns it';
  return new LlmgwError('permission', `permission denied on the agent's socket ${path}: ${fix}`);
}

function gidOf(path: string): number | undefined {
  try {
    return statSync(path).gid;
  } catch {
    return undefined;
  }
}
