import { connect } from 'node:net';
import { describe, it, type TestContext } from 'vitest';
import { freePort, groupMembers, isRunning, until } from '../helpers/engine-processes.js';
import { FAKE_VLLM, outputMatches, startFakeEngine } from '../helpers/fake-engines.js';

/*
 * The three tests run side by side (it.concurrent): most of each is waiting out the double's
 * timers (a 1 s look, a 3 s store bind, a 2 s execute timeout and 3 s looks past it). Each kills
 * only the doubles it started when it ends, where afterEach(killFakeEngines) would kill the
 * others' too, and takes expect from its context (vitest tracks no concurrent test in the globals).
 */
function doubles({ onTestFinished }: TestContext) {
  const mine: number[] = [];
  onTestFinished(async () => {
    for (const pid of mine.splice(0)) {
      try {
        process.kill(-pid, 'SIGKILL');
      } catch {}
      await until(() => groupMembers(pid).length === 0, 'the double and its children to be gone', 10_000);
    }
  });
  return (...args: Parameters<typeof startFakeEngine>) => {
    const e = startFakeEngine(...args);
    mine.push(e.pid);
    return e;
  };
}

/*
 * Issue 47 item 8 (review engine-fidelity-3 §3 D4, D6, E1): what the vLLM
 * double's ranks across nodes hold open, and when, as vLLM's do: DP's rpc
 * port only for the start-up handshake, the TP/PP store only once rank 0's
 * workers have started, and a rank 0 whose peer is gone dying after the
 * execute-model timeout once a step is in flight.
 */

/** Whether something accepts a TCP connection on the port. */
function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = connect({ host: '127.0.0.1', port });
    s.once('connect', () => {
      s.destroy();
      resolve(true);
    });
    s.once('error', () => resolve(false));
  });
}

async function healthStatus(port: number): Promise<number | undefined> {
  return (await fetch(`http://127.0.0.1:${port}/health`, { signal: AbortSignal.timeout(2_000) }).catch(() => undefined))?.status;
}

describe("the vLLM double's ranks across nodes", () => {
  it.concurrent('DP: rank 0 binds --data-parallel-rpc-port at start, serves only once the headless rank said READY, and closes the port then', async (ctx) => {
    const { expect } = ctx;
    const startFakeEngine = doubles(ctx);
    const [p0, rpc] = [await freePort(), await freePort()];
    const common = ['--data-parallel-size', '2', '--data-parallel-size-local', '1', '--data-parallel-address', '127.0.0.1', '--data-parallel-rpc-port', String(rpc), '--sim-load-time', '300ms'];
    const leader = startFakeEngine(FAKE_VLLM, ['serve', 'org/m', '--port', String(p0), '--api-server-count', '1', ...common], { CUDA_VISIBLE_DEVICES: '0' });
    await outputMatches(leader, /handshake socket bound on port/);
    expect(await accepts(rpc)).toBe(true);
    // Loaded, but a DP engine on another node has not said READY: no API server yet.
    await new Promise((r) => setTimeout(r, 1_000));
    expect(await healthStatus(p0)).toBeUndefined();
    const headless = startFakeEngine(FAKE_VLLM, ['serve', 'org/m', '--headless', '--data-parallel-start-rank', '1', ...common], { CUDA_VISIBLE_DEVICES: '1' });
    await outputMatches(headless, /handshake: READY sent/);
    await until(async () => (await healthStatus(p0)) === 200, 'rank 0 to serve');
    expect(leader.output()).toMatch(/handshake socket on port \d+ closed/);
    // From now on nothing listens on the rpc port, and both ranks run on.
    expect(await accepts(rpc)).toBe(false);
    await new Promise((r) => setTimeout(r, 500));
    expect(await accepts(rpc)).toBe(false);
    expect([isRunning(leader.pid), isRunning(headless.pid)]).toEqual([true, true]);
  });

  it.concurrent('TP across nodes: with --sim-store-bind-after rank 0 refuses on --master-port until then, and serves only after it', async (ctx) => {
    const { expect } = ctx;
    const startFakeEngine = doubles(ctx);
    const [p0, master] = [await freePort(), await freePort()];
    const common = ['--tensor-parallel-size', '2', '--nnodes', '2', '--master-addr', '127.0.0.1', '--master-port', String(master), '--sim-load-time', '100ms'];
    const started = Date.now();
    const leader = startFakeEngine(FAKE_VLLM, ['serve', 'org/m', '--port', String(p0), '--node-rank', '0', '--sim-store-bind-after', '3s', ...common], { CUDA_VISIBLE_DEVICES: '0' });
    const worker = startFakeEngine(FAKE_VLLM, ['serve', 'org/m', '--node-rank', '1', '--headless', ...common], { CUDA_VISIBLE_DEVICES: '0' });
    await outputMatches(leader, /the store is bound once the workers have imported the engine/);
    expect(await accepts(master)).toBe(false);
    await outputMatches(leader, /rendezvous listening on port/, 10_000);
    expect(Date.now() - started).toBeGreaterThanOrEqual(3_000);
    await outputMatches(worker, /rendezvous: joined rank 0/);
    await until(async () => (await healthStatus(p0)) === 200, 'rank 0 to serve');
    expect(leader.output().indexOf('rendezvous listening')).toBeLessThan(leader.output().indexOf('Application startup complete'));
  });

  it.concurrent('TP across nodes: rank 0 whose peer is gone dies VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS after a step is issued (503, then exit 1); idle, it waits; the headless rank never exits', async (ctx) => {
    const { expect } = ctx;
    const startFakeEngine = doubles(ctx);
    const [p0, master] = [await freePort(), await freePort()];
    const common = ['--tensor-parallel-size', '2', '--nnodes', '2', '--master-addr', '127.0.0.1', '--master-port', String(master), '--sim-load-time', '100ms'];
    const env = { CUDA_VISIBLE_DEVICES: '0', VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS: '2' };
    // The launcher's watchdog exits after the death (5 s in vLLM): shortened, as nothing is checked in that window but /health 503 or the exit.
    const leader = startFakeEngine(FAKE_VLLM, ['serve', 'org/m', '--port', String(p0), '--node-rank', '0', '--sim-engine-watchdog', '200ms', ...common], env);
    const worker = startFakeEngine(FAKE_VLLM, ['serve', 'org/m', '--node-rank', '1', '--headless', ...common], env);
    await outputMatches(leader, /rendezvous: rank joined/);
    await outputMatches(leader, /Application startup complete/);
    process.kill(-worker.pid, 'SIGKILL');
    await outputMatches(leader, /No available shared memory broadcast block found in 60 seconds/);
    // No request, no step: longer than the timeout, and it serves /health still.
    await new Promise((r) => setTimeout(r, 3_000));
    expect(await healthStatus(p0)).toBe(200);
    // A step in flight: the RPC times out, the engine is dead, the launcher's watchdog exits.
    const req = fetch(`http://127.0.0.1:${p0}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'org/m', prompt: 'hi', max_tokens: 4 }) }).then((r) => r.status, () => undefined);
    await outputMatches(leader, /TimeoutError: RPC call to execute_model timed out\./, 10_000);
    await until(async () => (await healthStatus(p0)) === 503 || leader.child.exitCode !== null, '/health 503 (or the exit)');
    const ended = await leader.exited;
    expect(ended.code).toBe(1);
    expect(await req).not.toBe(200);

    // The other way: a headless rank whose rank 0 is gone stays, whatever the timeout.
    const [q0, master2] = [await freePort(), await freePort()];
    const common2 = common.map((a) => (a === String(master) ? String(master2) : a));
    const leader2 = startFakeEngine(FAKE_VLLM, ['serve', 'org/m', '--port', String(q0), '--node-rank', '0', ...common2], env);
    const worker2 = startFakeEngine(FAKE_VLLM, ['serve', 'org/m', '--node-rank', '1', '--headless', ...common2], env);
    await outputMatches(worker2, /rendezvous: joined rank 0/);
    process.kill(-leader2.pid, 'SIGKILL');
    await outputMatches(worker2, /rank 0 is gone; waiting in the collective/);
    await new Promise((r) => setTimeout(r, 3_000));
    expect(isRunning(worker2.pid)).toBe(true);
  });
});
