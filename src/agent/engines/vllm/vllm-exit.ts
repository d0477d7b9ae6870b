/**
 * Flags the agent itself puts on vLLM's command line, with what a vLLM that
 * refuses one lacks (explainEngineExit). --shutdown-timeout came with PR
 * #36666 (2026-03-13), in v0.18.0 (V:vllm/engine/arg_utils.py:1694-1699
 * at 2f41c894; llm-d issue 927): an older vLLM exits at argument parsing,
 * before loading anything, and the start failed with "exited with code 2"
 * and nothing else.
 */
export const VLLM_AGENT_FLAG_HINTS: Readonly<Record<string, string>> = {
  '--shutdown-timeout': 'vLLM older than 0.18 has no --shutdown-timeout, which the agent passes so that a stop drains; use vLLM 0.18 or newer',
};
