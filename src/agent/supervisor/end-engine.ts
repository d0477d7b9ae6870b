import { type TerminateOutcome, terminateProcessGroup } from '../../lib/process/terminate-process-group.js';
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
 * SIGTERM, `graceMs`, SIGKILL to everything of the engine: the unit's whole
 * cgroup when it has one, its process group otherwise. Resolves when none
 * of it runs.
 */
export function endEngine(e: EngineFence, opts: { graceMs: number; signal?: AbortSignal }): Promise<TerminateOutcome> {
  if (e.unit) return stopEngineUnit(e.unit, opts);
  return terminateProcessGroup({ pgid: e.pgid, stillOurs: e.stillOurs, graceMs: opts.graceMs, signal: opts.signal });
}
