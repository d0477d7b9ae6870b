/**
 * The engine kinds llmgw knows, by the name a profile gives: the one list.
 * The agent's config (engines.<name>), the reference control plane's
 * deployments and `dev up` derive theirs from it, and the agent's engine
 * catalog (src/agent/engines/engine-catalog.ts) is a Record keyed by it, so
 * tsc refuses a name without a wing (src/agent/engines/<name>/) and a wing
 * without a name. A new kind: docs/adding-an-engine.md.
 */
export const ENGINE_NAMES = ['vllm', 'sglang', 'sim'] as const;
export type EngineName = (typeof ENGINE_NAMES)[number];

/** Whether `name` is one of ENGINE_NAMES (whatever this node has enabled). */
export function isEngineName(name: string): name is EngineName {
  return (ENGINE_NAMES as readonly string[]).includes(name);
}
