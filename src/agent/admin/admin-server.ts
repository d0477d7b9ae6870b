import { lchownSync, lstatSync, type Stats } from 'node:fs';
import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import http2 from 'node:http2';
import net, { type Socket } from 'node:net';
import { Code, ConnectError } from '@connectrpc/connect';
import { connectNodeAdapter } from '@connectrpc/connect-node';
import { configError, errorMessage, failure } from '../../lib/errors.js';
import { ETC_GROUP, findGroup } from '../../lib/find-group.js';
import type { Logger } from '../../lib/logger.js';
import { RateLimitedLog } from '../../lib/rate-limited-log.js';
import type { AdminBackend } from './admin-backend.js';
import { adminCallValues } from './admin-peer.js';
import { type AdminAccess, notAMember, roleOf } from './admin-role.js';
import { writeGate } from './admin-write-gate.js';
import { stoppingGate } from './admin-stopping-gate.js';
import { adminRoutes } from './admin-routes.js';
import { claimSocketPath } from './claim-socket-path.js';
import { closeWhenIdle } from './close-when-idle.js';
import { prepareSocketDir } from './prepare-socket-dir.js';
import { ConnectionAdmission, refuseConnection } from './connection-admission.js';
import { sniffProtocol } from './sniff-protocol.js';
import { readPeerCredentials } from '../../lib/process/peer-credentials.js';

/** The socket's mode: owner and admin group read and write (connect), nobody else. */
export const SOCKET_MODE = 0o660;
/** Umask while the socket is bound: bind() creates it 0777 & ~umask, so it is born 0660 and never world-writable. */
const SOCKET_UMASK = 0o117;
/** With admin.read_group: every user may connect, and the agent judges each by its groups (admin-role.ts). */
export const READ_TIER_SOCKET_MODE = 0o666;
const READ_TIER_SOCKET_UMASK = 0o111;
/** How long a connection may stay open without a request before it is closed; default of silentConnectionTimeoutMs. */
export const SILENT_CONNECTION_TIMEOUT_MS = 10_000;
/** Pending connections the kernel queues: a burst of a thousand ctl calls must not meet EAGAIN (Unix sockets refuse, not retry). */
export const LISTEN_BACKLOG = 4096;
/** After close(), how long streams get to end by themselves before their connections are cut. */
export const CLOSE_GRACE_MS = 200;
/**
 * Largest admin request. The biggest real one (a Logs or Drain request) is a
 * shard id and two numbers; Connect's default, 4 GiB, let one 1 MB gzip
 * request to Status grow the agent to 7 GB and kill it (review finding 3).
 */
export const ADMIN_REQUEST_MAX_BYTES = 64 * 1024;
/** How long a connection may stay open with no stream in progress, after its last call; ctl makes one call per connection. */
export const IDLE_SESSION_TIMEOUT_MS = 10_000;
/** Streams in flight on one connection: ctl uses one. */
export const MAX_STREAMS_PER_SESSION = 32;
/**
 * Deadline of a call that is not a follow or a wait: Status and Adopt answer
 * from memory and the state directory in milliseconds. Logs and Events
 * (which may follow: `ctl events -f` died at 60 s, walkthrough 3) and Drain
 * (whose --wait the client bounds with --timeout) are exempt, bounded by
 * their per-user slots instead; all end when the agent stops.
 */
export const ADMIN_CALL_DEADLINE_MS = 60_000;
const OPEN_ENDED_CALLS = new Set(['/llmgw.v1.AdminService/Logs', '/llmgw.v1.AdminService/Drain', '/llmgw.v1.AdminService/Events']);
/** Most headers an HTTP/1.1 request may carry, as maxHeaderListPairs bounds HTTP/2's. */
const MAX_HTTP1_HEADERS = 64;

export interface AdminServerOptions {
  socketPath: string;
  /** admin.group: the group given the socket; the agent's own group when empty. */
  group: string;
  backend: AdminBackend;
  logger: Logger;
  /** Default SILENT_CONNECTION_TIMEOUT_MS. */
  silentConnectionTimeoutMs?: number;
  /** Default IDLE_SESSION_TIMEOUT_MS. */
  idleSessionTimeoutMs?: number;
  /** Default MAX_ADMIN_CONNECTIONS (connection-admission.ts). */
  maxConnections?: number;
  /** Default MAX_CONNECTIONS_PER_USER: what one uid other than root may hold. */
  maxConnectionsPerUser?: number;
  /** Default ADMIN_CALL_DEADLINE_MS. */
  callDeadlineMs?: number;
  /** How often `drain --wait` reads in-flight counts; default DRAIN_POLL_MS. */
  drainPollMs?: number;
  /** For tests; default /etc/group. */
  etcGroupPath?: string;
  /** admin.read_group: members may read everything and change nothing (admin-role.ts); '' or absent for none. */
  readGroup?: string;
  /** For tests; default /proc: where the peers' groups are read. */
  procRoot?: string;
  /**
   * Aborts when the agent begins to stop (its SIGTERM): from then on every
   * write is refused in one line (admin-stopping-gate.ts) and reads are
   * answered until close(). close() refuses writes too; absent, only it does.
   */
  stopping?: AbortSignal;
}

/**
 * AdminService on the agent's Unix socket, for `llmgw ctl`. Both HTTP/2
 * without TLS (h2c, prior knowledge: the Connect, gRPC and gRPC-web
 * protocols; `buf curl --http2-prior-knowledge`; ctl's streaming calls) and
 * HTTP/1.1 (the Connect protocol; `curl`; `ctl status`, whose cold start
 * without node:http2 is about 0.2x `node -e 0` shorter, bench figure 1b). Node's h2c server cannot
 * fall back to HTTP/1.1 by itself, so a plain socket server reads each
 * connection's first bytes and hands it to one of the two: the HTTP/2 preface
 * goes to HTTP/2, anything else to HTTP/1.1. Both run the same Connect
 * handler (request size, compression) and the same connection cap, idle
 * closes and call deadline: HTTP/1.1 is not a way around any of them.
 *
 * Who may connect is decided by the file system alone: the socket is 0660,
 * owned by the agent's user and the admin group.
 */
export class AdminServer {
  readonly socketPath: string;
  /** The listener: hands each connection to h2 or h1 by its first bytes. */
  private readonly server: net.Server;
  private readonly h2: http2.Http2Server;
  private readonly h1: http.Server;
  private readonly http1Connections = new Map<Socket, Http1Connection>();
  private readonly sessions = new Set<http2.ServerHttp2Session>();
  private readonly sockets = new Set<Socket>();
  private refusedConnections = 0;
  private readonly warnRefused: RateLimitedLog;
  /** Said once: why connections are refused for credentials the agent cannot read (the cause does not change while it runs). */
  private unknownPeerLogged = false;
  private readonly shutdown = new AbortController();
  private readonly log: Logger;
  private closed?: Promise<void>;

  /** Connections open now, for llmgw_agent_admin_connections. */
  get openConnections(): number {
    return this.sockets.size;
  }

  /** Connections refused over the caps since start, for llmgw_agent_admin_connections_refused_total. */
  get refusedConnectionCount(): number {
    return this.refusedConnections;
  }

  private constructor(
    opts: AdminServerOptions,
    access: AdminAccess,
    private readonly socketMode: number,
  ) {
    this.socketPath = opts.socketPath;
    this.log = opts.logger.child({ socket: opts.socketPath });
    this.warnRefused = new RateLimitedLog(this.log, { intervalMs: 10_000 });
    const handler = connectNodeAdapter({
      readMaxBytes: ADMIN_REQUEST_MAX_BYTES,
      // No request compression: a compressed request is how 1 MB on the
      // wire became gigabytes in memory. Admin requests are tiny anyway.
      acceptCompression: [],
      routes: adminRoutes(opts.backend, { drainPollMs: opts.drainPollMs }),
      // Proto JSON as every --json prints it: zeros and falses a script tests for are there.
      jsonOptions: { alwaysEmitImplicit: true },
      // Aborts every handler's ctx.signal: a `logs -f` or `drain --wait` ends at once on SIGTERM.
      shutdownSignal: this.shutdown.signal,
      // Who called, for the handlers' own per-user caps (Logs), and their tier.
      contextValues: (req) => adminCallValues(req, access),
      // A reader's write is refused before its handler runs (admin.read_group); so is anyone's once the agent stops.
      interceptors: [writeGate(access), stoppingGate(opts.stopping ? AbortSignal.any([opts.stopping, this.shutdown.signal]) : this.shutdown.signal, this.warnRefused)],
    });
    this.h2 = http2.createServer(
      {
        // What one ctl needs, many times over; a client cannot open
        // thousands of streams on one connection to multiply the caps below.
        settings: { maxConcurrentStreams: MAX_STREAMS_PER_SESSION },
        peerMaxConcurrentStreams: MAX_STREAMS_PER_SESSION,
        maxHeaderListPairs: 64,
      },
      handler,
    );
    this.h1 = http.createServer();
    this.h1.maxHeadersCount = MAX_HTTP1_HEADERS;
    // This server never listens, so Node's own HTTP/1.1 timers (headersTimeout,
    // requestTimeout, which run from listen()) never start; keepAliveTimeout
    // would race the idle close below. The timers here are the only ones.
    this.h1.keepAliveTimeout = 0;
    const silentMs = opts.silentConnectionTimeoutMs ?? SILENT_CONNECTION_TIMEOUT_MS;
    const idleMs = opts.idleSessionTimeoutMs ?? IDLE_SESSION_TIMEOUT_MS;
    const admission = new ConnectionAdmission({ maxConnections: opts.maxConnections, perUser: opts.maxConnectionsPerUser });
    const deadlineMs = opts.callDeadlineMs ?? ADMIN_CALL_DEADLINE_MS;
    this.server = net.createServer((socket) => {
      const admitted = admission.admit(readPeerCredentials(socket));
      if (!('release' in admitted)) {
        this.refusedConnections += 1;
        const { peer, why } = admitted;
        if (admitted.code === 'permission_denied') {
          if (!this.unknownPeerLogged) this.log.error({ why }, 'refusing every admin connection: the kernel\'s peer credentials (SO_PEERCRED) cannot be read, and without them no per-user limit holds');
          this.unknownPeerLogged = true;
        } else {
          // One line per burst, not one per connection: the flood must not fill the journal.
          this.warnRefused.warn({ open: admission.size, refused: this.refusedConnections, uid: peer?.uid, pid: peer?.pid, why }, 'refused admin connections: too many are open');
        }
        refuseConnection(socket, admitted);
        return;
      }
      // With a read tier the socket is open to every user (0666): the groups decide, here.
      if (access.readGid !== undefined && admitted.peer && roleOf(admitted.peer, access) === undefined) {
        admitted.release();
        this.refusedConnections += 1;
        const refusal = notAMember(admitted.peer, access);
        this.warnRefused.warn({ uid: admitted.peer.uid, pid: admitted.peer.pid, why: refusal.why }, 'refused an admin connection: not in admin.group or admin.read_group');
        refuseConnection(socket, { code: 'permission_denied', ...refusal });
        return;
      }
      this.sockets.add(socket);
      socket.once('close', () => {
        this.sockets.delete(socket);
        admitted.release();
      });
      // An error before (or after) a protocol server takes the socket must not go unhandled and end the agent.
      socket.on('error', (err) => this.log.debug({ err: errorMessage(err) }, 'admin connection error'));
      sniffProtocol(socket, silentMs, this.log, (isHttp2) => {
        if (isHttp2) this.h2.emit('connection', socket);
        else this.serveHttp1(socket, { silentMs, idleMs });
      });
    });
    this.h2.on('stream', (stream, headers) => {
      if (OPEN_ENDED_CALLS.has(String(headers[':path']))) return;
      // A handler that never answers must not hold its connection, and the
      // memory of its request, for ever.
      // destroy(), not close(): close() waits for pending writes, which a client that stopped reading never lets drain.
      const deadline = setTimeout(() => stream.destroy(), deadlineMs);
      deadline.unref();
      stream.once('close', () => clearTimeout(deadline));
    });
    this.h1.on('request', (req: IncomingMessage, res: ServerResponse) => {
      // Node parses every pipelined request in a buffer at once; a
      // connection past its calls is closed before any more handlers start.
      if (!this.http1Connections.get(req.socket)?.began(res)) return;
      handler(req, res);
      if (OPEN_ENDED_CALLS.has(req.url ?? '')) return;
      // As for HTTP/2; HTTP/1.1 has one call per connection at a time, so the connection goes with it.
      const deadline = setTimeout(() => req.socket.destroy(), deadlineMs);
      deadline.unref();
      res.once('close', () => clearTimeout(deadline));
    });
    this.h2.on('session', (session) => {
      this.sessions.add(session);
      // A client that connects and says nothing, or keeps a connection after
      // its call, costs a file descriptor and some memory; 5,000 of them
      // were never closed before (review finding 3).
      const idle = closeWhenIdle(this.log, () => session.destroy());
      let open = 0;
      idle.arm(silentMs, 'closed a connection that sent no request');
      session.on('stream', (stream) => {
        open += 1;
        idle.clear();
        stream.once('close', () => {
          open -= 1;
          if (open === 0 && !session.destroyed) idle.arm(idleMs, 'closed an idle admin connection');
        });
      });
      session.once('close', () => {
        idle.clear();
        this.sessions.delete(session);
      });
      session.on('error', (err) => this.log.debug({ err: errorMessage(err) }, 'admin connection error'));
    });
  }

  /**
   * One HTTP/1.1 connection, under the limits an HTTP/2 session has: closed
   * when silent or idle, at most MAX_STREAMS_PER_SESSION calls in flight
   * (Node starts every pipelined request at once), closed once its calls end
   * when the server closes.
   */
  private serveHttp1(socket: Socket, limits: { silentMs: number; idleMs: number }): void {
    const idle = closeWhenIdle(this.log, () => socket.destroy());
    let open = 0;
    idle.arm(limits.silentMs, 'closed a connection that sent no request');
    this.http1Connections.set(socket, {
      began: (res) => {
        if (socket.destroyed) return false;
        open += 1;
        idle.clear();
        if (open > MAX_STREAMS_PER_SESSION) {
          this.log.debug('closed an HTTP/1.1 admin connection that pipelined too many calls');
          socket.destroy();
          return false;
        }
        res.once('close', () => {
          open -= 1;
          if (open > 0 || socket.destroyed) return;
          // A stopping server lets a call in progress finish, then closes its connection.
          if (this.shutdown.signal.aborted) socket.destroy();
          else idle.arm(limits.idleMs, 'closed an idle admin connection');
        });
        return true;
      },
      closeIfIdle: () => {
        if (open === 0) socket.destroy();
      },
    });
    socket.once('close', () => {
      idle.clear();
      this.http1Connections.delete(socket);
    });
    this.h1.emit('connection', socket);
    // Paused while sniffed; the HTTP/1.1 parser reads the bytes put back first.
    socket.resume();
  }

  /**
   * Claims the socket path and listens. Throws a configuration error (exit
   * 78) for an unknown admin.group, and a failure (exit 1) when another agent
   * answers on the path.
   */
  static async listen(opts: AdminServerOptions): Promise<AdminServer> {
    const gid = resolveGroup(opts.group, opts.etcGroupPath ?? ETC_GROUP);
    const readGid = opts.readGroup ? resolveGroup(opts.readGroup, opts.etcGroupPath ?? ETC_GROUP, 'admin.read_group') : undefined;
    const access: AdminAccess = { adminGid: gid ?? process.getegid?.() ?? 0, readGid, adminGroup: opts.group, readGroup: opts.readGroup ?? '', procRoot: opts.procRoot };
    prepareSocketDir(opts.socketPath, gid, opts.logger, readGid !== undefined);
    if ((await claimSocketPath(opts.socketPath)) === 'replaced-stale') {
      opts.logger.info({ socket: opts.socketPath }, 'removed a stale admin socket nobody was listening on');
    }
    const admin = new AdminServer(opts, access, readGid === undefined ? SOCKET_MODE : READ_TIER_SOCKET_MODE);
    await admin.bind(gid);
    return admin;
  }

  private bind(gid: number | undefined): Promise<void> {
    return new Promise((resolve, reject) => {
      const onError = (err: Error) => reject(failure(`cannot listen on admin socket ${this.socketPath}: ${errorMessage(err)}`, { cause: err }));
      this.server.once('error', onError);
      // bind() runs synchronously inside listen() and creates the file with
      // 0777 & ~umask: under this umask it never exists with looser permissions.
      const previous = process.umask(this.socketMode === SOCKET_MODE ? SOCKET_UMASK : READ_TIER_SOCKET_UMASK);
      try {
        this.server.listen({ path: this.socketPath, backlog: LISTEN_BACKLOG }, () => {
          this.server.off('error', onError);
          // By the link itself, never through one (lchown; the directory is
          // trusted, see assertTrustedDirectory, and the mode came from the
          // umask at bind, so no chmod by path is needed: review finding 13).
          let st: Stats;
          try {
            if (gid !== undefined) lchownSync(this.socketPath, -1, gid);
            st = lstatSync(this.socketPath);
          } catch (err) {
            this.server.close();
            reject(failure(`cannot set the group of admin socket ${this.socketPath}: ${errorMessage(err)}`));
            return;
          }
          if (!st.isSocket() || (st.mode & 0o777) !== this.socketMode) {
            this.server.close();
            reject(failure(`admin socket ${this.socketPath} is not the socket this agent bound with mode ${this.socketMode.toString(8)}; refused`));
            return;
          }
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
      for (const c of this.http1Connections.values()) c.closeIfIdle();
      const cut = setTimeout(() => {
        for (const s of this.sessions) s.destroy();
        // HTTP/1.1 connections and any still being read, past the grace.
        for (const s of this.sockets) s.destroy();
      }, CLOSE_GRACE_MS);
      cut.unref();
    });
    return this.closed;
  }
}

/** What the server tracks of one HTTP/1.1 connection. */
interface Http1Connection {
  /** A request on it has begun (`res` closes when it ends); false when it must not be served. */
  began(res: ServerResponse): boolean;
  /** Closes it unless a call is in progress (the server is stopping). */
  closeIfIdle(): void;
}

/** admin.group's gid; undefined when none is configured (the socket keeps the agent's group). */
function resolveGroup(name: string, etcGroupPath: string, key = 'admin.group'): number | undefined {
  if (name === '') return undefined;
  const group = findGroup({ name }, etcGroupPath);
  if (!group) {
    throw configError(`${key}: no group named ${JSON.stringify(name)} in ${etcGroupPath}; create it (groupadd ${name}) or set ${key} to an existing group`);
  }
  return group.gid;
}
