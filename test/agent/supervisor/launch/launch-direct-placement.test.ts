import { readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import { resolveExecutableSync } from '../../../../src/agent/engines/resolve-executable.js';
import { launchDirect } from '../../../../src/agent/supervisor/launch/launch-engine.js';
import { isRunning, tempDirs, until } from '../../../helpers/engine-processes.js';

/*
 * A multi-node rank's CPU pinning under the direct launcher (issue 40,
 * item 4): taskset sets the affinity and execs the engine, so the engine
 * keeps the pid the agent records and runs on the rank's CPUs alone.
 */
describe('the direct launcher with a placement', () => {
  it.runIf(readFileSync('/sys/devices/system/cpu/online', 'utf8').trim() !== '0')('pins the engine to the placement\'s CPUs, same pid as recorded', async () => {
    const taskset = resolveExecutableSync('taskset');
    if (!taskset) throw new Error('taskset is not installed (util-linux)');
    const dirs = tempDirs();
    onTestFinished(() => rmSync(dirs.root, { recursive: true, force: true }));
    const launched = await launchDirect(
      { argv: [process.execPath, '-e', 'setInterval(() => {}, 1000)'], env: { PATH: process.env.PATH ?? '' }, placement: { cpus: '1', taskset, why: 'CPUs 1' } },
      join(dirs.root, 'e.log'),
    );
    onTestFinished(() => {
      try {
        process.kill(-launched.pgid, 'SIGKILL');
      } catch {}
    });
    // Once exec'd into node, the process is the engine, pinned.
    await until(() => readFileSync(`/proc/${launched.pid}/cmdline`, 'utf8').startsWith(process.execPath), 'taskset to exec the engine');
    expect(readFileSync(`/proc/${launched.pid}/status`, 'utf8')).toMatch(/^Cpus_allowed_list:\t1$/m);
    expect(isRunning(launched.pid)).toBe(true);
  });
});
