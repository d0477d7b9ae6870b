import { afterEach, describe, expect, it } from 'vitest';
import { type ChildExit, EngineChildren } from '../../src/sim/engine-children.js';
import { until } from '../helpers/engine-processes.js';

/*
 * The doubles' child processes. SGLang's SubprocessWatchdog (fake-sglang.ts) kills the tree on a child's
 * non-zero exit; the children a clean drain ends itself must not look like that failure. A CI run at
 * 53351c3 saw a clean SGLang drain end in "Subprocess pid … exited unexpectedly (signal=SIGTERM)": the
 * watchdog's tick came between the drain's SIGTERM to its schedulers and its own exit.
 */

const started: EngineChildren[] = [];
afterEach(() => {
  for (const c of started.splice(0)) c.kill();
});

const spawnChildren = (onExit: (e: ChildExit) => void = () => {}) => {
  const c = new EngineChildren(
    [
      { readyLine: 'child {pid} ready', onSigterm: 'default' },
      { readyLine: 'child {pid} ready', onSigterm: 'default' },
    ],
    onExit,
  );
  started.push(c);
  return c;
};

describe('an engine double\'s children', () => {
  it('ended by the engine itself are recorded as expected exits, and not reported', async () => {
    const heard: ChildExit[] = [];
    const c = spawnChildren((e) => heard.push(e));
    await c.terminate(10_000);
    expect(c.exits).toHaveLength(2);
    for (const e of c.exits) expect(e).toMatchObject({ signal: 'SIGTERM', expected: true });
    expect(heard).toEqual([]);
  });

  it('killed from outside are unexpected exits, and reported: the look-alike the watchdog exists for', async () => {
    const heard: ChildExit[] = [];
    const c = spawnChildren((e) => heard.push(e));
    process.kill(c.pids[0] as number, 'SIGTERM');
    await until(() => heard.length === 1, 'the killed child to be reported', 10_000);
    expect(heard[0]).toMatchObject({ signal: 'SIGTERM', expected: false });
    expect(c.alive).toBe(1);
    // Ended afterwards by the engine: only the second is expected.
    await c.terminate(10_000);
    expect(c.exits.map((e) => e.expected)).toEqual([false, true]);
  });
});
