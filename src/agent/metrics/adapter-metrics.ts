import { Gauge, type Registry } from 'prom-client';
import { AdapterState, type AdapterStatus } from '../../gen/llmgw/v1/agent_pb.js';

/** Each state an adapter may be in, as its series' `state` label says it: a Prometheus state set. */
const STATES = [AdapterState.PULLING, AdapterState.LOADING, AdapterState.LOADED, AdapterState.UNLOADING, AdapterState.FAILED] as const;

/**
 * The shards' LoRA adapters (issue 53), read at scrape time from the
 * reconciler: llmgw_adapter_state{shard, adapter, state} = 1 on the state
 * the adapter is in (0 on the others), llmgw_adapter_proven{shard, adapter}
 * (1 once its own answer was checked since its last load) and
 * llmgw_adapter_load_seconds{shard, adapter}: the engine's own load call,
 * the last time. An adapter gone from the shard leaves no series.
 */
export function registerAdapterMetrics(registry: Registry, adapters: () => readonly { shardId: string; adapters: readonly AdapterStatus[] }[]): void {
  new Gauge({
    name: 'llmgw_adapter_state',
    help: 'A shard\'s LoRA adapter by state (pulling, loading, loaded, unloading, failed): 1 on the state it is in. Alert on failed; loaded means listed by the engine and proven by its own answer (or unproven: llmgw_adapter_proven 0).',
    labelNames: ['shard', 'adapter', 'state'],
    registers: [registry],
    collect() {
      this.reset();
      for (const s of adapters()) {
        for (const a of s.adapters) for (const st of STATES) this.set({ shard: s.shardId, adapter: a.name, state: AdapterState[st].toLowerCase() }, a.state === st ? 1 : 0);
      }
    },
  });
  new Gauge({
    name: 'llmgw_adapter_proven',
    help: 'A shard\'s LoRA adapter: 1 once its own answer was checked since its last load (different from the base\'s, as recorded at the first load of its bytes on this base).',
    labelNames: ['shard', 'adapter'],
    registers: [registry],
    collect() {
      this.reset();
      for (const s of adapters()) for (const a of s.adapters) this.set({ shard: s.shardId, adapter: a.name }, a.proven ? 1 : 0);
    },
  });
  new Gauge({
    name: 'llmgw_adapter_load_seconds',
    help: 'Seconds the engine took over its load call for a shard\'s LoRA adapter, the last time the agent loaded it (absent for one found loaded at adoption).',
    labelNames: ['shard', 'adapter'],
    registers: [registry],
    collect() {
      this.reset();
      for (const s of adapters()) for (const a of s.adapters) if (a.loadMs > 0) this.set({ shard: s.shardId, adapter: a.name }, a.loadMs / 1000);
    },
  });
}
