import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { afterEach, describe, expect, it } from 'vitest';
import type { DeathInfo } from '../../../../src/lib/engine-death.js';
import { watchDeath } from '../../../../src/agent/supervisor/launch/death-watch.js';
import { watchPidExit } from '../../../../src/lib/process/pidfd.js';
import { readProcessIdentity } from '../../../helpers/read-process-identity.js';
import { until } from '../../../helpers/engine-processes.js';

const pids: number[] = [];
afterEach(() => {
  for (const pid of pids.splice(0)) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {}
  }
});

function sleeper() {
  const child = spawn('sleep', ['300'], { stdio: 'ignore' });
  pids.push(child.pid as number);
  return child;
}

describe('watchDeath', () => {
  it("reports our own child's exit with its signal", async () => {
    const child = sleeper();
    const seen: DeathInfo[] = [];
    watchDeath({ child, pid: child.pid as number, identity: readProcessIdentity(child.pid as number)!, signal: new AbortController().signal, onDeath: (i) => seen.push(i) });
    child.kill('SIGKILL');
    await until(() => seen.length > 0, 'the death report');
    expect(seen).toEqual([{ known: true, code: null, signal: 'SIGKILL' }]);
  });

  it('finds an engine that is not our child gone by its identity, once, with why', async () => {
    const child = sleeper();
    const pid = child.pid as number;
    const identity = readProcessIdentity(pid)!;
    const seen: DeathInfo[] = [];
    // No child given: as for an adopted engine, only the identity poll can tell.
    watchDeath({ pid, identity, signal: new AbortController().signal, onDeath: (i) => seen.push(i) });
    child.kill('SIGKILL');
    await once(child, 'exit');
    await until(() => seen.length > 0, 'the death report');
    await new Promise((r) => setTimeout(r, 1200));
    expect(seen).toEqual([{ known: false, reason: `process ${pid} is gone` }]);
  });

  it("sees a non-child's death through its pidfd, not the poll (the backstop is made too long to)", async () => {
    const child = sleeper();
    const pid = child.pid as number;
    const identity = readProcessIdentity(pid)!;
    const seen: DeathInfo[] = [];
    const ac = new AbortController();
    // Without pidfd the watch falls back to the 500 ms poll, which would also pass below: require it here.
    const probe = new AbortController();
    expect(watchPidExit(pid, probe.signal, () => {}).kind).toBe('watching');
    probe.abort();
    // An hour's backstop: if the pidfd path were not taken, nothing would report within the test's timeout.
    watchDeath({ pid, identity, signal: ac.signal, backstopMs: 3_600_000, onDeath: (i) => seen.push(i) });
    try {
      expect(seen).toEqual([]);
      child.kill('SIGKILL');
      await once(child, 'exit');
      await until(() => seen.length > 0, 'the death report through the pidfd');
      expect(seen).toEqual([{ known: false, reason: `process ${pid} is gone` }]);
    } finally {
      ac.abort();
    }
  });

  it('reports at once an engine already gone when the watch starts', () => {
    const seen: DeathInfo[] = [];
    // This process's pid with another start time, as a reused pid reads: the start check must say gone without waiting.
    const identity = { ...readProcessIdentity(process.pid)!, startTime: '0' };
    const ac = new AbortController();
    watchDeath({ pid: process.pid, identity, signal: ac.signal, backstopMs: 3_600_000, onDeath: (i) => seen.push(i) });
    ac.abort();
    expect(seen).toHaveLength(1);
    expect(seen[0]?.known).toBe(false);
  });

  it('says nothing once its signal is aborted (the agent going away)', async () => {
    const child = sleeper();
    const ac = new AbortController();
    const seen: DeathInfo[] = [];
    watchDeath({ child, pid: child.pid as number, identity: readProcessIdentity(child.pid as number)!, signal: ac.signal, onDeath: (i) => seen.push(i) });
    ac.abort();
    child.kill('SIGKILL');
    await once(child, 'exit');
    await new Promise((r) => setTimeout(r, 100));
    expect(seen).toEqual([]);
  });
});
