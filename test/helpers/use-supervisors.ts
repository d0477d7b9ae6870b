import { afterEach, beforeEach, type TestContext } from 'vitest';
import type { SupervisorConfig } from '../../src/agent/config/agent-config.js';
import { Supervisor, type SupervisorOptions } from '../../src/agent/supervisor/supervisor.js';
import { killEverything, removeDir, tempDirs, testConfig } from './engine-processes.js';

/**
 * The setup every supervisor test file shares: fresh state and log
 * directories per test, and after each test every supervisor closed, every
 * process writing under the directories killed (plus `extraGroups`, and
 * `stoppedPids` continued first so they can die), and the directories removed.
 */
export function useSupervisors() {
  let dirs: ReturnType<typeof tempDirs> | undefined;
  const supervisors: Supervisor[] = [];
  const extraGroups: number[] = [];
  const stoppedPids: number[] = [];

  beforeEach(() => {
    dirs = tempDirs();
  });
  afterEach(async () => {
    await endSupervisors(dirs, supervisors, extraGroups, stoppedPids);
  });

  return {
    get dirs(): ReturnType<typeof tempDirs> {
      if (!dirs) throw new Error('useSupervisors: dirs exist only inside a test');
      return dirs;
    },
    extraGroups,
    stoppedPids,
    newSupervisor(over: Partial<SupervisorConfig> = {}, opts: Omit<Partial<SupervisorOptions>, 'config'> = {}): Supervisor {
      const s = new Supervisor({ config: testConfig(this.dirs, over), ...opts });
      supervisors.push(s);
      return s;
    },
  };
}

/**
 * useSupervisors for one test that runs beside others (describe.concurrent):
 * directories of its own, and its supervisors closed, its processes killed
 * and its directories removed when it ends (its context's onTestFinished),
 * where useSupervisors' afterEach would end the other tests' too.
 */
export function supervisorsOf({ onTestFinished }: Pick<TestContext, 'onTestFinished'>) {
  const dirs = tempDirs();
  const supervisors: Supervisor[] = [];
  const extraGroups: number[] = [];
  const stoppedPids: number[] = [];
  onTestFinished(() => endSupervisors(dirs, supervisors, extraGroups, stoppedPids));
  return {
    dirs,
    extraGroups,
    stoppedPids,
    newSupervisor(over: Partial<SupervisorConfig> = {}, opts: Omit<Partial<SupervisorOptions>, 'config'> = {}): Supervisor {
      const s = new Supervisor({ config: testConfig(dirs, over), ...opts });
      supervisors.push(s);
      return s;
    },
  };
}

/** Continues `stoppedPids` so they can die, closes the supervisors, kills every process writing under `dirs` (and `extraGroups`), removes `dirs`. */
async function endSupervisors(dirs: ReturnType<typeof tempDirs> | undefined, supervisors: Supervisor[], extraGroups: number[], stoppedPids: number[]): Promise<void> {
  for (const pid of stoppedPids.splice(0)) {
    try {
      process.kill(pid, 'SIGCONT');
    } catch {}
  }
  // Each one's last state file write ends before the directories go.
  for (const s of supervisors.splice(0)) await s.close();
  if (!dirs) return;
  await killEverything(dirs.root, extraGroups.splice(0));
  removeDir(dirs.root);
}
