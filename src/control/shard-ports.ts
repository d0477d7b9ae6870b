import type { PortPool } from './port-pool.js';
import type { ShardRecord } from './replica-record.js';

/**
 * Books a shard's ports in the pool: its HTTP port, and the leader port on
 * rank 0 only (the other ranks name the leader's, which rank 0 holds).
 */
export function reserveShardPorts(ports: PortPool, s: ShardRecord): void {
  if (s.httpPort > 0) ports.reserve(s.httpPort);
  if (s.rank === 0 && s.leaderPort > 0) ports.reserve(s.leaderPort);
}

/** Gives back what reserveShardPorts booked, once the shard is gone. */
export function releaseShardPorts(ports: PortPool, s: ShardRecord): void {
  if (s.httpPort > 0) ports.release(s.httpPort);
  if (s.rank === 0 && s.leaderPort > 0) ports.release(s.leaderPort);
}
