import { chmodSync, chownSync, statSync } from 'node:fs';
import http2 from 'node:http2';
import { Code, ConnectError } from '@connectrpc/connect';
import { connectNodeAdapter } from '@connectrpc/connect-node';
import { configError, errorMessage, failure } from '../../lib/errors.js';
import { ETC_GROUP, findGroup } from '../../lib/find-group.js';
import type { Logger } from '../../lib/logger.js';
import type { AdminBackend } from './admin-backend.js';
import { adminRoutes } from './admin-routes.js';
import { claimSocketPath } from './claim-socket-path.js';
import { prepareSocketDir } from './prepare-socket-dir.js';

/** The socket's mode: owner and admin group read and write (connect), nobody else. */
export const SOCKET_MODE = 0o660;
/** Umask while the socket is bound: bind() creates it 0777 & ~umask, so it is born 0660 and never world-writable. */
const SOCKET_UMASK = 0o117;
/** How long a connection may stay open without a request before it is closed; default of silentConnectionTimeoutMs. */
export const SILENT_CONNECTION_TIMEOUT_MS = 10_000;
/** Pending connections the kernel queues: a burst of a thousand ctl calls must not meet EAGAIN (Unix sockets refuse, not retry). */
export const LISTEN_BACKLOG = 4096;
/** After close(), how long streams get to end by themselves before their connections are cut. */
export const CLOSE_GRACE_MS = 200;

export interface AdminServerOptions {
  socketPath: string;
  /** admin.group: the group given the socket; the agent's own group when empty. */
  group: string;
  backend: AdminBackend;
  logger: Logger;
  /** Default SILENT_CONNECTION_TIMEOUT_MS. */
  silentConnectionTimeoutMs?: number;
  /** How often `drain --wait` reads in-flight counts; default DRAIN_POLL_MS. */
  drainPollMs?: number;
  /** For tests; default /etc/group. */
  etcGroupPath?: string;
}

/**
 * AdminService on the agent's Unix socket, for `llmgw ctl`. HTTP/2 without
 * TLS (h2c, prior knowledge) only: the Connect, gRPC and gRPC-web protocols
 * all work over it, and `buf curl --http2-prior-knowledge` talks to it.
 * HTTP/1.1 is not served: Node's h2c server cannot fall back to it.
 *
 * Who may connect is decided by the file system alone: the socket is 0660,
 * owned by the agent's user and the admin group.
 */
export class AdminServer {
  readonly socketPath: string;
  private readonly server: http2.Http2Server;
  private readonly sessions = new Set<http2.ServerHttp2Session>();
  private readonly shutdown = new AbortController();
  private readonly log: Logger;
  private closed?: Promise<void>;

  private constructor(opts: AdminServerOptions) {
    this.socketPath = opts.socketPath;
    this.log = opts.logger.child({ socket: opts.socketPath });
    const handler = connectNodeAdapter({
      routes: adminRoutes(opts.backend, { drainPollMs: opts.drainPollMs }),
      // Proto JSON as every --json prints it: zeros and falses a script tests for are there.
      jsonOptions: { alwaysEmitImplicit: true },
      // Aborts every handler's ctx.signal: a `logs -f` or `drain --wait` ends at once on SIGTERM.
      shutdownSignal: this.shutdown.signal,
    });
    this.server = http2.createServer({}, handler);
    const silentMs = opts.silentConnectionTimeoutMs ?? SILENT_CONNECTION_TIMEOUT_MS;
    this.server.on('session', (session) => {
      this.sessions.add(session);
      // A client that connects and says nothing costs a file descriptor and
      // nothing else (nothing here waits for it), but it must not hold one for ever.
      const silent = setTimeout(() => {
        this.log.debug('closed a connection that sent no request');
        session.destroy();
      }, silentMs);
      silent.unref();
      session.once('stream', () => clearTimeout(silent));
      session.once('close', () => {
        clearTimeout(silent);
        this.sessions.delete(session);
      });
      session.on('error', (err) => this.log.debug({ err: errorMessage(err) }, 'admin connection error'));
    });
  }

  /**
   * Claims the socket path and listens. Throws a configuration error (exit
   * 78) for an unknown admin.group, and a failure (exit 1) when another agent
   * answers on the path.
   */
  static async listen(opts: AdminServerOptions): Promise<AdminServer> {
    const gid = resolveGroup(opts.group, opts.etcGroupPath ?? ETC_GROUP);
    prepareSocketDir(opts.socketPath, gid, opts.logger);
    if ((await claimSocketPath(opts.socketPath)) === 'replaced-stale') {
      opts.logger.info({ socket: opts.socketPath }, 'removed a stale admin socket nobody was listening on');
    }
    const admin = new AdminServer(opts);
    await admin.bind(gid);
    return admin;
  }

  private bind(gid: number | undefined): Promise<void> {
    return new Promise((resolve, reject) => {
      const onError = (err: Error) => reject(failure(`cannot listen on admin socket ${this.socketPath}: ${errorMessage(err)}`, { cause: err }));
      this.server.once('error', onError);
      // bind() runs synchronously inside listen() and creates the file with
      // 0777 & ~umask: under this umask it never exists with looser permissions.
      const previous = process.umask(SOCKET_UMASK);
      try {
        this.server.listen({ path: this.socketPath, backlog: LISTEN_BACKLOG }, () => {
          this.server.off('error', onError);
          try {
            if (gid !== undefined) chownSync(this.socketPath, -1, gid);
            chmodSync(this.socketPath, SOCKET_MODE);
          } catch (err) {
            this.server.close();
            reject(failure(`cannot set the owner or mode of admin socket ${this.socketPath}: ${errorMessage(err)}`));
            return;
          }
          const st = statSync(this.socketPath);
          this.log.info({ mode: (st.mode & 0o777).toString(8), gid: st.gid }, 'admin socket listening');
          resolve();
        });
      } finally {
        process.umask(previous);
      }
    });
  }

  /**
   * Stops serving and removes the socket file. Streams in progress are told
   * to end (their handlers' signals abort); connections still open after
   * CLOSE_GRACE_MS are cut, so that the agent exits promptly on SIGTERM.
   */
  close(): Promise<void> {
    this.closed ??= new Promise<void>((resolve) => {
      this.shutdown.abort(new ConnectError('the agent is stopping', Code.Unavailable));
      // Removes the socket file too (Node unlinks a Unix socket it closes).
      this.server.close(() => resolve());
      for (const s of this.sessions) s.close();
      const cut = setTimeout(() => {
        for (const s of this.sessions) s.destroy();
      }, CLOSE_GRACE_MS);
      cut.unref();
    });
    return this.closed;
  }
}

/** admin.group's gid; undefined when none is configured (the socket keeps the agent's group). */
function resolveGroup(name: string, etcGroupPath: string): number | undefined {
  if (name === '') return undefined;
  const group = findGroup({ name }, etcGroupPath);
  if (!group) {
    throw configError(`admin.group: no group named ${JSON.stringify(name)} in ${etcGroupPath}; create it (groupadd ${name}) or set admin.group to an existing group`);
  }
  return group.gid;
}
