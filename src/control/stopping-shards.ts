import { create } from '@bufbuild/protobuf';
import { durationFromMs } from '@bufbuild/protobuf/wkt';
import { type ControlMessage, type RunningShard, StopShardSchema } from '../gen/llmgw/v1/agent_pb.js';
import type { Logger } from '../lib/logger.js';
import type { PortPool } from './port-pool.js';
import { RankOrderedStops } from './rank-ordered-stops.js';
import type { ShardRecord } from './replica-record.js';
import { generationOf } from './replica-shard-id.js';
import { shardFromRunning } from './shard-from-running.js';
import { releaseShardPorts, reserveShardPorts } from './shard-ports.js';

export interface StoppingShardsOptions {
  ports: PortPool;
  /** Sends to a node's current stream; false when the node is not connected. */
  send: (nodeId: string, msg: ControlMessage['msg']) => boolean;
  /** How long a multi-node replica's worker ranks wait for rank 0 to be reported gone (DEFAULT_RANK_ZERO_STOP_WAIT_MS). */
  rankZeroStopWaitMs: number;
  log: Logger;
}

/** Shards told to stop, kept until reported gone: their GPUs and ports are not free before that. */
export class StoppingShards {
  readonly #shards = new Map<string, ShardRecord>();
  readonly #ports: PortPool;
  readonly #send: (nodeId: string, msg: ControlMessage['msg']) => boolean;
  readonly #ordered: RankOrderedStops<ShardRecord>;
  /** Ranks of broken gangs: stopped, and stopped again after a reconnect, with no grace. */
  readonly #fenced = new Set<string>();

  constructor(opts: StoppingShardsOptions) {
    this.#ports = opts.ports;
    this.#send = opts.send;
    this.#ordered = new RankOrderedStops({ rankZeroWaitMs: opts.rankZeroStopWaitMs, send: (s) => this.#sendStop(s.nodeId, s.shardId), log: opts.log });
  }

  get(shardId: string): ShardRecord | undefined {
    return this.#shards.get(shardId);
  }

  values(): IterableIterator<ShardRecord> {
    return this.#shards.values();
  }

  /**
   * Books shards (whose ports are already booked) until each is reported
   * gone, and tells their nodes to stop them: a multi-node replica's rank 0
   * first, its other ranks once rank 0 is gone (RankOrderedStops).
   */
  stop(shards: readonly ShardRecord[]): void {
    for (const s of shards) this.#shards.set(s.shardId, s);
    // A node that is away gets the stop when it re-registers with the shard.
    this.#ordered.stop(shards);
  }

  /**
   * Fences a broken gang (issue 40): books its live ranks until each is
   * reported gone and tells every one to stop now, with no grace (SIGTERM
   * then SIGKILL at once): a rank whose peers are gone holds nothing that
   * can finish, and waiting for rank 0 would keep the GPUs held by ranks
   * blocked in NCCL for minutes.
   */
  fence(shards: readonly ShardRecord[]): void {
    for (const s of shards) {
      this.#shards.set(s.shardId, s);
      this.#fenced.add(s.shardId);
      this.#sendStop(s.nodeId, s.shardId);
    }
  }

  /**
   * Stops a reported shard we do not want, and books its GPUs and ports until
   * the node reports it gone: placing on GPUs an engine still holds is a
   * start that fails with out-of-memory minutes later.
   */
  stopRunning(nodeId: string, rs: RunningShard): void {
    const s = shardFromRunning(nodeId, rs, generationOf(rs.shardId) ?? 0);
    reserveShardPorts(this.#ports, s);
    this.stop([s]);
  }

  /** Says the stop again (it may have been lost with a node's previous stream), unless it is held behind rank 0. */
  resendStop(nodeId: string, shardId: string): void {
    if (!this.#ordered.isHeld(shardId)) this.#sendStop(nodeId, shardId);
  }

  #sendStop(nodeId: string, shardId: string): boolean {
    const grace = this.#fenced.has(shardId) ? { grace: durationFromMs(0) } : {};
    return this.#send(nodeId, { case: 'stop', value: create(StopShardSchema, { shardId, ...grace }) });
  }

  /** The shard is gone: its GPUs and ports are free again, and the ranks held behind it are stopped. */
  drop(s: ShardRecord): void {
    this.#shards.delete(s.shardId);
    this.#fenced.delete(s.shardId);
    releaseShardPorts(this.#ports, s);
    this.#ordered.gone(s.shardId);
  }

  dispose(): void {
    this.#ordered.dispose();
  }
}
