import { EventEmitter } from 'node:events';
import type http2 from 'node:http2';
import type { AddressInfo, Socket } from 'node:net';
import { create } from '@bufbuild/protobuf';
import { Code, ConnectError, type ConnectRouter, createContextKey, createContextValues, type HandlerContext } from '@connectrpc/connect';
import { connectNodeAdapter } from '@connectrpc/connect-node';
import {
  AckSchema,
  type AgentMessage,
  AgentService,
  type ControlMessage,
  ControlMessageSchema,
  GpuEventKind,
  InventorySchema,
  type Register,
  ShardState,
  type ShardStatus,
  StopShardSchema,
} from '../gen/llmgw/v1/agent_pb.js';
import { errnoCode, errorMessage, failure } from '../lib/errors.js';
import { type Logger, silentLogger } from '../lib/logger.js';
import { clientCertificateProblem } from './client-certificate-problem.js';
import { createAgentServer, type AgentServerTls } from './create-agent-server.js';
import type { Deployment } from './deployment.js';
import { NodeSession } from './node-session.js';
import type { NodeRecord, NodeView } from './node-view.js';
import { DEFAULT_PORT_RANGE } from './port-pool.js';
import { readEphemeralPortRange } from './read-ephemeral-port-range.js';
import { Reconciler } from './reconciler.js';
import type { ReplicaView } from './replica-view.js';
import { shardStateName } from './shard-state-name.js';

export const DEFAULT_NODE_GRACE_MS = 60_000;
export const DEFAULT_RETRY_BACKOFF_MS = 5_000;
export const DEFAULT_PLACEMENT_DELAY_MS = 3_000;
/** After close() asks connections to end, how long before they are destroyed. */
export const CLOSE_TIMEOUT_MS = 2_000;
/** Messages kept per node for messages(); a long dev run must not grow without bound. */
export const MESSAGE_HISTORY_LIMIT = 10_000;
/**
 * A node's stream that heartbeats and has sent something within 2.5 of its
 * heartbeat gaps (at most this) is live, and a second Register for the same
 * node_id is a duplicate agent, refused. A stream silent for longer, or one
 * that never heartbeated, is taken for dead (a partition the server has not
 * noticed, an agent that reconnects) and replaced by the newer one.
 */
export const DEFAULT_DUPLICATE_LIVENESS_MS = 15_000;

/** States after which a shard has no process left on its node. */
const GONE = new Set([ShardState.STOPPED, ShardState.FAILED, ShardState.EXITED]);

export interface StopAllShardsResult {
  /** Reported STOPPED, FAILED or EXITED after the stop. */
  stopped: string[];
  /** Not reported gone within the timeout, or on a node that is not connected: processes may be left. */
  remaining: string[];
}

export interface ControlPlaneOptions {
  /** Desired state; absent = manual mode: nodes are only recorded, and callers send commands themselves. */
  deployment?: Deployment;
  /** PEM file paths; with them the server speaks TLS only and requires client certificates from `ca`. */
  tls?: AgentServerTls;
  /** How long a disconnected node's shards are kept before they are placed elsewhere (default 60s). */
  nodeGraceMs?: number;
  /** HTTP and leader ports handed to shards (default 18000-18999). */
  portRange?: [number, number];
  /**
   * Ports never handed to shards; default: this machine's ephemeral range
   * (/proc/sys/net/ipv4/ip_local_port_range), which is right wherever the
   * agents run on this machine (dev up, several agents on one box, tests).
   * The contract carries no node's range; a fleet keeps its shard ports
   * outside every node's. null avoids nothing.
   */
  avoidPorts?: [number, number] | null;
  /** Wait before placing a failed replica again (default 5s). */
  retryBackoffMs?: number;
  /**
   * How long after listen() placement waits for nodes to re-register with
   * their running shards (default 3s). Tests with one node may set 0.
   */
  placementDelayMs?: number;
  /** See DEFAULT_DUPLICATE_LIVENESS_MS (default 15s). */
  duplicateLivenessMs?: number;
  logger?: Logger;
}

export interface ControlPlaneEvents {
  'node-registered': [nodeId: string, register: Register];
  'node-disconnected': [nodeId: string, reason: string];
  /** A second agent registered with a node_id that has a live stream; it was refused. */
  'node-refused': [nodeId: string, reason: string];
  message: [nodeId: string, message: AgentMessage];
  'shard-status': [nodeId: string, status: ShardStatus];
  'replica-ready': [replica: ReplicaView];
}

/** new → listening → closing → closed; changed only in #setState. */
export type ControlPlaneState = 'new' | 'listening' | 'closing' | 'closed';

/** Why the peer's client certificate is refused, set per request; undefined when acceptable. */
const CERTIFICATE_PROBLEM = createContextKey<string | undefined>(undefined, { description: 'client certificate problem' });
/** The stream's remote `address:port`, to name the agent that holds a node_id. */
const PEER = createContextKey<string>('an unknown peer', { description: 'peer address' });

interface Waiter {
  nodeId: string;
  pred: (m: AgentMessage) => boolean;
  resolve: (m: AgentMessage) => void;
  reject: (err: Error) => void;
  timer: NodeJS.Timeout;
}

/**
 * The reference control plane: serves AgentService (Connect, gRPC and
 * gRPC-web on one HTTP/2 port), keeps a registry of nodes, and, given a
 * deployment, places and supervises replicas on them. It is for local runs,
 * demos and tests; production runs the llmgw control plane, a separate service that speaks
 * the same contract.
 */
export class ControlPlane extends EventEmitter<ControlPlaneEvents> {
  readonly #log: Logger;
  readonly #tls?: AgentServerTls;
  readonly #nodeGraceMs: number;
  readonly #duplicateLivenessMs: number;
  readonly #reconciler?: Reconciler;
  readonly #nodes = new Map<string, NodeRecord>();
  /** The stream that carries commands to each node: the newest one it registered on. */
  readonly #sessionOf = new Map<string, NodeSession>();
  readonly #sessions = new Set<NodeSession>();
  readonly #graceTimers = new Map<string, NodeJS.Timeout>();
  readonly #messages = new Map<string, AgentMessage[]>();
  readonly #waiters = new Set<Waiter>();
  readonly #sockets = new Set<Socket>();
  readonly #h2sessions = new Set<http2.ServerHttp2Session>();
  #server?: http2.Http2Server | http2.Http2SecureServer;
  #state: ControlPlaneState = 'new';
  #closed?: Promise<void>;
  #nextMessageId = 0n;
  #nextSessionId = 0;

  constructor(opts: ControlPlaneOptions) {
    super();
    this.#log = opts.logger ?? silentLogger;
    this.#tls = opts.tls;
    this.#nodeGraceMs = opts.nodeGraceMs ?? DEFAULT_NODE_GRACE_MS;
    this.#duplicateLivenessMs = opts.duplicateLivenessMs ?? DEFAULT_DUPLICATE_LIVENESS_MS;
    if (opts.deployment) {
      this.#reconciler = new Reconciler(
        {
          deployment: opts.deployment,
          portRange: opts.portRange ?? DEFAULT_PORT_RANGE,
          avoidPorts: opts.avoidPorts === undefined ? readEphemeralPortRange() : (opts.avoidPorts ?? undefined),
          retryBackoffMs: opts.retryBackoffMs ?? DEFAULT_RETRY_BACKOFF_MS,
          nodeGraceMs: this.#nodeGraceMs,
          placementDelayMs: opts.placementDelayMs ?? DEFAULT_PLACEMENT_DELAY_MS,
          logger: this.#log,
        },
        {
          send: (nodeId, msg) => this.#sendTo(nodeId, msg) !== undefined,
          node: (nodeId) => this.#nodes.get(nodeId),
          nodes: () => this.#nodes.values(),
          replicaReady: (view) => {
            this.#log.info({ replica: view.id, url: view.url }, 'replica ready');
            this.emit('replica-ready', view);
          },
        },
      );
    }
  }

  get state(): ControlPlaneState {
    return this.#state;
  }

  #setState(to: ControlPlaneState): void {
    this.#log.debug({ from: this.#state, to }, 'control plane state changed');
    this.#state = to;
  }

  /** Starts serving; port 0 picks a free port, which the result reports. */
  async listen(addr: { host: string; port: number }): Promise<{ host: string; port: number; url: string }> {
    if (this.#state !== 'new') throw failure(`cannot listen: the control plane is ${this.#state}`);
    const routes = (router: ConnectRouter) => {
      router.service(AgentService, { connect: (requests, ctx) => this.#stream(requests, ctx) });
    };
    const handler = connectNodeAdapter({
      routes,
      contextValues: (req) => createContextValues().set(CERTIFICATE_PROBLEM, clientCertificateProblem(req)).set(PEER, peerOf(req)),
    });
    const server = createAgentServer(handler, this.#tls);
    server.on('connection', (socket: Socket) => {
      this.#sockets.add(socket);
      socket.once('close', () => this.#sockets.delete(socket));
    });
    server.on('session', (session: http2.ServerHttp2Session) => {
      this.#h2sessions.add(session);
      session.once('close', () => this.#h2sessions.delete(session));
    });
    // A refused client certificate never reaches the service; this is the
    // only place an operator can learn why a node does not register.
    server.on('tlsClientError', (err: Error, socket: { remoteAddress?: string }) => {
      this.#log.warn({ err: err.message, peer: socket.remoteAddress }, 'refused a TLS connection (client certificate missing or not from the configured CA?)');
    });
    await new Promise<void>((resolve, reject) => {
      const onError = (err: Error) => {
        const why = errnoCode(err) === 'EADDRINUSE' ? 'the address is in use' : errnoCode(err) === 'EACCES' ? 'permission denied' : errorMessage(err);
        reject(failure(`cannot listen on ${addr.host}:${addr.port}: ${why}`, { cause: err }));
      };
      server.once('error', onError);
      server.listen(addr.port, addr.host, () => {
        server.off('error', onError);
        resolve();
      });
    });
    this.#server = server;
    const port = (server.address() as AddressInfo).port;
    const hostInUrl = addr.host.includes(':') ? `[${addr.host}]` : addr.host;
    const url = `${this.#tls ? 'https' : 'http'}://${hostInUrl}:${port}`;
    this.#setState('listening');
    this.#log.info({ url, mode: this.#reconciler ? 'deployment' : 'manual', tls: this.#tls !== undefined }, 'control plane listening');
    this.#reconciler?.start();
    return { host: addr.host, port, url };
  }

  /**
   * Ends every stream (agents see a clean close and reconnect at once) and
   * the server. Connections still open after CLOSE_TIMEOUT_MS are destroyed,
   * so this always resolves.
   */
  close(): Promise<void> {
    this.#closed ??= this.#close();
    return this.#closed;
  }

  async #close(): Promise<void> {
    this.#setState('closing');
    this.#reconciler?.dispose();
    for (const t of this.#graceTimers.values()) clearTimeout(t);
    this.#graceTimers.clear();
    for (const s of [...this.#sessions]) this.#sessionEnded(s, 'the control plane is closing');
    for (const w of this.#waiters) {
      clearTimeout(w.timer);
      w.reject(new Error(`control plane closed while waiting for a message from node ${w.nodeId}`));
    }
    this.#waiters.clear();
    const server = this.#server;
    if (server) {
      await new Promise<void>((resolve) => {
        const force = setTimeout(() => {
          for (const s of this.#h2sessions) s.destroy();
          for (const s of this.#sockets) s.destroy();
        }, CLOSE_TIMEOUT_MS);
        server.close(() => {
          clearTimeout(force);
          resolve();
        });
        for (const s of this.#h2sessions) s.close();
      });
    }
    this.#setState('closed');
    this.#log.info('control plane closed');
  }

  /**
   * Sends a command to a connected node (manual mode, tests); returns the
   * message_id used. Throws when the node has no open stream.
   */
  send(nodeId: string, msg: ControlMessage['msg']): bigint {
    const id = this.#sendTo(nodeId, msg);
    if (id === undefined) throw failure(`node ${nodeId} is not connected; wait for it to register`);
    return id;
  }

  #sendTo(nodeId: string, msg: ControlMessage['msg']): bigint | undefined {
    const session = this.#sessionOf.get(nodeId);
    if (!session) return undefined;
    this.#nextMessageId += 1n;
    const messageId = this.#nextMessageId;
    if (!session.send(create(ControlMessageSchema, { messageId, msg }))) return undefined;
    this.#log.debug({ node: nodeId, messageId, kind: msg.case }, 'sent control message');
    return messageId;
  }

  /**
   * Scale to zero, for an orderly end of a whole local cluster (`llmgw dev
   * up` on Ctrl-C): places nothing from now on, sends StopShard for every
   * shard a node reports or was told to start, and resolves once each is
   * reported gone, or after `timeoutMs` (or when `signal` aborts) with the
   * rest in `remaining`. Placement stops first: without that, the reconciler
   * treats each STOPPED as a failure and starts the replica again after its
   * backoff. Only close() ends it; the control plane does not place again.
   */
  async stopAllShards(opts: { timeoutMs: number; signal?: AbortSignal }): Promise<StopAllShardsResult> {
    this.#reconciler?.dispose();
    const pending = new Map<string, string>(); // shard id → node id
    for (const n of this.#nodes.values()) for (const [id, s] of n.shards) if (!GONE.has(s.state)) pending.set(id, n.id);
    for (const r of this.replicas()) for (const s of r.shards) if (!GONE.has(s.state)) pending.set(s.shardId, s.nodeId);
    const stopped: string[] = [];
    const remaining: string[] = [];
    const onStatus = (nodeId: string, st: ShardStatus) => {
      if (pending.get(st.shardId) !== nodeId || !GONE.has(st.state)) return;
      pending.delete(st.shardId);
      stopped.push(st.shardId);
      if (pending.size === 0) done();
    };
    let done = () => {};
    const finished = new Promise<void>((resolve) => {
      done = resolve;
    });
    const onAbort = () => done();
    this.on('shard-status', onStatus);
    const timer = setTimeout(onAbort, opts.timeoutMs);
    opts.signal?.addEventListener('abort', onAbort, { once: true });
    try {
      for (const [shardId, nodeId] of [...pending]) {
        if (this.#sendTo(nodeId, { case: 'stop', value: create(StopShardSchema, { shardId }) }) === undefined) {
          // A node that is away cannot be told; its engines outlive this call.
          pending.delete(shardId);
          remaining.push(shardId);
        }
      }
      this.#log.info({ shards: [...pending.keys()], unreachable: remaining }, 'stopping every shard');
      if (pending.size > 0 && !opts.signal?.aborted) await finished;
    } finally {
      clearTimeout(timer);
      opts.signal?.removeEventListener('abort', onAbort);
      this.off('shard-status', onStatus);
    }
    remaining.push(...pending.keys());
    if (remaining.length > 0) this.#log.warn({ remaining, timeoutMs: opts.timeoutMs }, 'shards not reported stopped');
    return { stopped, remaining };
  }

  nodes(): NodeView[] {
    return [...this.#nodes.values()].map((n) => this.#nodeView(n));
  }

  replicas(): ReplicaView[] {
    return this.#reconciler?.replicaViews() ?? [];
  }

  /** Resolves with the first message from nodeId, received from now on, that pred accepts. */
  waitFor(nodeId: string, pred: (m: AgentMessage) => boolean, timeoutMs: number): Promise<AgentMessage> {
    return new Promise((resolve, reject) => {
      if (this.#state === 'closing' || this.#state === 'closed') {
        reject(new Error('control plane is closed'));
        return;
      }
      const waiter: Waiter = {
        nodeId,
        pred,
        resolve,
        reject,
        timer: setTimeout(() => {
          this.#waiters.delete(waiter);
          reject(new Error(`timed out after ${timeoutMs} ms waiting for a matching message from node ${nodeId}`));
        }, timeoutMs),
      };
      this.#waiters.add(waiter);
    });
  }

  /** Every message received from that node, in order (up to MESSAGE_HISTORY_LIMIT, newest kept). */
  messages(nodeId: string): AgentMessage[] {
    return [...(this.#messages.get(nodeId) ?? [])];
  }

  /** One agent stream: what it sends is read in #read; what we send is yielded from its session's outbox. */
  async *#stream(requests: AsyncIterable<AgentMessage>, ctx: HandlerContext): AsyncIterable<ControlMessage> {
    const refused = ctx.values.get(CERTIFICATE_PROBLEM);
    if (refused !== undefined) {
      this.#log.warn({ err: refused }, 'refused an agent stream');
      throw new ConnectError(refused, Code.Unauthenticated);
    }
    this.#nextSessionId += 1;
    const session = new NodeSession(this.#nextSessionId, ctx.values.get(PEER));
    this.#sessions.add(session);
    if (this.#state !== 'listening') session.end('the control plane is closing');
    // connect-node does not tell a handler that its client went away; the
    // request iterable just ends, or the signal aborts. Both end the session.
    const onAbort = () => this.#sessionEnded(session, 'the stream was cancelled (the agent went away)');
    ctx.signal.addEventListener('abort', onAbort, { once: true });
    void this.#read(session, requests);
    try {
      yield* session.outbox;
      if (session.refusal) throw session.refusal;
    } finally {
      ctx.signal.removeEventListener('abort', onAbort);
      this.#sessionEnded(session, session.endReason ?? 'the response stream ended');
    }
  }

  async #read(session: NodeSession, requests: AsyncIterable<AgentMessage>): Promise<void> {
    let reason = 'the agent closed the stream';
    try {
      for await (const m of requests) {
        // A stream replaced by a newer one from the same node is history: what
        // it still says would overwrite fresher state.
        if (session.ended) break;
        session.lastMessageAt = new Date();
        try {
          this.#receive(session, m);
        } catch (err) {
          this.#log.error({ err, node: session.nodeId }, 'internal error handling an agent message');
        }
      }
    } catch (err) {
      reason = `the stream broke: ${errorMessage(err)}`;
    } finally {
      this.#sessionEnded(session, reason);
    }
  }

  #receive(session: NodeSession, m: AgentMessage): void {
    const msg = m.msg;
    if (msg.case === 'register') {
      this.#onRegister(session, m, msg.value);
      return;
    }
    const nodeId = session.nodeId;
    if (nodeId === undefined) {
      this.#reject(session, m, `${msg.case ?? 'empty message'} before register: the first message of a stream must be Register`);
      return;
    }
    const node = this.#nodes.get(nodeId) as NodeRecord;
    switch (msg.case) {
      case 'heartbeat':
        if (msg.value.nodeId !== '' && msg.value.nodeId !== nodeId) {
          this.#reject(session, m, `heartbeat names node ${msg.value.nodeId}, but this stream registered as ${nodeId}`);
          return;
        }
        node.lastHeartbeatAt = new Date();
        session.noteHeartbeat();
        node.gpuMemoryUsedMb = [...msg.value.gpuMemoryUsedMb];
        break;
      case 'shard': {
        const st = msg.value;
        if (st.nodeId !== '' && st.nodeId !== nodeId) {
          this.#reject(session, m, `shard status names node ${st.nodeId}, but this stream registered as ${nodeId}`);
          return;
        }
        node.shards.set(st.shardId, { replicaId: st.replicaId, state: st.state });
        this.#log.info(
          { node: nodeId, shard: st.shardId, replica: st.replicaId, state: shardStateName(st.state), ...(st.error ? { err: st.error } : {}), ...(st.exitCode ? { exitCode: st.exitCode } : {}) },
          'shard status',
        );
        this.#record(nodeId, m);
        this.#reconciler?.onShardStatus(nodeId, st);
        this.emit('shard-status', nodeId, st);
        this.#delivered(nodeId, m);
        return;
      }
      case 'inventory':
        node.inventory = msg.value;
        this.#log.info({ node: nodeId, gpus: msg.value.gpus.length, warnings: msg.value.warnings }, 'inventory updated');
        this.#record(nodeId, m);
        this.#reconciler?.placeAll();
        this.#delivered(nodeId, m);
        return;
      case 'gpuEvent': {
        const e = msg.value;
        // Placement learns the GPU's health from the Inventory that follows; the event says why, for whoever reads this log.
        this.#log.warn(
          { node: nodeId, gpu: e.gpuIndex, kind: GpuEventKind[e.kind] ?? String(e.kind), xid: e.xid || undefined, source: e.source, shards: e.shardIds, err: e.message },
          'gpu event',
        );
        this.#record(nodeId, m);
        this.#delivered(nodeId, m);
        return;
      }
      default:
        this.#reject(session, m, 'empty message: none of register, heartbeat, shard, inventory or gpu_event is set');
        return;
    }
    this.#record(nodeId, m);
    this.#delivered(nodeId, m);
  }

  #onRegister(session: NodeSession, m: AgentMessage, reg: Register): void {
    const nodeId = reg.nodeId;
    if (nodeId === '') {
      this.#reject(session, m, 'register without node_id: set node_id in the agent configuration');
      return;
    }
    if (session.nodeId !== undefined && session.nodeId !== nodeId) {
      this.#reject(session, m, `this stream registered as ${session.nodeId}; open a new stream to register as ${nodeId}`);
      return;
    }
    const previous = this.#sessionOf.get(nodeId);
    const liveMs = previous && previous !== session && !previous.ended ? previous.livenessMs(this.#duplicateLivenessMs) : 0;
    if (previous && Date.now() - previous.lastMessageAt.getTime() < liveMs) {
      this.#refuseDuplicate(session, previous, nodeId, liveMs);
      return;
    }
    session.nodeId = nodeId;
    session.registeredAt = new Date();
    this.#sessionOf.set(nodeId, session);
    // The newest stream wins: an agent that reconnects after a network
    // partition opens a new stream while the server may not yet have noticed
    // the old one is dead, and commands must not go down the dead one.
    if (previous && previous !== session) {
      this.#sessionEnded(previous, 'replaced by a newer stream from the same node');
    }
    clearTimeout(this.#graceTimers.get(nodeId));
    this.#graceTimers.delete(nodeId);

    const inventory = reg.inventory ?? create(InventorySchema);
    const node: NodeRecord = {
      id: nodeId,
      register: reg,
      inventory,
      connected: true,
      connectedSince: new Date(),
      lastHeartbeatAt: this.#nodes.get(nodeId)?.lastHeartbeatAt,
      gpuMemoryUsedMb: inventory.gpus.map((g) => g.memoryUsedMb),
      shards: new Map(reg.runningShards.map((rs) => [rs.shardId, { replicaId: rs.replicaId, state: rs.state }])),
    };
    this.#nodes.set(nodeId, node);
    this.#record(nodeId, m);
    this.#sendTo(nodeId, { case: 'ack', value: create(AckSchema, { messageId: m.messageId, ok: true }) });
    this.#log.info(
      {
        node: nodeId,
        hostname: reg.hostname,
        mgmtAddr: reg.mgmtAddr,
        version: reg.version,
        gpus: inventory.gpus.length,
        runningShards: reg.runningShards.map((s) => s.shardId),
        ...(inventory.warnings.length ? { warnings: inventory.warnings } : {}),
      },
      previous ? 'node re-registered' : 'node registered',
    );
    this.#reconciler?.onRegister(nodeId, reg);
    this.emit('node-registered', nodeId, reg);
    this.#delivered(nodeId, m);
  }

  /**
   * Two agents with one node_id would take turns replacing each other's
   * stream: replicas flap every second and both agents report an unreachable
   * control plane. The live one keeps the node; the newcomer's stream ends
   * with a reason it logs, and nothing of what it sent is recorded.
   */
  #refuseDuplicate(session: NodeSession, live: NodeSession, nodeId: string, liveMs: number): void {
    const since = (live.registeredAt ?? live.lastMessageAt).toISOString();
    const reason =
      `node ${nodeId} is already connected from ${live.peer}, since ${since}; ` +
      `give this agent its own node_id (the connected one is replaced once it has been silent for ${(liveMs / 1000).toFixed(1)} s)`;
    this.#log.warn({ node: nodeId, peer: session.peer, livePeer: live.peer, err: reason }, 'refused a second agent with the same node_id');
    this.emit('node-refused', nodeId, reason);
    session.refuse(new ConnectError(reason, Code.AlreadyExists));
    this.#sessions.delete(session);
  }

  /** Refuses one message and says why, to the agent (an Ack) and in our log; the stream stays open. */
  #reject(session: NodeSession, m: AgentMessage, error: string): void {
    this.#log.warn({ node: session.nodeId, session: session.id, messageId: m.messageId, kind: m.msg.case, err: error }, 'rejected an agent message');
    this.#nextMessageId += 1n;
    session.send(
      create(ControlMessageSchema, {
        messageId: this.#nextMessageId,
        msg: { case: 'ack', value: create(AckSchema, { messageId: m.messageId, ok: false, error }) },
      }),
    );
  }

  #record(nodeId: string, m: AgentMessage): void {
    let list = this.#messages.get(nodeId);
    if (!list) {
      list = [];
      this.#messages.set(nodeId, list);
    }
    list.push(m);
    if (list.length > MESSAGE_HISTORY_LIMIT) list.splice(0, list.length - MESSAGE_HISTORY_LIMIT);
  }

  /** Raises 'message' and settles waiters, after the message's effects are in place. */
  #delivered(nodeId: string, m: AgentMessage): void {
    this.emit('message', nodeId, m);
    for (const w of [...this.#waiters]) {
      if (w.nodeId !== nodeId) continue;
      let match: boolean;
      try {
        match = w.pred(m);
      } catch (err) {
        this.#waiters.delete(w);
        clearTimeout(w.timer);
        w.reject(err instanceof Error ? err : new Error(String(err)));
        continue;
      }
      if (match) {
        this.#waiters.delete(w);
        clearTimeout(w.timer);
        w.resolve(m);
      }
    }
  }

  /** Idempotent: the first caller's reason is the one logged. */
  #sessionEnded(session: NodeSession, reason: string): void {
    session.end(reason);
    if (!this.#sessions.delete(session)) return;
    const nodeId = session.nodeId;
    if (nodeId === undefined || this.#sessionOf.get(nodeId) !== session) return;
    this.#sessionOf.delete(nodeId);
    const node = this.#nodes.get(nodeId);
    if (node) {
      node.connected = false;
      node.disconnectedAt = new Date();
    }
    const why = session.endReason ?? reason;
    this.#log.warn({ node: nodeId, reason: why }, 'node disconnected; its shards are kept');
    this.emit('node-disconnected', nodeId, why);
    if (this.#reconciler && this.#state === 'listening') {
      this.#graceTimers.set(
        nodeId,
        setTimeout(() => {
          this.#graceTimers.delete(nodeId);
          if (this.#nodes.get(nodeId)?.connected) return;
          this.#log.warn({ node: nodeId, graceMs: this.#nodeGraceMs }, 'node did not come back within the grace period; placing its replicas elsewhere');
          this.#reconciler?.onNodeLost(nodeId);
        }, this.#nodeGraceMs),
      );
    }
  }

  #nodeView(n: NodeRecord): NodeView {
    const owners = this.#reconciler?.gpuOwners(n.id) ?? new Map<number, string>();
    const gpus = n.inventory.gpus.map((g, i) => ({
      index: g.index,
      name: g.name,
      computeCapability: g.computeCapability,
      healthy: g.healthy,
      memoryTotalMb: g.memoryTotalMb,
      memoryUsedMb: n.gpuMemoryUsedMb[i] ?? g.memoryUsedMb,
      ...(owners.has(g.index) ? { shardId: owners.get(g.index) } : {}),
    }));
    const view: NodeView = {
      id: n.id,
      hostname: n.register.hostname,
      mgmtAddr: n.register.mgmtAddr,
      version: n.register.version,
      labels: { ...n.register.labels },
      connected: n.connected,
      inventory: {
        gpuCount: gpus.length,
        healthyGpuCount: gpus.filter((g) => g.healthy).length,
        driverVersion: n.inventory.driverVersion,
        cudaVersion: n.inventory.cudaVersion,
        hcaCount: n.inventory.hcas.length,
        warnings: [...n.inventory.warnings],
      },
      gpus,
      freeGpus: gpus.filter((g) => g.healthy && !owners.has(g.index)).map((g) => g.index),
      shards: [...n.shards].map(([shardId, s]) => ({ shardId, replicaId: s.replicaId, state: s.state, stateName: shardStateName(s.state) })),
    };
    if (n.connectedSince) view.connectedSince = n.connectedSince;
    if (n.disconnectedAt) view.disconnectedAt = n.disconnectedAt;
    if (n.lastHeartbeatAt) view.lastHeartbeatAt = n.lastHeartbeatAt;
    return view;
  }
}

function peerOf(req: { socket?: unknown }): string {
  const socket = req.socket as { remoteAddress?: string; remotePort?: number } | undefined;
  if (!socket?.remoteAddress) return 'an unknown peer';
  const host = socket.remoteAddress.includes(':') ? `[${socket.remoteAddress}]` : socket.remoteAddress;
  return socket.remotePort ? `${host}:${socket.remotePort}` : host;
}
