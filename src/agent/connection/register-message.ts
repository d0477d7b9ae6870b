import { create } from '@bufbuild/protobuf';
import {
  FabricAttachmentSchema,
  type Heartbeat,
  HeartbeatSchema,
  type Inventory,
  type Register,
  RegisterSchema,
} from '../../gen/llmgw/v1/agent_pb.js';
import { resolveHostname, resolveMgmtAddr } from '../../lib/node-identity.js';
import { isTerminal } from '../../lib/shard-states.js';
import type { AgentConfig } from '../config/agent-config.js';
import { runningShardFromSnapshot } from './shard-report.js';
import { registerState } from '../supervisor/shard/shard-machine.js';
import type { ShardSnapshot } from '../supervisor/shard/shard-snapshot.js';

/** Who this node is, as every Register says it; resolved once, when the agent starts. */
export interface NodeDescription {
  nodeId: string;
  hostname: string;
  mgmtAddr: string;
  version: string;
  labels: Record<string, string>;
  fabrics: AgentConfig['fabrics'];
  /** Register.gang_endpoint: known once the agent's gang endpoint listens (run-agent.ts); '' without one. */
  gangEndpoint: () => string;
}

export function describeNode(config: Pick<AgentConfig, 'nodeId' | 'hostname' | 'mgmtAddr' | 'mgmtInterface' | 'labels' | 'fabrics'>, version: string, gangEndpoint: () => string = () => ''): NodeDescription {
  return {
    nodeId: config.nodeId,
    hostname: resolveHostname(config.hostname),
    mgmtAddr: resolveMgmtAddr(config.mgmtAddr, config.mgmtInterface),
    version,
    labels: config.labels,
    fabrics: config.fabrics,
    gangEndpoint,
  };
}

/**
 * The Register that opens a session. Every registration lists what runs, not
 * only the first: a reconnect may be a control-plane restart, and it recovers
 * the fleet from these lists.
 */
export function buildRegister(node: NodeDescription, inventory: Inventory, shards: readonly ShardSnapshot[], cordoned = false): Register {
  return create(RegisterSchema, {
    nodeId: node.nodeId,
    // Also in inventory.conditions; here too, so a control plane that reads only Register places nothing on a cordoned node.
    cordoned,
    hostname: node.hostname,
    mgmtAddr: node.mgmtAddr,
    gangEndpoint: node.gangEndpoint(),
    version: node.version,
    labels: node.labels,
    inventory,
    fabrics: node.fabrics.map((f) => create(FabricAttachmentSchema, f)),
    runningShards: shards.filter((s) => !isTerminal(s.state)).map((s) => {
      const running = runningShardFromSnapshot(s, node.mgmtAddr);
      // An adopted shard whose drain or sleep outlived the previous agent may still be settling
      // when the first Register goes out: the machine's one adoption rule says what it is told.
      running.state = registerState(s);
      return running;
    }),
  });
}

/**
 * A Heartbeat with the latest GPU memory readings (`latestUsedMb`, from the
 * sampler), or the inventory's while the sampler has none yet. It never
 * waits for a reading: a slow nvidia-smi must not delay the stream.
 */
export function buildHeartbeat(nodeId: string, latestUsedMb: readonly number[], inventory: Inventory): Heartbeat {
  const used = latestUsedMb.length > 0 ? [...latestUsedMb] : inventory.gpus.map((g) => g.memoryUsedMb);
  return create(HeartbeatSchema, { nodeId, gpuMemoryUsedMb: used });
}
