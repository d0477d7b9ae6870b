import type { EventEmitter } from 'node:events';
import { create } from '@bufbuild/protobuf';
import { Code, ConnectError } from '@connectrpc/connect';
import { AckSchema, type AgentMessage, type ControlMessage, ControlMessageSchema } from '../gen/llmgw/v1/agent_pb.js';
import type { Logger } from '../lib/logger.js';
import type { ControlPlaneEvents } from './control-plane-events.js';
import { NodeSession } from './node-session.js';
import type { NodeRecord } from './node-view.js';

export interface NodeSessionsOptions {
  /** The control plane's node records: a node whose current stream ends is marked disconnected there. */
  nodes: Map<string, NodeRecord>;
  events: EventEmitter<ControlPlaneEvents>;
  log: Logger;
  /** See DEFAULT_DUPLICATE_LIVENESS_MS. */
  duplicateLivenessMs: number;
  nodeGraceMs: number;
  /** Told when a disconnected node stays away longer than nodeGraceMs; absent (manual mode), no grace is kept. */
  onNodeLost?: (nodeId: string) => void;
  /** False once the control plane closes: streams ending then are not a node going away. */
  listening: () => boolean;
}

/**
 * Every open agent stream, and which one carries commands to each node: the
 * newest one it registered on. Message ids of everything sent are numbered
 * here, across nodes.
 */
export class NodeSessions {
  readonly #opts: NodeSessionsOptions;
  readonly #log: Logger;
  readonly #sessionOf = new Map<string, NodeSession>();
  readonly #sessions = new Set<NodeSession>();
  readonly #graceTimers = new Map<string, NodeJS.Timeout>();
  #nextMessageId = 0n;
  #nextSessionId = 0;

  constructor(opts: NodeSessionsOptions) {
    this.#opts = opts;
    this.#log = opts.log;
  }

  open(peer: string): NodeSession {
    this.#nextSessionId += 1;
    const session = new NodeSession(this.#nextSessionId, peer);
    this.#sessions.add(session);
    return session;
  }

  /**
   * Makes `session` the stream that carries commands to nodeId. Undefined
   * when another live stream holds the node: the session is refused. Else
   * the stream it replaces, if any (the session itself on a second Register).
   */
  claim(session: NodeSession, nodeId: string): { previous?: NodeSession } | undefined {
    const previous = this.#sessionOf.get(nodeId);
    const liveMs = previous && previous !== session && !previous.ended ? previous.livenessMs(this.#opts.duplicateLivenessMs) : 0;
    if (previous && Date.now() - previous.lastMessageAt.getTime() < liveMs) {
      this.#refuseDuplicate(session, previous, nodeId, liveMs);
      return undefined;
    }
    session.nodeId = nodeId;
    session.registeredAt = new Date();
    this.#sessionOf.set(nodeId, session);
    // The newest stream wins: an agent that reconnects after a network
    // partition opens a new stream while the server may not yet have noticed
    // the old one is dead, and commands must not go down the dead one.
    if (previous && previous !== session) {
      this.ended(previous, 'replaced by a newer stream from the same node');
    }
    clearTimeout(this.#graceTimers.get(nodeId));
    this.#graceTimers.delete(nodeId);
    return { previous };
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
    this.#opts.events.emit('node-refused', nodeId, reason);
    session.refuse(new ConnectError(reason, Code.AlreadyExists));
    this.#sessions.delete(session);
  }

  /** Sends on the node's current stream; the message_id used, or undefined when the node has none open. */
  sendTo(nodeId: string, msg: ControlMessage['msg']): bigint | undefined {
    const session = this.#sessionOf.get(nodeId);
    if (!session) return undefined;
    this.#nextMessageId += 1n;
    const messageId = this.#nextMessageId;
    if (!session.send(create(ControlMessageSchema, { messageId, msg }))) return undefined;
    this.#log.debug({ node: nodeId, messageId, kind: msg.case }, 'sent control message');
    return messageId;
  }

  /** Refuses one message and says why, to the agent (an Ack) and in our log; the stream stays open. */
  reject(session: NodeSession, m: AgentMessage, error: string): void {
    this.#log.warn({ node: session.nodeId, session: session.id, messageId: m.messageId, kind: m.msg.case, err: error }, 'rejected an agent message');
    this.#nextMessageId += 1n;
    session.send(
      create(ControlMessageSchema, {
        messageId: this.#nextMessageId,
        msg: { case: 'ack', value: create(AckSchema, { messageId: m.messageId, ok: false, error }) },
      }),
    );
  }

  /** Idempotent: the first caller's reason is the one logged. */
  ended(session: NodeSession, reason: string): void {
    session.end(reason);
    if (!this.#sessions.delete(session)) return;
    const nodeId = session.nodeId;
    if (nodeId === undefined || this.#sessionOf.get(nodeId) !== session) return;
    this.#sessionOf.delete(nodeId);
    const node = this.#opts.nodes.get(nodeId);
    if (node) {
      node.connected = false;
      node.disconnectedAt = new Date();
    }
    const why = session.endReason ?? reason;
    this.#log.warn({ node: nodeId, reason: why }, 'node disconnected; its shards are kept');
    this.#opts.events.emit('node-disconnected', nodeId, why);
    const onNodeLost = this.#opts.onNodeLost;
    if (onNodeLost && this.#opts.listening()) {
      this.#graceTimers.set(
        nodeId,
        setTimeout(() => {
          this.#graceTimers.delete(nodeId);
          if (this.#opts.nodes.get(nodeId)?.connected) return;
          this.#log.warn({ node: nodeId, graceMs: this.#opts.nodeGraceMs }, 'node did not come back within the grace period; placing its replicas elsewhere');
          onNodeLost(nodeId);
        }, this.#opts.nodeGraceMs),
      );
    }
  }

  /** Ends every stream and drops every grace period: the control plane is closing. */
  endAll(reason: string): void {
    for (const t of this.#graceTimers.values()) clearTimeout(t);
    this.#graceTimers.clear();
    for (const s of [...this.#sessions]) this.ended(s, reason);
  }
}
