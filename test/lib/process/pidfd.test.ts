import { spawn, spawnSync } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';
import { watchPidExit } from '../../../src/lib/process/pidfd.js';
import { until } from '../../helpers/engine-processes.js';

const started: number[] = [];
const controllers: AbortController[] = [];
afterEach(() => {
  for (const c of controllers.splice(0)) c.abort();
  for (const pid of started.splice(0)) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {}
  }
});

/**
 * A process that is not our child: a shell starts `sleep` in the background
 * and exits, so sleep is re-parented (to init or a subreaper) as an adopted
 * engine is after an agent restart. Its pid is the shell's only output.
 */
function startGrandchild(): number {
  const out = spawnSync('sh', ['-c', 'sleep 60 >/dev/null 2>&1 </dev/null & echo $!'], { encoding: 'utf8' });
  const pid = Number(out.stdout.trim());
  expect(pid).toBeGreaterThan(0);
  started.push(pid);
  return pid;
}

function ppidOf(pid: number): number {
  const out = spawnSync('ps', ['-o', 'ppid=', '-p', String(pid)], { encoding: 'utf8' });
  return Number(out.stdout.trim());
}

const openFds = () => readdirSync('/proc/self/fd').length;

function watch(pid: number, onExit: () => void) {
  const c = new AbortController();
  controllers.push(c);
  return { controller: c, result: watchPidExit(pid, c.signal, onExit) };
}

describe('watchPidExit', () => {
  it("sees the death of a process that is not the watcher's child", async () => {
    const pid = startGrandchild();
    expect(ppidOf(pid)).not.toBe(process.pid);
    let exits = 0;
    const { result } = watch(pid, () => exits++);
    expect(result).toEqual({ kind: 'watching' });
    // Still alive: nothing may be reported yet.
    await new Promise((r) => setTimeout(r, 200));
    expect(exits).toBe(0);
    process.kill(pid, 'SIGKILL');
    await until(() => exits > 0, 'the exit of the grandchild to be seen', 10_000);
    await new Promise((r) => setTimeout(r, 100));
    expect(exits).toBe(1);
  });

  it('sees the death of its own child as well, without waiting for it to be reaped', async () => {
    const child = spawn('sleep', ['60'], { stdio: 'ignore' });
    const pid = child.pid as number;
    started.push(pid);
    let exited = false;
    watch(pid, () => {
      exited = true;
    });
    child.kill('SIGTERM');
    await until(() => exited, 'the exit of the child to be seen', 10_000);
  });

  it('answers gone for a pid no process has', async () => {
    const child = spawn('true', { stdio: 'ignore' });
    const pid = child.pid as number;
    // Reaped by Node once 'exit' fires, so the pid names nothing afterwards.
    await new Promise((r) => child.on('exit', r));
    let called = false;
    expect(watch(pid, () => (called = true)).result).toEqual({ kind: 'gone' });
    await new Promise((r) => setTimeout(r, 50));
    expect(called).toBe(false);
  });

  it('stops watching on abort, closes its fd and never reports the later exit', async () => {
    const pid = startGrandchild();
    const before = openFds();
    let called = false;
    const { controller, result } = watch(pid, () => (called = true));
    expect(result.kind).toBe('watching');
    expect(openFds()).toBe(before + 1);
    controller.abort();
    await until(() => openFds() === before, 'the pidfd to be closed', 10_000);
    process.kill(pid, 'SIGKILL');
    await new Promise((r) => setTimeout(r, 300));
    expect(called).toBe(false);
  });

  it('refuses a pid that is not a positive integer', () => {
    const signal = new AbortController().signal;
    for (const bad of [0, -1, 1.5, Number.NaN]) expect(() => watchPidExit(bad, signal, () => {})).toThrow(/pid must be a positive integer/);
  });
});
