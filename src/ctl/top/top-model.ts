import type { AgentEvent, StatusResponse } from '../../gen/llmgw/v1/admin_pb.js';
import { GpuEventKind } from '../../gen/llmgw/v1/agent_pb.js';

/** Status samples kept per shard for its sparkline: a minute at one a second. */
export const HISTORY_SAMPLES = 60;
/** Events kept for the view's event pane; the screen shows the last few that fit. */
export const EVENTS_KEPT = 200;

/**
 * What `ctl top` knows: the last StatusResponse, each shard's tokens per
 * second over the last minute (the sparkline), and the events the agent
 * pushed. Built only from the admin socket; it never asks an engine
 * anything: the rate is the agent's own reading (ShardInfo.tokens_per_second).
 */
export class TopModel {
  status: StatusResponse | undefined;
  /** When the last Status answered, ms since the epoch. */
  statusAtMs = 0;
  /** Why the last Status failed; '' when it answered. */
  statusError = '';
  /** Whether the Events follow is open (false: the view falls back to Status alone). */
  eventsLive = false;
  readonly events: AgentEvent[] = [];
  /** Per shard, its tokens per second, one sample per Status; NaN where the agent did not know. */
  private readonly tokens = new Map<string, number[]>();
  /** Per GPU index, the fault events seen since the view started. */
  private readonly faults = new Map<number, number>();

  applyStatus(s: StatusResponse, nowMs: number): void {
    this.status = s;
    this.statusAtMs = nowMs;
    this.statusError = '';
    const present = new Set<string>();
    for (const shard of s.shards) {
      present.add(shard.shardId);
      const history = this.tokens.get(shard.shardId) ?? [];
      // -1 is the agent's "unknown": a gap, not a rate of 0, which would read as an idle engine.
      history.push(shard.tokensPerSecond >= 0 ? shard.tokensPerSecond : Number.NaN);
      if (history.length > HISTORY_SAMPLES) history.shift();
      this.tokens.set(shard.shardId, history);
    }
    // A removed shard's history goes with it: a long `ctl top` must not grow with every shard ever run.
    for (const id of this.tokens.keys()) if (!present.has(id)) this.tokens.delete(id);
  }

  applyEvent(e: AgentEvent): void {
    this.events.push(e);
    if (this.events.length > EVENTS_KEPT) this.events.shift();
    if (e.kind === 'gpu' && e.gpu !== undefined && e.fields.event !== 'CLEARED') {
      this.faults.set(e.gpu, (this.faults.get(e.gpu) ?? 0) + 1);
    }
  }

  /** The shard's tokens per second, oldest first, one per Status; NaN where unknown. */
  tokensHistory(shardId: string): readonly number[] {
    return this.tokens.get(shardId) ?? [];
  }

  /** Faults seen on GPU `index` while the view ran, or the agent's recent ones, whichever is more. */
  faultCount(index: number): number {
    const recent = this.status?.gpus.find((g) => g.index === index)?.recentEvents.filter((e) => e.kind !== GpuEventKind.CLEARED).length ?? 0;
    return Math.max(recent, this.faults.get(index) ?? 0);
  }
}
