import { create } from '@bufbuild/protobuf';
import { DurationSchema } from '@bufbuild/protobuf/wkt';
import {
  type ControlMessage,
  ProfileSchema,
  type Register,
  type RunningShard,
  ShardState,
  type ShardStatus,
  StartShardSchema,
  StopShardSchema,
} from '../gen/llmgw/v1/agent_pb.js';
import { isValidShardId } from '../lib/shard-id.js';
import type { Logger } from '../lib/logger.js';
import type { Deployment, DeploymentProfile, DeploymentReplica } from './deployment.js';
import type { NodeRecord } from './node-view.js';
import { placeReplica, type PlacementNode } from './place-replica.js';
import { PortPool } from './port-pool.js';
import type { ReplicaPhase, ReplicaView, ShardView } from './replica-view.js';
import { shardStateName } from './shard-state-name.js';

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
  avoidPorts?: readonly [number, number];
  retryBackoffMs: number;
  /** How long adopted shards of a multi-node replica wait for their other ranks' nodes. */
  nodeGraceMs: number;
  placementDelayMs: number;
  logger: Logger;
}

/** A shard as the reconciler keeps it: what its view shows (less the derived stateName), and its startup timer. */
interface ShardRecord extends Omit<ShardView, 'stateName'> {
  startupTimer?: NodeJS.Timeout;
}

interface ReplicaRecord {
  spec: DeploymentReplica;
  phase: ReplicaPhase;
  generation: number;
  /** Shards of the current generation, by rank order once complete. */
  shards: ShardRecord[];
  lastError?: string;
  retryTimer?: NodeJS.Timeout;
  waitTimer?: NodeJS.Timeout;
}

const TERMINAL = new Set([ShardState.STOPPED, ShardState.FAILED, ShardState.EXITED]);
const SHARD_GENERATION = /-g(\d+)-r\d+$/;

/**
 * Desired state against what nodes report: places replicas on free GPUs,
 * times out startups, replaces failed replicas, and adopts what is already
 * running. Crash loops are decided here, with a backoff between attempts,
 * never on the node: a node only ever sees start and stop.
 */
export class Reconciler {
  readonly #opts: ReconcilerOptions;
  readonly #host: ReconcilerHost;
  readonly #log: Logger;
  readonly #ports: PortPool;
  readonly #replicas = new Map<string, ReplicaRecord>();
  /** Shards told to stop, kept until reported gone: their GPUs and ports are not free before that. */
  readonly #stopping = new Map<string, ShardRecord>();
  #settled = false;
  #settleTimer?: NodeJS.Timeout;
  #disposed = false;

  constructor(opts: ReconcilerOptions, host: ReconcilerHost) {
    this.#opts = opts;
    this.#host = host;
    this.#log = opts.logger;
    this.#ports = new PortPool(opts.portRange, opts.avoidPorts);
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
      const lost = this.#forgetShards(replica, (s) => s.nodeId === nodeId && !reported.has(s.shardId));
      if (lost[0]) this.#failReplica(replica, `shard ${lost[0].shardId} is no longer running on node ${nodeId}`, this.#opts.retryBackoffMs);
    }
    for (const [id, s] of this.#stopping) {
      if (s.nodeId === nodeId && !reported.has(id)) this.#dropStopping(s);
    }

    for (const rs of register.runningShards) this.#reconcileRunning(nodeId, rs);
    this.placeAll();
  }

  #reconcileRunning(nodeId: string, rs: RunningShard): void {
    const log = this.#log.child({ node: nodeId, shard: rs.shardId, replica: rs.replicaId });
    const stopping = this.#stopping.get(rs.shardId);
    if (stopping) {
      // The stop may have been lost with the previous stream; saying it again is harmless.
      log.info('shard told to stop is still running; stopping it again');
      this.#sendStop(nodeId, rs.shardId);
      return;
    }
    const replica = this.#replicas.get(rs.replicaId);
    if (!replica) {
      log.info('stopping running shard of a replica not in the deployment');
      this.#stopRunning(nodeId, rs);
      return;
    }
    const current = replica.shards.find((s) => s.shardId === rs.shardId);
    if (current) {
      if (current.nodeId !== nodeId) {
        log.warn({ placedOn: current.nodeId }, 'shard reported by a node it was not placed on; stopping that copy');
        this.#stopRunning(nodeId, rs);
        return;
      }
      // An agent restart: the engine kept running, and so does our record.
      if (rs.state !== ShardState.UNSPECIFIED) this.#updateShardState(replica, current, rs.state, '', 0);
      return;
    }
    if (TERMINAL.has(rs.state)) return;
    const generation = generationOf(rs.shardId) ?? replica.generation;
    const spec = replica.spec;
    const conflict =
      rs.nnodes !== spec.nnodes || rs.rank < 0 || rs.rank >= spec.nnodes
        ? `it spans ${rs.nnodes} node(s) as rank ${rs.rank}, the deployment says ${spec.nnodes}`
        : replica.shards.some((s) => s.rank === rs.rank)
          ? `replica ${spec.id} already has rank ${rs.rank} (${replica.shards.find((s) => s.rank === rs.rank)?.shardId})`
          : replica.shards.length > 0 && replica.shards[0]?.generation !== generation
            ? `its other ranks belong to generation ${replica.shards[0]?.generation}; ranks of different generations never join one collective`
            : undefined;
    if (conflict) {
      log.info({ why: conflict }, 'stopping running shard that does not fit the desired state');
      this.#stopRunning(nodeId, rs);
      return;
    }

    // Adopt: this is the point of running_shards. A healthy engine found
    // running is worth more than any placement we would make instead.
    clearTimeout(replica.retryTimer);
    replica.retryTimer = undefined;
    const shard = shardFromRunning(nodeId, rs, generation);
    if (shard.httpPort > 0) this.#ports.reserve(shard.httpPort);
    if (shard.rank === 0 && shard.leaderPort > 0) this.#ports.reserve(shard.leaderPort);
    replica.generation = Math.max(replica.generation, generation);
    replica.shards.push(shard);
    replica.shards.sort((a, b) => a.rank - b.rank);
    log.info({ state: shardStateName(shard.state), generation }, 'adopted running shard');
    // An adopted shard still loading gets a full startup timeout from now:
    // when it was launched is not known here, and cutting it short would kill
    // a model that may be seconds from ready.
    if (shard.state !== ShardState.READY) this.#armStartupTimer(replica, shard);
    this.#refreshPhase(replica);
  }

  onShardStatus(nodeId: string, st: ShardStatus): void {
    const stopping = this.#stopping.get(st.shardId);
    if (stopping) {
      if (TERMINAL.has(st.state)) this.#dropStopping(stopping);
      else stopping.state = st.state;
      this.placeAll();
      return;
    }
    const replica = this.#replicas.get(st.replicaId);
    const shard = replica?.shards.find((s) => s.shardId === st.shardId);
    if (!replica || !shard || shard.nodeId !== nodeId) {
      this.#log.debug({ node: nodeId, shard: st.shardId, state: shardStateName(st.state) }, 'status of a shard not in the desired state; ignored');
      return;
    }
    this.#updateShardState(replica, shard, st.state, st.error, st.exitCode);
    this.placeAll();
  }

  #updateShardState(replica: ReplicaRecord, shard: ShardRecord, state: ShardState, error: string, exitCode: number): void {
    shard.state = state;
    shard.error = error;
    shard.exitCode = exitCode;
    if (state === ShardState.READY) {
      clearTimeout(shard.startupTimer);
      shard.startupTimer = undefined;
    }
    if (TERMINAL.has(state)) {
      const why = `shard ${shard.shardId} on node ${shard.nodeId} is ${shardStateName(state)}${error ? `: ${error}` : ''}${exitCode ? ` (exit code ${exitCode})` : ''}`;
      this.#failReplica(replica, why, this.#opts.retryBackoffMs);
      return;
    }
    this.#refreshPhase(replica);
  }

  /** A node stayed away longer than the grace: its shards are gone for placement purposes. */
  onNodeLost(nodeId: string): void {
    for (const s of [...this.#stopping.values()]) if (s.nodeId === nodeId) this.#dropStopping(s);
    for (const replica of this.#replicas.values()) {
      if (this.#forgetShards(replica, (s) => s.nodeId === nodeId).length > 0) {
        this.#failReplica(replica, `node ${nodeId} has been disconnected longer than the grace period`, this.#opts.retryBackoffMs);
      }
    }
    this.placeAll();
  }

  /**
   * Removes shards known to be gone from a replica without stopping them:
   * there is nothing left to stop, and a stop record for them would hold
   * their GPUs until a report that never comes.
   */
  #forgetShards(replica: ReplicaRecord, gone: (s: ShardRecord) => boolean): ShardRecord[] {
    const forgotten = replica.shards.filter(gone);
    for (const s of forgotten) {
      clearTimeout(s.startupTimer);
      s.startupTimer = undefined;
      this.#releasePorts(s);
    }
    replica.shards = replica.shards.filter((s) => !gone(s));
    return forgotten;
  }

  /**
   * Ends the current generation of a replica: the surviving shards are
   * stopped (a multi-node replica with a missing rank serves nothing), and a
   * new placement is tried after `backoffMs`.
   */
  #failReplica(replica: ReplicaRecord, why: string, backoffMs: number): void {
    const log = this.#log.child({ replica: replica.spec.id });
    for (const s of replica.shards) {
      clearTimeout(s.startupTimer);
      s.startupTimer = undefined;
      if (TERMINAL.has(s.state)) {
        this.#releasePorts(s);
        continue;
      }
      this.#stopping.set(s.shardId, s);
      // A node that is away gets the stop when it re-registers with the shard.
      this.#sendStop(s.nodeId, s.shardId);
    }
    replica.shards = [];
    replica.lastError = why;
    clearTimeout(replica.waitTimer);
    replica.waitTimer = undefined;
    this.#setPhase(replica, 'backoff', why);
    log.warn({ err: why, retryInMs: backoffMs }, 'replica failed; placing it again after the backoff');
    clearTimeout(replica.retryTimer);
    replica.retryTimer = setTimeout(() => {
      replica.retryTimer = undefined;
      if (replica.phase !== 'backoff') return;
      this.#setPhase(replica, 'pending', 'backoff over');
      this.placeAll();
    }, backoffMs);
  }

  #dropStopping(s: ShardRecord): void {
    this.#stopping.delete(s.shardId);
    this.#releasePorts(s);
  }

  #releasePorts(s: ShardRecord): void {
    if (s.httpPort > 0) this.#ports.release(s.httpPort);
    if (s.rank === 0 && s.leaderPort > 0) this.#ports.release(s.leaderPort);
  }

  /**
   * Stops a reported shard we do not want, and books its GPUs and ports until
   * the node reports it gone: placing on GPUs an engine still holds is a
   * start that fails with out-of-memory minutes later.
   */
  #stopRunning(nodeId: string, rs: RunningShard): void {
    const s = shardFromRunning(nodeId, rs, generationOf(rs.shardId) ?? 0);
    if (s.httpPort > 0) this.#ports.reserve(s.httpPort);
    if (s.rank === 0 && s.leaderPort > 0) this.#ports.reserve(s.leaderPort);
    this.#stopping.set(s.shardId, s);
    this.#sendStop(nodeId, s.shardId);
  }

  #sendStop(nodeId: string, shardId: string): void {
    this.#host.send(nodeId, { case: 'stop', value: create(StopShardSchema, { shardId }) });
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
    const result = placeReplica(spec, this.#placementNodes());
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
        shardId: `${spec.id}-g${generation}-r${rank}`,
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
    this.#setPhase(replica, 'starting', `placed generation ${generation}`);
    for (const s of shards) {
      log.info({ shard: s.shardId, node: s.nodeId, gpus: s.gpuIndices, port: s.httpPort, rank: s.rank }, 'starting shard');
      this.#host.send(s.nodeId, { case: 'start', value: startShardMessage(s, spec) });
      this.#armStartupTimer(replica, s);
    }
  }

  #armStartupTimer(replica: ReplicaRecord, shard: ShardRecord): void {
    clearTimeout(shard.startupTimer);
    const ms = replica.spec.profile.startupTimeoutMs;
    shard.startupTimer = setTimeout(() => {
      shard.startupTimer = undefined;
      if (!replica.shards.includes(shard) || shard.state === ShardState.READY) return;
      // Retried at once: the startup timeout was the wait, and the stopped
      // shard's GPUs stay booked until its node reports it gone.
      this.#failReplica(replica, `shard ${shard.shardId} on node ${shard.nodeId} was not ready within the startup timeout (${ms} ms)`, 0);
    }, ms);
  }

  #placementNodes(): PlacementNode[] {
    const out: PlacementNode[] = [];
    for (const node of this.#host.nodes()) {
      if (!node.connected) continue;
      out.push({ id: node.id, labels: node.register.labels, gpus: node.inventory.gpus, usedGpus: new Set(this.gpuOwners(node.id).keys()), processes: node.inventory.processes });
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
    this.#stopping.forEach(add);
    return owners;
  }

  #refreshPhase(replica: ReplicaRecord): void {
    const { shards, spec } = replica;
    if (shards.length === 0) return;
    let phase: ReplicaPhase;
    if (shards.length < spec.nnodes) phase = 'waiting';
    else if (shards.every((s) => s.state === ShardState.READY)) phase = 'ready';
    else if (shards.some((s) => s.state === ShardState.UNHEALTHY)) phase = 'unhealthy';
    else phase = 'starting';
    if (phase === 'waiting' && !replica.waitTimer) {
      replica.waitTimer = setTimeout(() => {
        replica.waitTimer = undefined;
        if (replica.phase === 'waiting') {
          this.#failReplica(replica, `the other ranks of replica ${spec.id} did not come back within the node grace period`, 0);
          this.placeAll();
        }
      }, this.#opts.nodeGraceMs);
    } else if (phase !== 'waiting') {
      clearTimeout(replica.waitTimer);
      replica.waitTimer = undefined;
    }
    this.#setPhase(replica, phase);
  }

  /** The one place a replica's phase changes; logged, and 'replica-ready' is raised here. */
  #setPhase(replica: ReplicaRecord, phase: ReplicaPhase, why?: string): void {
    const from = replica.phase;
    if (from === phase) return;
    replica.phase = phase;
    this.#log.info({ replica: replica.spec.id, from, to: phase, ...(why ? { why } : {}) }, 'replica phase changed');
    if (phase === 'ready') this.#host.replicaReady(this.#view(replica));
  }

  replicaViews(): ReplicaView[] {
    return [...this.#replicas.values()].map((r) => this.#view(r));
  }

  #view(r: ReplicaRecord): ReplicaView {
    const leader = r.shards.find((s) => s.rank === 0);
    const view: ReplicaView = {
      id: r.spec.id,
      group: r.spec.group,
      profile: r.spec.profile.name,
      engine: r.spec.profile.engine,
      servedModelName: r.spec.profile.servedModelName,
      phase: r.phase,
      generation: r.generation,
      nnodes: r.spec.nnodes,
      gpusPerShard: r.spec.gpusPerShard,
      pool: r.spec.pool,
      shards: r.shards.map(shardView),
    };
    if (r.phase === 'ready' && leader) view.url = `http://${this.#host.node(leader.nodeId)?.register.mgmtAddr || '127.0.0.1'}:${leader.httpPort}`;
    if (r.lastError) view.lastError = r.lastError;
    return view;
  }
}

function generationOf(shardId: string): number | undefined {
  const m = SHARD_GENERATION.exec(shardId);
  return m ? Number(m[1]) : undefined;
}

function shardFromRunning(nodeId: string, rs: RunningShard, generation: number): ShardRecord {
  return {
    shardId: rs.shardId,
    replicaId: rs.replicaId,
    rank: rs.rank,
    nnodes: rs.nnodes,
    nodeId,
    gpuIndices: [...rs.gpuIndices],
    httpPort: rs.httpPort,
    leaderAddr: rs.leaderAddr,
    leaderPort: rs.leaderPort,
    generation,
    state: rs.state === ShardState.UNSPECIFIED ? ShardState.STARTING : rs.state,
    error: '',
    exitCode: 0,
    adopted: true,
  };
}

function shardView(s: ShardRecord): ShardView {
  // Copied without the timer, which is the reconciler's own business.
  const { startupTimer: _, ...fields } = s;
  return { ...fields, gpuIndices: [...s.gpuIndices], stateName: shardStateName(s.state) };
}

/** Where other ranks reach the leader: its management address, else its hostname, else loopback (one-machine clusters). */
function nodeAddress(node: NodeRecord | undefined): string {
  return node?.register.mgmtAddr || node?.register.hostname || '127.0.0.1';
}

function startShardMessage(s: ShardRecord, spec: DeploymentReplica) {
  return create(StartShardSchema, {
    shardId: s.shardId,
    replicaId: s.replicaId,
    rank: s.rank,
    nnodes: s.nnodes,
    gpuIndices: s.gpuIndices,
    httpPort: s.httpPort,
    leaderAddr: s.leaderAddr,
    leaderPort: s.leaderPort,
    pool: spec.pool,
    fabric: spec.fabric,
    profile: profileMessage(spec.profile),
  });
}

function profileMessage(p: DeploymentProfile) {
  return create(ProfileSchema, {
    name: p.name,
    engine: p.engine,
    model: p.model,
    servedModelName: p.servedModelName,
    tensorParallelSize: p.tensorParallelSize,
    pipelineParallelSize: p.pipelineParallelSize,
    args: p.args,
    env: p.env,
    startupTimeout: create(DurationSchema, {
      seconds: BigInt(Math.floor(p.startupTimeoutMs / 1000)),
      nanos: (p.startupTimeoutMs % 1000) * 1_000_000,
    }),
    minComputeCapability: p.minComputeCapability,
  });
}
