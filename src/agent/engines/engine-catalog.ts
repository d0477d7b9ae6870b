import { type EngineName, isEngineName } from '../../lib/engine-names.js';
import type { EngineKind } from './engine-kind.js';
import { SGLANG_KIND } from './sglang/sglang-kind.js';
import { SIM_KIND } from './sim/sim-kind.js';
import { VLLM_KIND } from './vllm/vllm-kind.js';

/**
 * Every engine kind, by the name a profile gives (lib/engine-names.ts). A
 * Record over every name: tsc refuses a name without its wing, as the shard
 * vocabulary (lib/shard-states.ts) refuses a state without its facts. The
 * registry builds the enabled ones from it, in ENGINE_NAMES order.
 */
export const ENGINE_CATALOG: Readonly<Record<EngineName, EngineKind>> = {
  vllm: VLLM_KIND,
  sglang: SGLANG_KIND,
  sim: SIM_KIND,
};

/** Each kind's compile folders (EngineKind.compileDirs), for the store's survey of the engines' caches. */
export function compileDirsByEngine(): Readonly<Record<string, readonly string[]>> {
  return Object.fromEntries(Object.entries(ENGINE_CATALOG).map(([name, kind]) => [name, kind.compileDirs]));
}

/** The kind a profile names, or undefined for a name no wing has (a state file of a newer agent, a typo refused elsewhere). */
export function engineKindOf(name: string): EngineKind | undefined {
  return isEngineName(name) ? ENGINE_CATALOG[name] : undefined;
}
