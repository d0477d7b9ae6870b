import { type ControlMessage, type Register, type RunningShard, ShardState, type ShardStatus } from '../gen/llmgw/v1/agent_pb.js';
import type { Logger } from '../lib/logger.js';
import type { PortRange } from '../lib/ephemeral-port-range.js';
import { isValidShardId } from '../lib/shard-id.js';
import { isTimedOnAdoption, TERMINAL_SHARD_STATES } from '../lib/shard-states.js';
import { adoptionConflict } from './adoption-conflict.js';
import { checkDeploymentPlaceable, type Unplaceable } from './check-deployment-placeable.js';
import type { Deployment } from './deployment.js';
import type { NodeRecord } from './node-view.js';
import { type PlacementNode, placeReplica } from './place-replica.js';
import { nodeTakesShards, refusingConditions } from './node-takes-shards.js';
import { PortPool } from './port-pool.js';
import { ReplicaLifecycle } from './replica-lifecycle.js';
import type { ReplicaRecord, ShardRecord } from './replica-record.js';
import { generationOf, replicaShardId } from './replica-shard-id.js';
import type { ReplicaView } from './replica-view.js';
import { shardFromRunning } from './shard-from-running.js';
import { reserveShardPorts } from './shard-ports.js';
import { stateName } from '../lib/shard-states.js';
import { gangOf, startShardMessage } from './start-shard-message.js';
import { prefetchForNode } from './prefetch-for-node.js';
import { StoppingShards } from './stopping-shards.js';
import { toReplicaView } from './to-replica-view.js';
import { warmModels } from './warm-models.js';

/** What the reconciler needs from the control plane around it. */
export interface ReconcilerHost {
  /** Sends to a node's current stream; false when the node is not connected. */
  send(nodeId: string, msg: ControlMessage['msg']): boolean;
  node(nodeId: string): NodeRecord | undefined;
  nodes(): Iterable<NodeRecord>;
  replicaReady(view: ReplicaView): void;
}

export interface ReconcilerOptions {
  deployment: Deployment;
  portRange: readonly [number, number];
  /** Ports never handed out: the node's ephemeral range (undefined: none known). */
  avoidPorts?: PortRange;
  retryBackoffMs: number;
  /** The longest crash-loop backoff (default 5 min). */
  maxRetryBackoffMs?: number;
  /** READY this long resets a replica's failures in a row (default 5 min). */
  stableReadyMs?: number;
  /** How long adopted shards of a multi-node replica wait for their other ranks' nodes. */
  nodeGraceMs: number;
  /** How long a stopped multi-node replica's worker ranks wait for rank 0 to be reported gone. */
  rankZeroStopWaitMs: number;
  placementDelayMs: number;
  logger: Logger;
}

/**
 * Desired state against what nodes report: places replicas on free GPUs,
 * times out startups, replaces failed replicas, and adopts what is already
 * running. How a replica's phase moves, and the backoff between attempts,
 * is ReplicaLifecycle's.
 */
export class Reconciler {
  readonly #opts: ReconcilerOptions;
  readonly #host: ReconcilerHost;
  readonly #log: Logger;
  readonly #ports: PortPool;
  readonly #replicas = new Map<string, ReplicaRecord>();
  readonly #stopping: StoppingShards;
  readonly #lifecycle: ReplicaLifecycle;
  #settled = false;
  #settleTimer?: NodeJS.Timeout;
  #disposed = false;

  constructor(opts: ReconcilerOptions, host: ReconcilerHost) {
    this.#opts = opts;
    this.#host = host;
    this.#log = opts.logger;
    this.#ports = new PortPool(opts.portRange, opts.avoidPorts);
    this.#stopping = new StoppingShards({
      ports: this.#ports,
      send: (nodeId, msg) => host.send(nodeId, msg),
      rankZeroStopWaitMs: opts.rankZeroStopWaitMs,
      log: this.#log,
    });
    this.#lifecycle = new ReplicaLifecycle({
      log: this.#log,
      ports: this.#ports,
      stopping: this.#stopping,
      retryBackoffMs: opts.retryBackoffMs,
      maxRetryBackoffMs: opts.maxRetryBackoffMs,
      stableReadyMs: opts.stableReadyMs,
      nodeGraceMs: opts.nodeGraceMs,
      placeAll: () => this.placeAll(),
      ready: (replica) => host.replicaReady(this.#view(replica)),
    });
    if (this.#ports.avoidedCount > 0) {
      this.#log.warn(
        { portRange: opts.portRange, ephemeral: opts.avoidPorts, skipped: this.#ports.avoidedCount },
        'part of the shard port range is inside the ephemeral port range; those ports are not handed out',
      );
    }
    for (const spec of opts.deployment.replicas) {
      this.#replicas.set(spec.id, { spec, phase: 'pending', generation: 0, shards: [] });
    }
  }

  /**
   * Called once the server listens. Placement waits placementDelayMs first:
   * after a control-plane restart the nodes re-register one by one, and a
   * replica placed before its node has reported it running would start a
   * duplicate and then stop the healthy original.
   */
  start(): void {
    if (this.#opts.placementDelayMs <= 0) {
      this.#settled = true;
      this.placeAll();
      return;
    }
    this.#settleTimer = setTimeout(() => {
      this.#settled = true;
      this.placeAll();
    }, this.#opts.placementDelayMs);
  }

  dispose(): void {
    this.#disposed = true;
    clearTimeout(this.#settleTimer);
    // Stops still held behind a rank 0 are not sent: stopAllShards, or the
    // next control plane on re-registration, stops those shards itself.
    this.#stopping.dispose();
    for (const r of this.#replicas.values()) {
      clearTimeout(r.retryTimer);
      clearTimeout(r.waitTimer);
      for (const s of r.shards) clearTimeout(s.startupTimer);
    }
  }

  /** Reconciles a node's running_shards, on its first registration and every one after. */
  onRegister(nodeId: string, register: Register): void {
    const reported = new Map(register.runningShards.map((rs) => [rs.shardId, rs]));

    // Ours, on this node, but no longer reported: the agent restarted without
    // it (or never received the start). Nothing will ever report it again.
    for (const replica of this.#replicas.values()) {
      const lost = this.#lifecycle.forgetShards(replica, (s) => s.nodeId === nodeId && !reported.has(s.shardId));
      if (lost[0]) this.#lifecycle.failCrashed(replica, `shard ${lost[0].shardId} is no longer running on node ${nodeId}`);
    }
    for (const s of this.#stopping.values()) {
      if (s.nodeId === nodeId && !reported.has(s.shardId)) this.#stopping.drop(s);
    }

    for (const rs of register.runningShards) this.#reconcileRunning(nodeId, rs);
    // Models kept warm on the nodes that may run them (profile prefetch, issue 39).
    for (const m of prefetchForNode(this.#opts.deployment, register)) {
      this.#log.info({ node: nodeId, model: m.repo, revision: m.revision, pageCache: m.pageCache }, 'prefetching a profile\'s model on the node');
      this.#host.send(nodeId, { case: 'prefetch', value: m });
    }
    this.placeAll();
  }

  #reconcileRunning(nodeId: string, rs: RunningShard): void {
    const log = this.#log.child({ node: nodeId, shard: rs.shardId, replica: rs.replicaId });
    const stopping = this.#stopping.get(rs.shardId);
    if (stopping) {
      // The stop may have been lost with the previous stream; saying it again is harmless.
      log.info('shard told to stop is still running; stopping it again');
      this.#stopping.resendStop(nodeId, rs.shardId);
      return;
    }
    const replica = this.#replicas.get(rs.replicaId);
    if (!replica) {
      log.info('stopping running shard of a replica not in the deployment');
      this.#stopping.stopRunning(nodeId, rs);
      return;
    }
    const current = replica.shards.find((s) => s.shardId === rs.shardId);
    if (current) {
      if (current.nodeId !== nodeId) {
        log.warn({ placedOn: current.nodeId }, 'shard reported by a node it was not placed on; stopping that copy');
        this.#stopping.stopRunning(nodeId, rs);
        return;
      }
      // An agent restart: the engine kept running, and so does our record. A gang break it saw meanwhile fences the gang.
      if (rs.state !== ShardState.UNSPECIFIED) this.#lifecycle.updateShardState(replica, current, rs.state, '', 0, rs.gangBreak);
      return;
    }
    if (TERMINAL_SHARD_STATES.has(rs.state)) {
      // An ended run the node still keeps (a FAILED record): its generation is taken, so the next
      // one placed is numbered after it. A restarted control plane started again from g1, and
      // crash-0-g2-r0 named two different runs on the node (walkthrough 4, O16).
      replica.generation = Math.max(replica.generation, generationOf(rs.shardId) ?? 0);
      return;
    }
    const generation = generationOf(rs.shardId) ?? replica.generation;
    const conflict = adoptionConflict(replica, rs, generation);
    if (conflict) {
      log.info({ why: conflict }, 'stopping running shard that does not fit the desired state');
      this.#stopping.stopRunning(nodeId, rs);
      return;
    }

    // Adopt: this is the point of running_shards. A healthy engine found
    // running is worth more than any placement we would make instead.
    clearTimeout(replica.retryTimer);
    replica.retryTimer = undefined;
    const shard = shardFromRunning(nodeId, rs, generation);
    reserveShardPorts(this.#ports, shard);
    replica.generation = Math.max(replica.generation, generation);
    replica.shards.push(shard);
    replica.shards.sort((a, b) => a.rank - b.rank);
    log.info({ state: stateName(shard.state), generation }, 'adopted running shard');
    // An adopted shard still loading gets a full startup timeout from now:
    // when it was launched is not known here, and cutting it short would kill
    // a model that may be seconds from ready.
    // A SLEEPING shard is not loading: a startup timer would replace it for sleeping.
    if (isTimedOnAdoption(shard.state)) this.#lifecycle.armStartupTimer(replica, shard);
    this.#lifecycle.refreshPhase(replica);
  }

  onShardStatus(nodeId: string, st: ShardStatus): void {
    const stopping = this.#stopping.get(st.shardId);
    if (stopping) {
      if (TERMINAL_SHARD_STATES.has(st.state)) this.#stopping.drop(stopping);
      else stopping.state = st.state;
      this.placeAll();
      return;
    }
    const replica = this.#replicas.get(st.replicaId);
    const shard = replica?.shards.find((s) => s.shardId === st.shardId);
    if (!replica || !shard || shard.nodeId !== nodeId) {
      this.#log.debug({ node: nodeId, shard: st.shardId, state: stateName(st.state) }, 'status of a shard not in the desired state; ignored');
      return;
    }
    this.#lifecycle.updateShardState(replica, shard, st.state, st.error, st.exitCode, st.gangBreak);
    this.placeAll();
  }


  /** A node stayed away longer than the grace: its shards are gone for placement purposes. */
  onNodeLost(nodeId: string): void {
    for (const s of [...this.#stopping.values()]) if (s.nodeId === nodeId) this.#stopping.drop(s);
    for (const replica of this.#replicas.values()) {
      if (this.#lifecycle.forgetShards(replica, (s) => s.nodeId === nodeId).length > 0) {
        this.#lifecycle.fail(replica, `node ${nodeId} has been disconnected longer than the grace period`, this.#opts.retryBackoffMs);
      }
    }
    this.placeAll();
  }

  /** Places every pending replica that fits, in deployment order. */
  placeAll(): void {
    if (!this.#settled || this.#disposed) return;
    for (const replica of this.#replicas.values()) {
      if (replica.phase === 'pending') this.#place(replica);
    }
  }

  #place(replica: ReplicaRecord): void {
    const spec = replica.spec;
    const log = this.#log.child({ replica: spec.id });
    const placed = placeReplica(spec, this.#placementNodes());
    // Nodes that take no new shard are no placement candidates, but an operator must read why (walkthrough 4, O18).
    const held = [...this.#host.nodes()].filter((n) => n.connected && !nodeTakesShards(n.register, n.inventory));
    const result = placed.ok || held.length === 0 ? placed : { ok: false as const, reason: `${placed.reason}; taking no new shard: ${held.map((n) => `${n.id} (${refusingConditions(n.register, n.inventory)})`).join(', ')}` };
    if (!result.ok) {
      if (replica.lastError !== result.reason) log.info({ why: result.reason }, 'replica cannot be placed yet');
      replica.lastError = result.reason;
      return;
    }
    const httpPorts = result.shards.map(() => this.#ports.take());
    const leaderPort = spec.nnodes > 1 ? this.#ports.take() : 0;
    if (httpPorts.some((p) => p === undefined) || leaderPort === undefined) {
      for (const p of [...httpPorts, leaderPort]) if (p) this.#ports.release(p);
      replica.lastError = 'no free port left in portRange';
      log.warn('replica cannot be placed: no free port left in portRange');
      return;
    }
    const generation = replica.generation + 1;
    const leaderNode = this.#host.node(result.shards[0]?.nodeId ?? '');
    const leaderAddr = spec.nnodes > 1 ? nodeAddress(leaderNode) : '';
    const shards = result.shards.map(
      (p, rank): ShardRecord => ({
        shardId: replicaShardId(spec.id, generation, rank),
        replicaId: spec.id,
        rank,
        nnodes: spec.nnodes,
        nodeId: p.nodeId,
        gpuIndices: p.gpuIndices,
        httpPort: httpPorts[rank] as number,
        leaderAddr,
        leaderPort,
        generation,
        state: ShardState.STARTING,
        error: '',
        exitCode: 0,
        adopted: false,
      }),
    );
    // Replica ids are validated on load to leave room for this suffix.
    for (const s of shards) if (!isValidShardId(s.shardId)) throw new Error(`internal: invalid shard id ${s.shardId}`);
    replica.generation = generation;
    replica.shards = shards;
    // Why these nodes, when an agent measured how soon it would serve (issue 41).
    if (result.considered) log.info({ considered: result.considered }, `placed by expected time to READY: ${result.considered.join(', ')}`);
    this.#lifecycle.setPhase(replica, 'starting', `placed generation ${generation}`);
    const gang = gangOf(shards, (nodeId) => this.#host.node(nodeId)?.register.gangEndpoint ?? '');
    for (const s of shards) {
      log.info({ shard: s.shardId, node: s.nodeId, gpus: s.gpuIndices, port: s.httpPort, rank: s.rank }, 'starting shard');
      this.#host.send(s.nodeId, { case: 'start', value: startShardMessage(s, spec, gang) });
      this.#lifecycle.armStartupTimer(replica, s);
    }
  }

  /** The first replica of the deployment the connected nodes cannot hold even empty (checkDeploymentPlaceable). */
  unplaceable(): Unplaceable | undefined {
    return checkDeploymentPlaceable(
      [...this.#replicas.values()].map((r) => r.spec),
      this.#placementNodes().map((n) => ({ ...n, usedGpus: new Set<number>() })),
    );
  }

  #placementNodes(): PlacementNode[] {
    const out: PlacementNode[] = [];
    for (const node of this.#host.nodes()) {
      // A cordoned node (or one with disk pressure) keeps its shards but gets no new one.
      if (!node.connected || !nodeTakesShards(node.register, node.inventory)) continue;
      out.push({
        id: node.id,
        labels: node.register.labels,
        gpus: node.inventory.gpus,
        usedGpus: new Set(this.gpuOwners(node.id).keys()),
        processes: node.inventory.processes,
        warmModels: warmModels(node.inventory),
        warmth: node.inventory.warmth,
      });
    }
    return out;
  }

  /** GPU index → shard id of every shard placed on a node, including those still stopping. */
  gpuOwners(nodeId: string): Map<number, string> {
    const owners = new Map<number, string>();
    const add = (s: ShardRecord) => {
      if (s.nodeId === nodeId) for (const g of s.gpuIndices) owners.set(g, s.shardId);
    };
    for (const r of this.#replicas.values()) r.shards.forEach(add);
    for (const s of this.#stopping.values()) add(s);
    return owners;
  }

  /** Every shard placed or adopted (current generations) and every one still stopping. */
  shardRecords(): ShardRecord[] {
    return [...[...this.#replicas.values()].flatMap((r) => r.shards), ...this.#stopping.values()];
  }

  replicaViews(): ReplicaView[] {
    return [...this.#replicas.values()].map((r) => this.#view(r));
  }

  #view(r: ReplicaRecord): ReplicaView {
    return toReplicaView(r, (nodeId) => this.#host.node(nodeId));
  }
}

/** Where other ranks reach the leader: its management address, else its hostname, else loopback (one-machine clusters). */
function nodeAddress(node: NodeRecord | undefined): string {
  return node?.register.mgmtAddr || node?.register.hostname || '127.0.0.1';
}
