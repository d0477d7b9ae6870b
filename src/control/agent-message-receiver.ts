import type { EventEmitter } from 'node:events';
import { create } from '@bufbuild/protobuf';
import { AckSchema, type AgentMessage, GpuEventKind, InventorySchema, ModelPullState, type Register } from '../gen/llmgw/v1/agent_pb.js';
import type { Logger } from '../lib/logger.js';
import type { ControlPlaneEvents } from './control-plane-events.js';
import type { MessageHistory } from './message-history.js';
import type { MessageWaiters } from './message-waiters.js';
import type { NodeSession } from './node-session.js';
import type { NodeSessions } from './node-sessions.js';
import type { NodeRecord } from './node-view.js';
import type { Reconciler } from './reconciler.js';
import { stateName } from '../lib/shard-states.js';

/** The control plane's parts a message changes. */
export interface AgentMessageReceiverParts {
  nodes: Map<string, NodeRecord>;
  sessions: NodeSessions;
  /** Absent in manual mode. */
  reconciler?: Reconciler;
  history: MessageHistory;
  waiters: MessageWaiters;
  events: EventEmitter<ControlPlaneEvents>;
  log: Logger;
}

/**
 * Reads what an agent says: checks each message against the stream it came
 * on, applies it to the node record and the reconciler, and then tells
 * listeners and waiters. A message that does not fit is refused with an Ack,
 * and the stream stays open.
 */
export class AgentMessageReceiver {
  readonly #p: AgentMessageReceiverParts;
  readonly #log: Logger;

  constructor(parts: AgentMessageReceiverParts) {
    this.#p = parts;
    this.#log = parts.log;
  }

  receive(session: NodeSession, m: AgentMessage): void {
    const msg = m.msg;
    if (msg.case === 'register') {
      this.#onRegister(session, m, msg.value);
      return;
    }
    const nodeId = session.nodeId;
    if (nodeId === undefined) {
      this.#p.sessions.reject(session, m, `${msg.case ?? 'empty message'} before register: the first message of a stream must be Register`);
      return;
    }
    const node = this.#p.nodes.get(nodeId) as NodeRecord;
    switch (msg.case) {
      case 'heartbeat':
        if (msg.value.nodeId !== '' && msg.value.nodeId !== nodeId) {
          this.#p.sessions.reject(session, m, `heartbeat names node ${msg.value.nodeId}, but this stream registered as ${nodeId}`);
          return;
        }
        node.lastHeartbeatAt = new Date();
        session.noteHeartbeat();
        node.gpuMemoryUsedMb = [...msg.value.gpuMemoryUsedMb];
        break;
      case 'shard': {
        const st = msg.value;
        if (st.nodeId !== '' && st.nodeId !== nodeId) {
          this.#p.sessions.reject(session, m, `shard status names node ${st.nodeId}, but this stream registered as ${nodeId}`);
          return;
        }
        node.shards.set(st.shardId, { ...node.shards.get(st.shardId), replicaId: st.replicaId, state: st.state });
        this.#log.info(
          { node: nodeId, shard: st.shardId, replica: st.replicaId, state: stateName(st.state), ...(st.error ? { err: st.error } : {}), ...(st.exitCode ? { exitCode: st.exitCode } : {}) },
          'shard status',
        );
        this.#p.history.record(nodeId, m);
        this.#p.reconciler?.onShardStatus(nodeId, st);
        this.#p.events.emit('shard-status', nodeId, st);
        this.#delivered(nodeId, m);
        return;
      }
      case 'inventory':
        node.inventory = msg.value;
        this.#log.info({ node: nodeId, gpus: msg.value.gpus.length, warnings: msg.value.warnings }, 'inventory updated');
        this.#p.history.record(nodeId, m);
        this.#p.reconciler?.placeAll();
        this.#delivered(nodeId, m);
        return;
      case 'modelPull': {
        // A PrefetchModel's progress: read by whoever asked (tests, an operator's log); placement waits for the Inventory that lists the model.
        const p = msg.value;
        const fields = { node: nodeId, repo: p.repo, revision: p.revision, state: ModelPullState[p.state] ?? String(p.state), bytesDone: Number(p.bytesDone), bytesTotal: Number(p.bytesTotal) };
        if (p.state === ModelPullState.FAILED) this.#log.warn({ ...fields, err: p.error }, 'model pull');
        else this.#log.info(fields, 'model pull');
        this.#p.history.record(nodeId, m);
        this.#delivered(nodeId, m);
        return;
      }
      case 'gpuEvent': {
        const e = msg.value;
        // Placement learns the GPU's health from the Inventory that follows; the event says why, for whoever reads this log.
        this.#log.warn(
          { node: nodeId, gpu: e.gpuIndex, kind: GpuEventKind[e.kind] ?? String(e.kind), xid: e.xid || undefined, source: e.source, shards: e.shardIds, err: e.message },
          'gpu event',
        );
        this.#p.history.record(nodeId, m);
        this.#delivered(nodeId, m);
        return;
      }
      default:
        this.#p.sessions.reject(session, m, 'empty message: none of register, heartbeat, shard, inventory or gpu_event is set');
        return;
    }
    this.#p.history.record(nodeId, m);
    this.#delivered(nodeId, m);
  }

  #onRegister(session: NodeSession, m: AgentMessage, reg: Register): void {
    const nodeId = reg.nodeId;
    if (nodeId === '') {
      this.#p.sessions.reject(session, m, 'register without node_id: set node_id in the agent configuration');
      return;
    }
    if (session.nodeId !== undefined && session.nodeId !== nodeId) {
      this.#p.sessions.reject(session, m, `this stream registered as ${session.nodeId}; open a new stream to register as ${nodeId}`);
      return;
    }
    const claimed = this.#p.sessions.claim(session, nodeId);
    if (!claimed) return;
    const { previous } = claimed;

    const inventory = reg.inventory ?? create(InventorySchema);
    const node: NodeRecord = {
      id: nodeId,
      register: reg,
      inventory,
      connected: true,
      connectedSince: new Date(),
      lastHeartbeatAt: this.#p.nodes.get(nodeId)?.lastHeartbeatAt,
      gpuMemoryUsedMb: inventory.gpus.map((g) => g.memoryUsedMb),
      shards: new Map(reg.runningShards.map((rs) => [rs.shardId, { replicaId: rs.replicaId, state: rs.state, rank: rs.rank, nnodes: rs.nnodes }])),
    };
    this.#p.nodes.set(nodeId, node);
    this.#p.history.record(nodeId, m);
    this.#p.sessions.sendTo(nodeId, { case: 'ack', value: create(AckSchema, { messageId: m.messageId, ok: true }) });
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
    this.#p.reconciler?.onRegister(nodeId, reg);
    this.#p.events.emit('node-registered', nodeId, reg);
    this.#delivered(nodeId, m);
  }

  /** Raises 'message' and settles waiters, after the message's effects are in place. */
  #delivered(nodeId: string, m: AgentMessage): void {
    this.#p.events.emit('message', nodeId, m);
    this.#p.waiters.offer(nodeId, m);
  }
}
