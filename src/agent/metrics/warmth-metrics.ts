import { Gauge, type Registry } from 'prom-client';
import type { ModelWarmth } from '../../gen/llmgw/v1/agent_pb.js';

/**
 * llmgw_model_time_to_ready_seconds{model, engine, profile, from}: the median
 * time to READY this node measured from each rung (Inventory.warmth), and
 * llmgw_model_time_to_ready_percentile_seconds{…, percentile="50"|"90"}: the
 * spread of those samples (issue 51: a measured cold-start horizon), and
 * llmgw_model_gpu_memory_at_ready_bytes{model, engine, profile}: the GPU
 * memory its shard held at READY (issue 51), and
 * llmgw_model_warmth_info{model, engine, profile, rung} = 1 for the rung it
 * offers now; read at scrape time, so a model gone from the ledger leaves no series.
 */
export function registerWarmthMetrics(registry: Registry, warmth: () => readonly ModelWarmth[]): void {
  new Gauge({
    name: 'llmgw_model_time_to_ready_seconds',
    help: 'Median seconds from launch (or WakeShard) to READY measured on this node, by where the start came from: page-cache, store (either +compile), hub, sleeping-l1 or sleeping-l2 (a wake from that sleep level) or unmanaged (the last 8 of each). Measured only: modelled figures are in Inventory and ctl status.',
    labelNames: ['model', 'engine', 'profile', 'from'],
    registers: [registry],
    collect() {
      this.reset();
      for (const w of warmth()) for (const t of w.learned) if (t.samples > 0) this.set({ model: w.model, engine: w.engine, profile: w.profile, from: t.from }, t.medianSeconds);
    },
  });
  new Gauge({
    name: 'llmgw_model_time_to_ready_percentile_seconds',
    help: 'P50 (nearest rank) and P90 of the seconds to READY measured on this node from each rung, over its last 20 samples; the P90 is a bound the next start is meant to stay under 9 times in 10 (rung-spread.ts).',
    labelNames: ['model', 'engine', 'profile', 'from', 'percentile'],
    registers: [registry],
    collect() {
      this.reset();
      for (const w of warmth()) {
        for (const t of w.learned) {
          if (t.samples === 0) continue;
          this.set({ model: w.model, engine: w.engine, profile: w.profile, from: t.from, percentile: '50' }, t.p50Seconds);
          this.set({ model: w.model, engine: w.engine, profile: w.profile, from: t.from, percentile: '90' }, t.p90Seconds);
        }
      }
    },
  });
  new Gauge({
    name: 'llmgw_model_gpu_memory_at_ready_bytes',
    help: 'GPU memory in use on the GPUs of a model profile\'s shard when it reached READY on this node, summed over them (the median of its last 8 starts and wakes; Inventory.warmth gpu_memory_at_ready_mib). No series until measured.',
    labelNames: ['model', 'engine', 'profile'],
    registers: [registry],
    collect() {
      this.reset();
      for (const w of warmth()) if (w.gpuMemoryAtReadyGpus > 0) this.set({ model: w.model, engine: w.engine, profile: w.profile }, w.gpuMemoryAtReadyMib * 1024 * 1024);
    },
  });
  new Gauge({
    name: 'llmgw_model_warmth_info',
    help: 'The rung the node offers a model now (serving, sleeping-l1, sleeping-l2, page-cache, store, either +compile, partial, absent, unmanaged): 1 on that series.',
    labelNames: ['model', 'engine', 'profile', 'rung'],
    registers: [registry],
    collect() {
      this.reset();
      for (const w of warmth()) this.set({ model: w.model, engine: w.engine, profile: w.profile, rung: w.rung }, 1);
    },
  });
}
