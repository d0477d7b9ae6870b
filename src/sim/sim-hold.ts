/**
 * A test's hold on an engine double's sleep and wake steps (--sim-hold-file
 * PATH): a step whose name is a line of that file waits before it runs,
 * with `PATH.holding` naming it, until the line is gone. Not a claim about
 * any engine: it makes "the agent stopped while the engine was still
 * sleeping or waking" a moment a test can reach for certain, not by timing.
 *
 * What a held step stands for is the engine still working on it: the step
 * then runs whatever happened to the HTTP client that asked, as the real
 * engines do (vLLM's EngineCore runs a utility call once it has been put on
 * its input queue, and nothing there looks at the API server's client,
 * V:vllm/v1/engine/core.py:1417-1446, 1534-1547 at 2f41c894; the reviews'
 * "the HTTP abort does not stop the utility call").
 */
import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';

/** How often a held step looks at the file again. */
const HOLD_POLL_MS = 20;

/** Whether `file` lists `step` on a line of its own; a file that is gone holds nothing. */
function listed(file: string, step: string): boolean {
  try {
    return readFileSync(file, 'utf8').split('\n').some((l) => l.trim() === step);
  } catch {
    return false;
  }
}

/** Waits while `file` (undefined: no hold) lists `step`; `PATH.holding` names the step meanwhile. */
export async function awaitHold(file: string | undefined, step: string): Promise<void> {
  if (file === undefined || !listed(file, step)) return;
  const marker = `${file}.holding`;
  writeFileSync(marker, `${step}\n`);
  while (listed(file, step)) await sleep(HOLD_POLL_MS);
  if (existsSync(marker)) rmSync(marker, { force: true });
}
