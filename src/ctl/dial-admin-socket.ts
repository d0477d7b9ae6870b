import { statSync } from 'node:fs';
import { type Socket, connect } from 'node:net';
import { dirname } from 'node:path';
import { errnoCode } from '../lib/errno.js';
import { LlmgwError, errorMessage, failure } from '../lib/errors.js';
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
    case 'ENOTSOCK': {
      // Linux refuses a connect to a file that is not a socket as it refuses
      // a dead socket: "nothing listens" would send the operator to restart an
      // agent when the path is what is wrong.
      const kind = fileKind(path);
      if (kind !== 'socket' && kind !== undefined) {
        return new LlmgwError('unreachable', `${path} is not a socket (it is ${kind}); pass the agent's admin socket with --socket / LLMGW_SOCKET, or check admin.socket in the agent config`);
      }
      // A socket file without a listener: the agent died without removing it.
      return agentUnreachable(path, 'nothing listens');
    }
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
 * gives both the admin group). A socket of group root means admin.group is
 * unset: the advice is to set it, never to join group root, which would hand
 * the operator every root-group file on the node.
 */
export function permissionDenied(path: string): LlmgwError {
  const gid = gidOf(path) ?? gidOf(dirname(path));
  const name = gid === undefined ? undefined : findGroup({ gid })?.name;
  const fix =
    gid === 0
      ? 'the agent has no admin group: set admin.group in the agent config (e.g. admin.group: llmgw), restart the agent and join that group, or run as root'
      : name
        ? `join group ${name} (sudo usermod -aG ${name} $USER, then log in again) or run as root`
        : gid !== undefined
          ? `join the group with gid ${gid} or run as root`
          : 'run as root, or as a member of the group that owns it';
  return new LlmgwError('permission', `permission denied on the agent's socket ${path}: ${fix}`);
}

/** What is at `path`, in words, for errors; undefined when it cannot be seen. */
function fileKind(path: string): string | undefined {
  try {
    const st = statSync(path);
    if (st.isSocket()) return 'socket';
    if (st.isDirectory()) return 'a directory';
    if (st.isFile()) return 'a regular file';
    return 'a pipe or device';
  } catch {
    return undefined;
  }
}

function gidOf(path: string): number | undefined {
  try {
    return statSync(path).gid;
  } catch {
    return undefined;
  }
}
