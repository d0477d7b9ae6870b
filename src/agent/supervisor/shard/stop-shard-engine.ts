import type { Logger } from '../../../lib/logger.js';
import type { EngineProcess } from '../launch/engine-process.js';

/** How long a stop waits for Node to reap its own child after the group is gone, for its exit status. */
export const CHILD_REAP_WAIT_MS = 2000;

/** What a stop found: why the engine is gone, and our child's exit status when Node reaped it. */
export interface StoppedEngine {
  why: string;
  exit?: { code: number | null; signal: NodeJS.Signals | null };
}

/**
 * The stop sequence of one shard's engine: its whole group (or unit's
 * cgroup) terminated (SIGTERM to its main process, up to `graceMs`, SIGKILL
 * to all: see endEngine), then our child's exit
 * status. It changes no shard state: the runner reports STOPPING before and
 * STOPPED after.
 */
export async function stopShardEngine(
  engine: EngineProcess,
  opts: { graceMs: number; signal?: AbortSignal; log: Logger; deathSeen: () => boolean },
): Promise<StoppedEngine> {
  const outcome = await engine.end({ graceMs: opts.graceMs, signal: opts.signal });
  if (outcome === 'not-ours') opts.log.warn('engine pid now names another process; nothing was signalled');
  const why = engine.unit ? `unit ${engine.unit.name}: cgroup ${outcome}` : `process group ${outcome}`;
  // The death watch saw the exit first and recorded its status.
  if (opts.deathSeen()) return { why };
  // A leader that is a zombie reads as gone before Node has reaped it: wait
  // (briefly) for the exit event, or a clean SIGTERM exit would be recorded
  // with no status at all.
  const exit = await engine.childExit(CHILD_REAP_WAIT_MS);
  return { why, exit };
}
