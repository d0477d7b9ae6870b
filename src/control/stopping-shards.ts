import { create } from '@bufbuild/protobuf';
import { type ControlMessage, type RunningShard, StopShardSchema } from '../gen/llmgw/v1/agent_pb.js';
import type { PortPool } from './port-pool.js';
import type { ShardRecord } from './replica-record.js';
import { generationOf } from './replica-shard-id.js';
import { shardFromRunning } from './shard-from-running.js';
import { releaseShardPorts, reserveShardPorts } from './shard-ports.js';

/** Shards told to stop, kept until reported gone: their GPUs and ports are not free before that. */
export class StoppingShards {
  readonly #shards = new Map<string, ShardRecord>();
  readonly #ports: PortPool;
  readonly #send: (nodeId: string, msg: ControlMessage['msg']) => boolean;

  constructor(ports: PortPool, send: (nodeId: string, msg: ControlMessage['msg']) => boolean) {
    this.#ports = ports;
    this.#send = send;
  }

  get(shardId: string): ShardRecord | undefined {
    return this.#shards.get(shardId);
  }

  values(): IterableIterator<ShardRecord> {
    return this.#shards.values();
  }

  /** Books s (whose ports are already booked) until it is reported gone, and tells its node to stop it. */
  stop(s: ShardRecord): void {
    this.#shards.set(s.shardId, s);
    // A node that is away gets the stop when it re-registers with the shard.
    this.sendStop(s.nodeId, s.shardId);
  }

  /**
   * Stops a reported shard we do not want, and books its GPUs and ports until
   * the node reports it gone: placing on GPUs an engine still holds is a
   * start that fails with out-of-memory minutes later.
   */
  stopRunning(nodeId: string, rs: RunningShard): void {
    const s = shardFromRunning(nodeId, rs, generationOf(rs.shardId) ?? 0);
    reserveShardPorts(this.#ports, s);
    this.stop(s);
  }

  sendStop(nodeId: string, shardId: string): void {
    this.#send(nodeId, { case: 'stop', value: create(StopShardSchema, { shardId }) });
  }

  /** The shard is gone: its GPUs and ports are free again. */
  drop(s: ShardRecord): void {
    this.#shards.delete(s.shardId);
    releaseShardPorts(this.#ports, s);
  }
}
