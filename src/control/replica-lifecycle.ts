import { type GangBreak, ShardState } from '../gen/llmgw/v1/agent_pb.js';
import type { Logger } from '../lib/logger.js';
import { TERMINAL_SHARD_STATES } from '../lib/shard-states.js';
import type { PortPool } from './port-pool.js';
import type { ReplicaRecord, ShardRecord } from './replica-record.js';
import type { ReplicaPhase } from './replica-view.js';
import { CRASH_LOOP_FAILURES, crashLoopDelayMs, DEFAULT_MAX_RETRY_BACKOFF_MS, DEFAULT_STABLE_READY_MS, failuresInARow } from './crash-loop-backoff.js';
import { formatDuration } from '../lib/duration.js';
import { stateName } from '../lib/shard-states.js';
import { releaseShardPorts } from './shard-ports.js';
import type { StoppingShards } from './stopping-shards.js';

export interface ReplicaLifecycleParts {
  log: Logger;
  ports: PortPool;
  stopping: StoppingShards;
  /** The first wait after a failed generation; doubled after each further failure in a row, up to maxRetryBackoffMs. */
  retryBackoffMs: number;
  /** Default DEFAULT_MAX_RETRY_BACKOFF_MS (5 min). */
  maxRetryBackoffMs?: number;
  /** READY this long resets the count of failures in a row; default DEFAULT_STABLE_READY_MS (5 min). */
  stableReadyMs?: number;
  /** How long adopted shards of a multi-node replica wait for their other ranks' nodes. */
  nodeGraceMs: number;
  /** Places every pending replica that fits; called when a backoff or a wait ends. */
  placeAll: () => void;
  /** Told each time a replica becomes ready. */
  ready: (replica: ReplicaRecord) => void;
}

/**
 * A replica's phase and the timers that move it: startup timeouts, the wait
 * for other ranks, and the backoff after a failed generation. Crash loops
 * are decided here, with a backoff between attempts, never on the node: a
 * node only ever sees start and stop.
 */
export class ReplicaLifecycle {
  readonly #p: ReplicaLifecycleParts;
  readonly #log: Logger;

  constructor(parts: ReplicaLifecycleParts) {
    this.#p = parts;
    this.#log = parts.log;
  }

  /**
   * A shard's new state. A multi-node replica whose rank ended, or whose rank
   * reports its gang broken (ShardStatus.gang_break), serves nothing, and its
   * other ranks block in their collectives (issue 40): it is fenced, every
   * live rank stopped at once and hard, and the whole gang placed again. A
   * stalled gang is reported (its phase), never fenced.
   */
  updateShardState(replica: ReplicaRecord, shard: ShardRecord, state: ShardState, error: string, exitCode: number, gangBreak?: GangBreak): void {
    shard.state = state;
    shard.error = error;
    shard.exitCode = exitCode;
    if (state === ShardState.READY) {
      clearTimeout(shard.startupTimer);
      shard.startupTimer = undefined;
    }
    const gang = replica.spec.nnodes > 1;
    if (TERMINAL_SHARD_STATES.has(state)) {
      const ended = `shard ${shard.shardId} on node ${shard.nodeId} is ${stateName(state)}${error ? `: ${error}` : ''}${exitCode ? ` (exit code ${exitCode})` : ''}`;
      // A survivor of a gang names the rank that went first (issue 47): the blame goes to that node.
      const why = gangBreak?.firstToGo ? `${gangBreak.reason}; then ${ended}` : ended;
      this.failCrashed(replica, why, gang);
      return;
    }
    if (gang && gangBreak && !gangBreak.stalled) {
      this.failCrashed(replica, `gang broken, as shard ${shard.shardId} on node ${shard.nodeId} saw: ${gangBreak.reason}`, true);
      return;
    }
    this.refreshPhase(replica);
  }

  /**
   * Removes shards known to be gone from a replica without stopping them:
   * there is nothing left to stop, and a stop record for them would hold
   * their GPUs until a report that never comes.
   */
  forgetShards(replica: ReplicaRecord, gone: (s: ShardRecord) => boolean): ShardRecord[] {
    const forgotten = replica.shards.filter(gone);
    for (const s of forgotten) {
      clearTimeout(s.startupTimer);
      s.startupTimer = undefined;
      releaseShardPorts(this.#p.ports, s);
    }
    replica.shards = replica.shards.filter((s) => !gone(s));
    return forgotten;
  }

  /**
   * fail() after a generation crashed (a shard FAILED, EXITED or lost): the
   * wait before the next one grows with the failures in a row
   * (crashLoopDelayMs: 5 s doubling to 5 min by default), as kubelet's
   * CrashLoopBackOff does, instead of a retry every few seconds for ever
   * (walkthrough 2, row 6). From CRASH_LOOP_FAILURES on it says so, with
   * the count and when it is tried next.
   */
  failCrashed(replica: ReplicaRecord, why: string, fence = false): void {
    const now = Date.now();
    const n = failuresInARow(replica.failures ?? 0, replica.readyAtMs, now, this.#p.stableReadyMs ?? DEFAULT_STABLE_READY_MS);
    replica.failures = n;
    replica.readyAtMs = undefined;
    const delay = crashLoopDelayMs(n, { baseMs: this.#p.retryBackoffMs, maxMs: this.#p.maxRetryBackoffMs ?? DEFAULT_MAX_RETRY_BACKOFF_MS });
    if (n >= CRASH_LOOP_FAILURES) {
      const next = new Date(now + delay).toISOString();
      this.#log.warn(
        { replica: replica.spec.id, failures: n, retryInMs: delay, nextRetryAt: next, err: why },
        `${replica.spec.id} is crash-looping: ${n} failures in a row, the last: ${why}; placing it again in ${formatDuration(delay)} (at ${next})`,
      );
    }
    this.fail(replica, why, delay, fence);
  }

  /**
   * Ends the current generation of a replica: the surviving shards are
   * stopped (a multi-node replica with a missing rank serves nothing), and a
   * new placement is tried after `backoffMs`. `fence`: a broken gang's ranks
   * are stopped all at once with no grace (StoppingShards.fence), since
   * nothing they hold can complete; otherwise rank 0 drains first.
   */
  fail(replica: ReplicaRecord, why: string, backoffMs: number, fence = false): void {
    const log = this.#log.child({ replica: replica.spec.id });
    const live: ShardRecord[] = [];
    for (const s of replica.shards) {
      clearTimeout(s.startupTimer);
      s.startupTimer = undefined;
      if (TERMINAL_SHARD_STATES.has(s.state)) releaseShardPorts(this.#p.ports, s);
      else live.push(s);
    }
    // All at once, so that rank 0 is stopped before the ranks that serve it; a fence stops every rank now.
    if (fence) this.#p.stopping.fence(live);
    else this.#p.stopping.stop(live);
    replica.shards = [];
    replica.lastError = why;
    clearTimeout(replica.waitTimer);
    replica.waitTimer = undefined;
    this.setPhase(replica, 'backoff', why);
    if (fence) log.warn({ err: why, retryInMs: backoffMs, fenced: live.map((s) => `${s.shardId}@${s.nodeId}`) }, 'gang fenced: every live rank stopped now, no grace; placing the whole gang again after the backoff');
    else log.warn({ err: why, retryInMs: backoffMs }, 'replica failed; placing it again after the backoff');
    clearTimeout(replica.retryTimer);
    replica.nextRetryAtMs = Date.now() + backoffMs;
    replica.retryTimer = setTimeout(() => {
      replica.retryTimer = undefined;
      replica.nextRetryAtMs = undefined;
      if (replica.phase !== 'backoff') return;
      this.setPhase(replica, 'pending', 'backoff over');
      this.#p.placeAll();
    }, backoffMs);
  }

  armStartupTimer(replica: ReplicaRecord, shard: ShardRecord): void {
    clearTimeout(shard.startupTimer);
    const ms = replica.spec.profile.startupTimeoutMs;
    shard.startupTimer = setTimeout(() => {
      shard.startupTimer = undefined;
      if (!replica.shards.includes(shard) || shard.state === ShardState.READY) return;
      // Retried at once: the startup timeout was the wait, and the stopped
      // shard's GPUs stay booked until its node reports it gone.
      this.fail(replica, `shard ${shard.shardId} on node ${shard.nodeId} was not ready within the startup timeout (${ms} ms)`, 0);
    }, ms);
  }

  refreshPhase(replica: ReplicaRecord): void {
    const { shards, spec } = replica;
    if (shards.length === 0) return;
    let phase: ReplicaPhase;
    if (shards.length < spec.nnodes) phase = 'waiting';
    else if (shards.every((s) => s.state === ShardState.READY)) phase = 'ready';
    else if (shards.some((s) => s.state === ShardState.UNHEALTHY)) phase = 'unhealthy';
    // Asleep on purpose, not loading: no startup timeout applies.
    else if (shards.some((s) => s.state === ShardState.SLEEPING)) phase = 'sleeping';
    // Drained by an operator on the node (ctl drain): serving what it holds, taking nothing new; not loading.
    else if (shards.some((s) => s.state === ShardState.DRAINING)) phase = 'draining';
    else phase = 'starting';
    if (phase === 'waiting' && !replica.waitTimer) {
      replica.waitTimer = setTimeout(() => {
        replica.waitTimer = undefined;
        if (replica.phase === 'waiting') {
          this.fail(replica, `the other ranks of replica ${spec.id} did not come back within the node grace period`, 0);
          this.#p.placeAll();
        }
      }, this.#p.nodeGraceMs);
    } else if (phase !== 'waiting') {
      clearTimeout(replica.waitTimer);
      replica.waitTimer = undefined;
    }
    this.setPhase(replica, phase);
  }

  /** The one place a replica's phase changes; logged, and readiness is reported here. */
  setPhase(replica: ReplicaRecord, phase: ReplicaPhase, why?: string): void {
    const from = replica.phase;
    if (from === phase) return;
    replica.phase = phase;
    this.#log.info({ replica: replica.spec.id, from, to: phase, ...(why ? { why } : {}) }, 'replica phase changed');
    if (phase === 'ready') {
      replica.readyAtMs = Date.now();
      this.#p.ready(replica);
    }
  }
}
