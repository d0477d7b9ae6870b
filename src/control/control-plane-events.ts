import type { AgentMessage, Register, ShardStatus } from '../gen/llmgw/v1/agent_pb.js';
import type { ReplicaView } from './replica-view.js';

export interface ControlPlaneEvents {
  'node-registered': [nodeId: string, register: Register];
  'node-disconnected': [nodeId: string, reason: string];
  /** A second agent registered with a node_id that has a live stream; it was refused. */
  'node-refused': [nodeId: string, reason: string];
  message: [nodeId: string, message: AgentMessage];
  'shard-status': [nodeId: string, status: ShardStatus];
  'replica-ready': [replica: ReplicaView];
}
