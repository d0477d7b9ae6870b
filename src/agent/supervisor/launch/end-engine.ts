import { type TerminateOutcome, terminateProcessGroup } from '../../../lib/process/terminate-process-group.js';
import type { EngineUnit } from './engine-unit.js';
import { stopEngineUnit } from './stop-engine-unit.js';

/** An engine to end, by whichever fence its launcher gave it. */
export interface EngineFence {
  pgid: number;
  /** Its unit, under systemd-run: then its cgroup is the fence, not its process group. */
  unit?: EngineUnit;
  /** Whether the process group still belongs to the engine (see groupStillOurs). */
  stillOurs: () => boolean;
}

/**
 * SIGTERM to the engine's main process only, up to `graceMs` for all of it
 * to go, then SIGKILL to everything of the engine: the unit's whole cgroup
 * when it has one, its process group otherwise. Resolves when none of it
 * runs. Main process first, because only it drains: vLLM's API server waits
 * `--shutdown-timeout` for its requests (vllm/entrypoints/launcher.py:133-155)
 * and SGLang's tokenizer manager until none is left
 * (sglang/srt/managers/tokenizer_manager.py:3114-3158), each then ending its
 * own workers; workers signalled with it die first and abort the requests
 * (see TerminateProcessGroupOptions.sigtermTo).
 */
export function endEngine(e: EngineFence, opts: { graceMs: number; signal?: AbortSignal }): Promise<TerminateOutcome> {
  if (e.unit) return stopEngineUnit(e.unit, opts);
  return terminateProcessGroup({ pgid: e.pgid, stillOurs: e.stillOurs, graceMs: opts.graceMs, signal: opts.signal, sigtermTo: 'leader' });
}
