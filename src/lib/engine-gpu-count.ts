import { type EngineName, isEngineName } from './engine-names.js';

/**
 * The data-parallel ranks a profile of each engine kind asks for through its
 * args, each holding tp × pp GPUs as the agent counts them (its wing's
 * validation): what the reference control plane multiplies a profile's GPUs
 * by. A Record over every name, so a new kind says its own. Lenient: a value
 * that is not a positive integer counts 1, and the agent refuses that shard
 * with the reason.
 */
export const DATA_PARALLEL_RANKS: Readonly<Record<EngineName, (args: readonly string[]) => number>> = {
  vllm: vllmDataParallelSize,
  // As before the kinds were one list: only a vLLM profile's DP ranks are counted here.
  sglang: () => 1,
  sim: () => 1,
};

/** DATA_PARALLEL_RANKS of `engine`; 1 for a name no kind has. */
export function dataParallelRanks(engine: string, args: readonly string[]): number {
  return isEngineName(engine) ? DATA_PARALLEL_RANKS[engine](args) : 1;
}

/**
 * The --data-parallel-size (-dp, --data-parallel-size=N) a vLLM profile's args
 * give, the last one winning as in argparse; 1 when none or not a positive
 * integer (the agent refuses that shard with the reason).
 */
function vllmDataParallelSize(args: readonly string[]): number {
  let text: string | undefined;
  for (let i = 0; i < args.length; i++) {
    const a = args[i] as string;
    const eq = a.indexOf('=');
    const name = eq === -1 ? a : a.slice(0, eq);
    if (name === '--data-parallel-size' || name === '-dp') text = eq === -1 ? args[i + 1] : a.slice(eq + 1);
  }
  return text !== undefined && /^[1-9]\d*$/.test(text) ? Number(text) : 1;
}
