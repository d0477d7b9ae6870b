import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { afterEach, describe, expect, it, onTestFinished } from 'vitest';
import { type ChildExit, EngineChildren } from '../../src/sim/engine-children.js';
import { isRunning, until } from '../helpers/engine-processes.js';
import { REPO_ROOT } from '../helpers/run-cli.js';

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

  it.each([
    ['shell', false],
    ['Node', true],
  ])('%s children have the SIGTERM disposition asked for: exit 0 (vLLM\'s workers), or killed by it (SGLang\'s schedulers)', async (_kind, nodeChildren) => {
    // In an engine process of its own, whose stdout the children share: their ready lines (printed once the disposition is
    // set) are seen before the engine is asked (SIGUSR2) to end them, and it prints how each ended, in the order they were made.
    const engine = childrenInAnEngine(
      `[{ readyLine: 'worker {pid} ready', onSigterm: 'exit' }, { readyLine: 'scheduler {pid} ready', onSigterm: 'default' }], () => {}, { nodeChildren: ${nodeChildren} }`,
      "process.on('SIGUSR2', () => c.terminate(10_000).then(() => console.log('exits ' + JSON.stringify(c.exits.map((e) => [c.pids.indexOf(e.child.pid), e.code, e.signal]).sort((x, y) => x[0] - y[0])))))",
    );
    await until(() => /^worker \d+ ready$/m.test(engine.out()) && /^scheduler \d+ ready$/m.test(engine.out()), 'both children ready', 20_000);
    process.kill(engine.pid, 'SIGUSR2');
    await until(() => /^exits /m.test(engine.out()), 'the children ended', 20_000);
    expect(JSON.parse(/^exits (.*)$/m.exec(engine.out())?.[1] as string)).toEqual([
      [0, 0, null],
      [1, null, 'SIGTERM'],
    ]);
  });

  it('end as soon as their engine is SIGKILLed (the death pipe), and not while it lives', async () => {
    // A double's process of its own, as the doubles run them: the built module, its ready lines on stdout.
    const engine = childrenInAnEngine("[{ readyLine: 'child {pid} ready, \\'as is\\' $$', onSigterm: 'exit' }, { readyLine: 'child {pid} ready, \\'as is\\' $$', onSigterm: 'default' }], () => {}");
    const ready = () => [...engine.out().matchAll(/^child (\d+) ready, 'as is' \$\$$/gm)].map((m) => Number(m[1]));
    onTestFinished(() => {
      for (const pid of ready()) if (isRunning(pid)) process.kill(pid, 'SIGKILL');
    });
    await until(() => ready().length === 2, 'both children ready', 20_000);
    const children = ready();
    // Alive with their engine: the pipe's other end is open.
    await new Promise((r) => setTimeout(r, 300));
    expect(children.filter(isRunning)).toEqual(children);
    process.kill(engine.pid, 'SIGKILL');
    await until(() => children.every((pid) => !isRunning(pid)), 'the children to end with their engine', 20_000);
  });
});

/** A Node process that runs `then` (before any child exists), then makes `c = new EngineChildren(<args>)` from the built module; killed when the test ends. */
function childrenInAnEngine(args: string, then = ''): { pid: number; out: () => string } {
  const script = `import(${JSON.stringify(join(REPO_ROOT, 'dist/sim/engine-children.js'))}).then((m) => { let c; ${then}; c = new m.EngineChildren(${args}); })`;
  const engine = spawn(process.execPath, ['-e', script], { stdio: ['ignore', 'pipe', 'inherit'] });
  let out = '';
  engine.stdout.on('data', (chunk: Buffer) => {
    out += chunk.toString();
  });
  onTestFinished(() => {
    if (isRunning(engine.pid as number)) process.kill(engine.pid as number, 'SIGKILL');
  });
  return { pid: engine.pid as number, out: () => out };
}
