import type { Logger } from '../lib/logger.js';
import type { PortRange } from '../lib/ephemeral-port-range.js';
import type { AgentServerTls } from './create-agent-server.js';
import type { Deployment } from './deployment.js';

export const DEFAULT_NODE_GRACE_MS = 60_000;
export const DEFAULT_RETRY_BACKOFF_MS = 5_000;
export const DEFAULT_PLACEMENT_DELAY_MS = 3_000;
/**
 * A node's stream that heartbeats and has sent something within 2.5 of its
 * heartbeat gaps (at most this) is live, and a second Register for the same
 * node_id is a duplicate agent, refused. A stream silent for longer, or one
 * that never heartbeated, is taken for dead (a partition the server has not
 * noticed, an agent that reconnects) and replaced by the newer one.
 */
export const DEFAULT_DUPLICATE_LIVENESS_MS = 15_000;

export interface ControlPlaneOptions {
  /** Desired state; absent = manual mode: nodes are only recorded, and callers send commands themselves. */
  deployment?: Deployment;
  /** PEM file paths; with them the server speaks TLS only and requires client certificates from `ca`. */
  tls?: AgentServerTls;
  /** How long a disconnected node's shards are kept before they are placed elsewhere (default 60s). */
  nodeGraceMs?: number;
  /**
   * How long the worker ranks of a stopped multi-node replica wait for rank 0
   * to be reported gone before they are stopped anyway (default 40s:
   * DEFAULT_RANK_ZERO_STOP_WAIT_MS). Raise it with the agents' stop_grace.
   */
  rankZeroStopWaitMs?: number;
  /** HTTP and leader ports handed to shards (default 18000-18999). */
  portRange?: [number, number];
  /**
   * Ports never handed to shards; default: this machine's ephemeral range
   * (/proc/sys/net/ipv4/ip_local_port_range), which is right wherever the
   * agents run on this machine (dev up, several agents on one box, tests).
   * The contract carries no node's range; a fleet keeps its shard ports
   * outside every node's. null avoids nothing.
   */
  avoidPorts?: PortRange | null;
  /** Wait before placing a failed replica again (default 5s), doubled after each further failure in a row. */
  retryBackoffMs?: number;
  /** The longest wait between attempts of a crash-looping replica (default 5 min, as kubelet's CrashLoopBackOff). */
  maxRetryBackoffMs?: number;
  /** A replica READY this long has its failures in a row forgotten (default 5 min). */
  stableReadyMs?: number;
  /**
   * How long after listen() placement waits for nodes to re-register with
   * their running shards (default 3s). Tests with one node may set 0.
   */
  placementDelayMs?: number;
  /** See DEFAULT_DUPLICATE_LIVENESS_MS (default 15s). */
  duplicateLivenessMs?: number;
  logger?: Logger;
}
