/**
 * Flags the agent itself puts on an engine's command line, with what an
 * engine that refuses one lacks. vLLM's --shutdown-timeout came with PR
 * #36666 (2026-03-13), in v0.18.0 (V:vllm/engine/arg_utils.py:1694-1699
 * at 2f41c894; llm-d issue 927): an older vLLM exits at argument parsing,
 * before loading anything, and the start failed with "exited with code 2"
 * and nothing else.
 */
const AGENT_FLAGS: Readonly<Record<string, string>> = {
  '--shutdown-timeout': 'vLLM older than 0.18 has no --shutdown-timeout, which the agent passes so that a stop drains; use vLLM 0.18 or newer',
};

/** argparse's last words on an unknown option: "vllm serve: error: unrecognized arguments: --x 5". */
const UNRECOGNIZED = /error: unrecognized arguments: (.+)$/;

/**
 * Why an engine that died while starting refused its command line, read from
 * its last output; undefined when its output says nothing of the kind. Names
 * the engine version that lacks a flag the agent emits, else the arguments
 * the engine did not know (the profile's or the operator's extra_args).
 */
export function explainEngineExit(lastOutput: readonly string[]): string | undefined {
  for (const line of [...lastOutput].reverse()) {
    const m = UNRECOGNIZED.exec(line.trim());
    if (!m) continue;
    const flags = (m[1] as string).split(/\s+/).filter((a) => a.startsWith('-')).map((a) => a.split('=')[0] as string);
    const known = flags.map((f) => AGENT_FLAGS[f]).find((hint) => hint !== undefined);
    return known ?? `the engine does not know ${flags.length > 0 ? flags.join(' ') : (m[1] as string)}: check the profile's args and engines.<name>.extra_args against its version`;
  }
  return undefined;
}
