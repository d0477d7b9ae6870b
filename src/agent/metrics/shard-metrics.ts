import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import { ShardState } from '../../gen/llmgw/v1/agent_pb.js';
import { REPORTED_SHARD_STATES, isServing, stateName } from '../../lib/shard-states.js';
import type { ShardSnapshot, ShardTransition } from '../supervisor/shard/shard-snapshot.js';

/** Every state a shard can be in, the values of llmgw_shard_state's `state` label (SLEEPING included). */
const STATES = REPORTED_SHARD_STATES.map((s) => ({ state: s, name: stateName(s) }));

/**
 * Launch to READY: model loading takes seconds for a small model and
 * up to half an hour for a large one read from network storage.
 */
const READINESS_BUCKETS_S = [1, 5, 10, 30, 60, 120, 300, 600, 1200, 1800, 3600];

/** The supervisor's shard id type (a checked id once validated). */
type ShardId = ShardSnapshot['shardId'];

const SHARD_LABELS = ['shard', 'replica', 'model', 'engine', 'gpus'] as const;
type ShardLabels = Record<(typeof SHARD_LABELS)[number], string>;

function shardLabels(s: ShardSnapshot): ShardLabels {
  const p = s.spec.profile;
  return { shard: s.shardId, replica: s.replicaId, model: p?.model ?? '', engine: p?.engine ?? '', gpus: s.spec.gpuIndices.join(',') };
}

export interface ShardMetricsSources {
  /** The supervisor's shards now: the only label sets the per-shard families have. */
  shards(): ShardSnapshot[];
  /** Registers a listener for every shard transition (Supervisor 'transition'). */
  onTransition(listener: (t: ShardTransition) => void): void;
  /** Requests the shard's engine holds, running and waiting, as `ctl drain` reads them; undefined when it cannot tell. */
  inFlight(shardId: ShardId): Promise<number | undefined>;
}

interface Launches {
  /** Launches of this shard id seen while the agent runs: the first is no restart. */
  count: number;
  /** When the last launch began (performance.now()), until it is READY. */
  launchedAtMs: number | undefined;
}

/**
 * Per shard: state as a state set, restarts, launch-to-READY seconds,
 * requests in flight and tokens per second. Every family is built at
 * scrape time from the supervisor's list, so a shard once removed has no
 * series left (cardinality stays that of the shards a node holds, not of
 * every shard it ever ran); what transitions taught (launches, the
 * readiness histogram) is dropped for it at the next scrape.
 */
export class ShardMetrics {
  private readonly launches = new Map<ShardId, Launches>();
  /**
   * Per replica, launches of any of its shards: the restart loop a control
   * plane hides by giving each retry a new shard id (`<replica>-g<N>-r0`),
   * which llmgw_shard_restarts_total counts as one launch each (walkthrough 3).
   */
  private readonly replicaLaunches = new Map<string, { count: number; model: string; engine: string }>();
  private readonly readiness: Histogram<(typeof SHARD_LABELS)[number]>;
  /** The label set each shard's readiness series was observed under. */
  private readonly readinessLabels = new Map<ShardId, ShardLabels>();

  constructor(registry: Registry, private readonly src: ShardMetricsSources) {
    const registers = [registry];
    const labelNames = [...SHARD_LABELS];
    const forget = () => this.forgetRemoved();
    new Gauge({
      name: 'llmgw_shard_state',
      help: "A shard's state as a state set: 1 for the state it is in, 0 for the others.",
      labelNames: [...labelNames, 'state'],
      registers,
      collect() {
        this.reset();
        for (const s of src.shards()) {
          const labels = shardLabels(s);
          for (const { state, name } of STATES) this.set({ ...labels, state: name }, s.state === state ? 1 : 0);
        }
      },
    });
    const launches = this.launches;
    new Counter({
      name: 'llmgw_shard_restarts_total',
      help: 'Launches of the shard after its first one, since the agent started (a StartShard after FAILED or EXITED).',
      labelNames,
      registers,
      collect() {
        forget();
        this.reset();
        for (const s of src.shards()) this.inc(shardLabels(s), Math.max(0, (launches.get(s.shardId)?.count ?? 0) - 1));
      },
    });
    const replicaLaunches = this.replicaLaunches;
    new Counter({
      name: 'llmgw_replica_launches_total',
      help: 'Launches of any shard of the replica on this node since the agent started, whatever their shard ids (a control plane that retries under a new id each time included); adoptions are not launches.',
      labelNames: ['replica', 'model', 'engine'],
      registers,
      collect() {
        forget();
        this.reset();
        for (const [replica, l] of replicaLaunches) this.inc({ replica, model: l.model, engine: l.engine }, l.count);
      },
    });
    this.readiness = new Histogram({
      name: 'llmgw_shard_readiness_seconds',
      help: 'Seconds from a launch to READY (the engine answered and listed its model); adopted engines are not counted.',
      labelNames,
      buckets: READINESS_BUCKETS_S,
      registers,
      collect: forget,
    });
    new Gauge({
      name: 'llmgw_shard_requests_in_flight',
      help: "Requests the engine holds, running and waiting, read from its own /metrics when scraped (as ctl drain reads them); absent when it cannot tell.",
      labelNames,
      registers,
      async collect() {
        this.reset();
        const serving = src.shards().filter((s) => s.running && s.servesHttp && isServing(s.state));
        const counts = await Promise.all(serving.map((s) => src.inFlight(s.shardId).catch(() => undefined)));
        for (const [i, s] of serving.entries()) {
          const n = counts[i];
          if (n !== undefined) this.set(shardLabels(s), n);
        }
      },
    });
    new Gauge({
      name: 'llmgw_shard_generation_tokens_per_second',
      help: "Tokens per second of the engine's token counter (vLLM's generation_tokens_total; SGLang's realtime_tokens_total{mode=\"decode\"}, generated tokens only) between the agent's two latest reads of its /metrics, which the health watch makes every supervisor.health_interval for stall detection; no engine is read for a scrape. Absent when unknown (not serving, stall detection off, a read failed).",
      labelNames,
      registers,
      collect() {
        this.reset();
        for (const s of src.shards()) {
          const rate = s.load?.tokensPerSecond;
          if (rate !== undefined && s.running && isServing(s.state)) this.set(shardLabels(s), rate);
        }
      },
    });
    src.onTransition((t) => this.onTransition(t));
  }

  private onTransition(t: ShardTransition): void {
    const id = t.shard.shardId;
    if (t.to === ShardState.STARTING) {
      const l = this.launches.get(id) ?? { count: 0, launchedAtMs: undefined };
      l.count += 1;
      // An adopted engine was launched by another agent: when, nobody here knows.
      l.launchedAtMs = t.shard.adopted ? undefined : performance.now();
      this.launches.set(id, l);
      if (!t.shard.adopted) {
        const p = t.shard.spec.profile;
        const r = this.replicaLaunches.get(t.shard.replicaId) ?? { count: 0, model: p?.model ?? '', engine: p?.engine ?? '' };
        r.count += 1;
        this.replicaLaunches.set(t.shard.replicaId, r);
      }
      return;
    }
    if (t.to !== ShardState.READY) return;
    const l = this.launches.get(id);
    if (l?.launchedAtMs === undefined) return;
    const labels = shardLabels(t.shard);
    // A relaunch under another replica: the old label set goes, one series per shard.
    const before = this.readinessLabels.get(id);
    if (before && JSON.stringify(before) !== JSON.stringify(labels)) this.readiness.remove(before);
    this.readiness.observe(labels, (performance.now() - l.launchedAtMs) / 1000);
    this.readinessLabels.set(id, labels);
    l.launchedAtMs = undefined;
  }

  /** Drops what is kept for shards the supervisor no longer has. */
  private forgetRemoved(): void {
    const present = new Set(this.src.shards().map((s) => s.shardId));
    for (const id of this.launches.keys()) if (!present.has(id)) this.launches.delete(id);
    // A replica with no shard left on the node: its count goes with it (a counter's reset, which increase() reads as such).
    const replicas = new Set(this.src.shards().map((s) => s.replicaId));
    for (const r of this.replicaLaunches.keys()) if (!replicas.has(r)) this.replicaLaunches.delete(r);
    for (const [id, labels] of this.readinessLabels) {
      if (present.has(id)) continue;
      this.readiness.remove(labels);
      this.readinessLabels.delete(id);
    }
  }
}
