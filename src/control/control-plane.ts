import { EventEmitter } from 'node:events';
import type { AgentMessage, ControlMessage } from '../gen/llmgw/v1/agent_pb.js';
import { failure } from '../lib/errors.js';
import { type Logger, silentLogger } from '../lib/logger.js';
import { AgentMessageReceiver } from './agent-message-receiver.js';
import { AgentStreamHandler } from './agent-stream-handler.js';
import type { ControlPlaneEvents } from './control-plane-events.js';
import {
  type ControlPlaneOptions,
  DEFAULT_DUPLICATE_LIVENESS_MS,
  DEFAULT_NODE_GRACE_MS,
  DEFAULT_PLACEMENT_DELAY_MS,
  DEFAULT_RETRY_BACKOFF_MS,
} from './control-plane-options.js';
import type { AgentServerTls } from './create-agent-server.js';
import { type ListeningAgentServer, listenAgentServer } from './listen-agent-server.js';
import { MessageHistory } from './message-history.js';
import { DEFAULT_RANK_ZERO_STOP_WAIT_MS } from './rank-ordered-stops.js';
import { MessageWaiters } from './message-waiters.js';
import { NodeSessions } from './node-sessions.js';
import type { NodeRecord, NodeView } from './node-view.js';
import { DEFAULT_PORT_RANGE } from './port-pool.js';
import { readEphemeralPortRangeSync } from '../lib/ephemeral-port-range.js';
import type { Unplaceable } from './check-deployment-placeable.js';
import { Reconciler } from './reconciler.js';
import type { ReplicaView } from './replica-view.js';
import { type StopAllShardsResult, stopAllShards } from './stop-all-shards.js';
import { toNodeView } from './to-node-view.js';

// What callers imported from this module before it was split stays importable from here.
export type { ControlPlaneEvents } from './control-plane-events.js';
export * from './control-plane-options.js';
export { CLOSE_TIMEOUT_MS } from './listen-agent-server.js';
export { MESSAGE_HISTORY_LIMIT } from './message-history.js';
export type { StopAllShardsResult } from './stop-all-shards.js';

/** new → listening → closing → closed; changed only in #setState. */
export type ControlPlaneState = 'new' | 'listening' | 'closing' | 'closed';

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
  readonly #reconciler?: Reconciler;
  readonly #nodes = new Map<string, NodeRecord>();
  readonly #sessions: NodeSessions;
  readonly #history = new MessageHistory();
  readonly #waiters = new MessageWaiters();
  readonly #streams: AgentStreamHandler;
  readonly #rankZeroStopWaitMs: number;
  #server?: ListeningAgentServer;
  #state: ControlPlaneState = 'new';
  #closed?: Promise<void>;

  constructor(opts: ControlPlaneOptions) {
    super();
    this.#log = opts.logger ?? silentLogger;
    this.#tls = opts.tls;
    const nodeGraceMs = opts.nodeGraceMs ?? DEFAULT_NODE_GRACE_MS;
    this.#rankZeroStopWaitMs = opts.rankZeroStopWaitMs ?? DEFAULT_RANK_ZERO_STOP_WAIT_MS;
    if (opts.deployment) {
      this.#reconciler = new Reconciler(
        {
          deployment: opts.deployment,
          portRange: opts.portRange ?? DEFAULT_PORT_RANGE,
          avoidPorts: opts.avoidPorts === undefined ? readEphemeralPortRangeSync() : (opts.avoidPorts ?? undefined),
          retryBackoffMs: opts.retryBackoffMs ?? DEFAULT_RETRY_BACKOFF_MS,
          maxRetryBackoffMs: opts.maxRetryBackoffMs,
          stableReadyMs: opts.stableReadyMs,
          nodeGraceMs,
          rankZeroStopWaitMs: this.#rankZeroStopWaitMs,
          placementDelayMs: opts.placementDelayMs ?? DEFAULT_PLACEMENT_DELAY_MS,
          logger: this.#log,
        },
        {
          send: (nodeId, msg) => this.#sessions.sendTo(nodeId, msg) !== undefined,
          node: (nodeId) => this.#nodes.get(nodeId),
          nodes: () => this.#nodes.values(),
          replicaReady: (view) => {
            this.#log.info({ replica: view.id, url: view.url }, 'replica ready');
            this.emit('replica-ready', view);
          },
        },
      );
    }
    const reconciler = this.#reconciler;
    const listening = () => this.#state === 'listening';
    this.#sessions = new NodeSessions({
      nodes: this.#nodes,
      events: this,
      log: this.#log,
      duplicateLivenessMs: opts.duplicateLivenessMs ?? DEFAULT_DUPLICATE_LIVENESS_MS,
      nodeGraceMs,
      onNodeLost: reconciler && ((nodeId) => reconciler.onNodeLost(nodeId)),
      listening,
    });
    const receiver = new AgentMessageReceiver({
      nodes: this.#nodes,
      sessions: this.#sessions,
      reconciler,
      history: this.#history,
      waiters: this.#waiters,
      events: this,
      log: this.#log,
    });
    this.#streams = new AgentStreamHandler({ sessions: this.#sessions, receiver, log: this.#log, listening });
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
    const server = await listenAgentServer(this.#streams.requestHandler(), this.#tls, addr, this.#log);
    this.#server = server;
    this.#setState('listening');
    this.#log.info({ url: server.url, mode: this.#reconciler ? 'deployment' : 'manual', tls: this.#tls !== undefined }, 'control plane listening');
    this.#reconciler?.start();
    return { host: addr.host, port: server.port, url: server.url };
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
    this.#sessions.endAll('the control plane is closing');
    this.#waiters.rejectAll((nodeId) => `control plane closed while waiting for a message from node ${nodeId}`);
    if (this.#server) await this.#server.close();
    this.#setState('closed');
    this.#log.info('control plane closed');
  }

  /**
   * Sends a command to a connected node (manual mode, tests); returns the
   * message_id used. Throws when the node has no open stream.
   */
  send(nodeId: string, msg: ControlMessage['msg']): bigint {
    const id = this.#sessions.sendTo(nodeId, msg);
    if (id === undefined) throw failure(`node ${nodeId} is not connected; wait for it to register`);
    return id;
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
    return stopAllShards(
      {
        nodes: this.#nodes.values(),
        shards: this.#reconciler?.shardRecords() ?? [],
        send: (nodeId, msg) => this.#sessions.sendTo(nodeId, msg) !== undefined,
        events: this,
        rankZeroStopWaitMs: this.#rankZeroStopWaitMs,
        log: this.#log,
      },
      opts,
    );
  }

  nodes(): NodeView[] {
    return [...this.#nodes.values()].map((n) => toNodeView(n, this.#reconciler?.gpuOwners(n.id) ?? new Map<number, string>()));
  }

  replicas(): ReplicaView[] {
    return this.#reconciler?.replicaViews() ?? [];
  }

  /** The first replica of the deployment the connected nodes cannot hold even when empty; undefined when all fit (or no deployment). */
  unplaceable(): Unplaceable | undefined {
    return this.#reconciler?.unplaceable();
  }

  /** Resolves with the first message from nodeId, received from now on, that pred accepts. */
  waitFor(nodeId: string, pred: (m: AgentMessage) => boolean, timeoutMs: number): Promise<AgentMessage> {
    if (this.#state === 'closing' || this.#state === 'closed') return Promise.reject(new Error('control plane is closed'));
    return this.#waiters.wait(nodeId, pred, timeoutMs);
  }

  /** Every message received from that node, in order (up to MESSAGE_HISTORY_LIMIT, newest kept). */
  messages(nodeId: string): AgentMessage[] {
    return this.#history.of(nodeId);
  }
}
