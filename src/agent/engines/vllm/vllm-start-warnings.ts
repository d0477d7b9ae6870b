import type { LaunchPlan } from '../launch-plan.js';

/**
 * What an operator is told at every start of this vLLM plan. Sleep mode
 * turns on vLLM's dev endpoints (VLLM_SERVER_DEV_MODE=1), which its API key
 * does not guard (V:vllm/entrypoints/serve/middleware/authenticate.py:11, 59
 * guards /v1 only). From this host only the agent and the engine reach the
 * port (src/agent/sleep-port-guards.ts); from the network, whoever the
 * operator's firewall lets through (security review 3 and 4, S6).
 */
export function vllmStartWarnings(plan: LaunchPlan): string[] {
  if (plan.env.VLLM_SERVER_DEV_MODE !== '1') return [];
  return ["sleep mode opens vLLM's dev endpoints (/sleep, /wake_up, /collective_rpc, /reset_prefix_cache) on the engine's port without its API key: other hosts reach them as the router does, so firewall the port to the router (local users are kept out by engines.vllm.sleep_port_guard)"];
}
