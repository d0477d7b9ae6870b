import type { StartShard } from '../../gen/llmgw/v1/agent_pb.js';

/** What a shard's adapters need from its launch: the profile's limits (the contract's AdapterLimits). */
export interface AdapterLimits {
  maxLoaded: number;
  maxRank: number;
}

/** --max-lora-rank's default in vLLM (V:vllm/config/lora.py max_lora_rank = 16) and what the agent asks of SGLang too. */
export const DEFAULT_MAX_ADAPTER_RANK = 16;

/**
 * The limits a shard's engine is started with: the StartShard's own fields
 * first, then what the profile's args set (the wing's limitsFromArgs), then
 * the set's own size (at least one) and the default rank. A shard with no
 * adapters and no limit anywhere gets maxLoaded 0: its engine is started
 * without LoRA, which costs GPU memory for nothing otherwise.
 */
export function adapterLimitsOf(spec: Pick<StartShard, 'adapters' | 'maxAdapters' | 'maxAdapterRank'>, fromArgs: Partial<AdapterLimits> = {}): AdapterLimits {
  const maxLoaded = spec.maxAdapters || fromArgs.maxLoaded || spec.adapters.length;
  const maxRank = spec.maxAdapterRank || fromArgs.maxRank || DEFAULT_MAX_ADAPTER_RANK;
  return { maxLoaded, maxRank };
}

/** Why a StartShard's limits may not be, in one line; undefined when they may. */
export function adapterLimitsProblem(spec: Pick<StartShard, 'maxAdapters' | 'maxAdapterRank'>, most: { maxLoaded: number; maxRank: number }): string | undefined {
  if (spec.maxAdapters > most.maxLoaded) return `max_adapters ${spec.maxAdapters} is above ${most.maxLoaded}; ask for fewer adapters at once`;
  if (spec.maxAdapterRank > most.maxRank) return `max_adapter_rank ${spec.maxAdapterRank} is above ${most.maxRank}, the highest rank the engines take`;
  return undefined;
}
