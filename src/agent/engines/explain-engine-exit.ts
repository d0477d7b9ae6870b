import { ENGINE_CATALOG } from './engine-catalog.js';

/**
 * Flags the agent itself puts on an engine's command line, with what an
 * engine that refuses one lacks: each wing's (EngineKind.agentFlagHints),
 * together. A flag is matched only in the last words of an engine that was
 * given it, so the hints of every kind can be read as one table.
 */
const AGENT_FLAGS: Readonly<Record<string, string>> = Object.assign({}, ...Object.values(ENGINE_CATALOG).map((k) => k.agentFlagHints ?? {}));

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
