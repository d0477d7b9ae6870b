import { rmSync } from 'node:fs';
import { expect } from 'vitest';
import { processesWritingUnder } from './engine-processes.js';
import { labLeftovers, stopAllLabs } from './systemd-lab.js';

/**
 * The end of a file of lab tests: the lab first, and the agent, every
 * engine and every worker with it, then the control plane, then the
 * files. Nothing may be left: no lab systemd or cgroup, no process writing
 * under `f.root`. `f` is undefined when the file's set-up failed early.
 */
export async function endLabFile(f: { cp: { close(): Promise<void> }; root: string } | undefined): Promise<void> {
  await stopAllLabs();
  await f?.cp.close();
  try {
    expect(labLeftovers()).toEqual([]);
    if (f) expect(processesWritingUnder(f.root)).toEqual([]);
  } finally {
    if (f) rmSync(f.root, { recursive: true, force: true });
  }
}
