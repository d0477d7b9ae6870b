import { describe, it } from 'vitest';
import { freePort, isRunning, until } from '../helpers/engine-processes.js';
import { FAKE_SGLANG, FAKE_VLLM, fakeEnginesOf, outputMatches } from '../helpers/fake-engines.js';

/*
 * Issue 40, item 6: the vLLM and SGLang doubles' ranks of a multi-node
 * replica hold a rendezvous, as their engines' ranks hold torch's TCPStore
 * and NCCL's connections, and block (never exit) when a peer goes. So a
 * broken gang stays broken until something ends it: the agents and the
 * control plane (test/e2e/gang-break.test.ts).
 *
 * The tests run side by side (describe.concurrent): most of each is waiting on the doubles' timers.
 * Each kills only the doubles it started when it ends (fakeEnginesOf), and takes expect from its
 * context: vitest tracks no concurrent test in its globals.
 */

/** A completion that answers within `ms`, or undefined: a stalled engine holds it. */
async function completes(port: number, model: string, ms: number): Promise<number | undefined> {
  try {
    const res = await fetch(`http://127.0.0.1:${port}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model, prompt: 'hi', max_tokens: 2 }),
      signal: AbortSignal.timeout(ms),
    });
    await res.text();
    return res.status;
  } catch {
    return undefined;
  }
}

describe.concurrent("the engine doubles' gangs", () => {
  it('vLLM: a headless rank lost leaves rank 0 answering /health and no completion; rank 0 lost leaves the headless rank running', async (ctx) => {
    const { expect } = ctx;
    const [p0, master] = [await freePort(), await freePort()];
    const common = ['--tensor-parallel-size', '2', '--nnodes', '2', '--master-addr', '127.0.0.1', '--master-port', String(master), '--sim-load-time', '100ms'];
    const leader = fakeEnginesOf(ctx)(FAKE_VLLM, ['serve', 'org/m', '--port', String(p0), '--node-rank', '0', ...common], { CUDA_VISIBLE_DEVICES: '0' });
    const worker = fakeEnginesOf(ctx)(FAKE_VLLM, ['serve', 'org/m', '--node-rank', '1', '--headless', ...common], { CUDA_VISIBLE_DEVICES: '0' });
    await outputMatches(leader, /rendezvous: rank joined/);
    await outputMatches(leader, /Application startup complete/);
    expect(await completes(p0, 'org/m', 10_000)).toBe(200);
    process.kill(-worker.pid, 'SIGKILL');
    await outputMatches(leader, /a peer rank disconnected/);
    expect((await fetch(`http://127.0.0.1:${p0}/health`)).status).toBe(200);
    expect(await completes(p0, 'org/m', 1_500)).toBeUndefined();
    expect(isRunning(leader.pid)).toBe(true);

    // The other way: a headless rank whose leader dies stays.
    const [q0, master2] = [await freePort(), await freePort()];
    const common2 = common.map((a) => (a === String(master) ? String(master2) : a));
    const leader2 = fakeEnginesOf(ctx)(FAKE_VLLM, ['serve', 'org/m', '--port', String(q0), '--node-rank', '0', ...common2], { CUDA_VISIBLE_DEVICES: '0' });
    const worker2 = fakeEnginesOf(ctx)(FAKE_VLLM, ['serve', 'org/m', '--node-rank', '1', '--headless', ...common2], { CUDA_VISIBLE_DEVICES: '0' });
    await outputMatches(worker2, /rendezvous: joined rank 0/);
    process.kill(-leader2.pid, 'SIGKILL');
    await outputMatches(worker2, /rank 0 is gone; waiting in the collective/);
    await new Promise((r) => setTimeout(r, 1_000));
    expect(isRunning(worker2.pid)).toBe(true);
  });

  it('SGLang: a rank SIGKILLed ends the other at once (its gloo broadcast raises), rank 0 and rank 1 alike', async (ctx) => {
    const { expect } = ctx;
    for (const victim of [1, 0]) {
      const [p0, p1, init] = [await freePort(), await freePort(), await freePort()];
      const common = ['--model-path', 'org/m', '--tp-size', '2', '--nnodes', '2', '--dist-init-addr', `127.0.0.1:${init}`, '--skip-server-warmup', '--sim-load-time', '100ms'];
      const ranks = [
        fakeEnginesOf(ctx)(FAKE_SGLANG, ['serve', '--port', String(p0), '--node-rank', '0', ...common], { CUDA_VISIBLE_DEVICES: '0' }),
        fakeEnginesOf(ctx)(FAKE_SGLANG, ['serve', '--port', String(p1), '--node-rank', '1', ...common], { CUDA_VISIBLE_DEVICES: '0' }),
      ] as const;
      await outputMatches(ranks[0], /rendezvous: rank joined/);
      await outputMatches(ranks[0], /Uvicorn running/);
      const survivor = ranks[1 - victim] as (typeof ranks)[0];
      process.kill(-(ranks[victim] as (typeof ranks)[0]).pid, 'SIGKILL');
      // Its own death, by kill_process_tree's SIGKILL to itself; the bound is a safety net, not the ~1 s figure.
      const ended = await Promise.race([survivor.exited, new Promise((r) => setTimeout(() => r('still running'), 10_000))]);
      expect(ended).toEqual({ code: null, signal: 'SIGKILL' });
      expect(survivor.output()).toMatch(/Scheduler hit an exception: RuntimeError: \[\.\.\/third_party\/gloo\/gloo\/transport\/tcp\/pair\.cc:534\] Connection closed by peer/);
    }
  });

  it('SGLang: a silent rank (SIGSTOP, no FIN) blocks rank 0, which goes on when it talks again, and crashes at --watchdog-timeout with a request in a step', async (ctx) => {
    const { expect } = ctx;
    const [p0, p1, init] = [await freePort(), await freePort(), await freePort()];
    const common = ['--model-path', 'org/m', '--tp-size', '2', '--nnodes', '2', '--dist-init-addr', `127.0.0.1:${init}`, '--skip-server-warmup', '--watchdog-timeout', '3', '--sim-load-time', '100ms'];
    const leader = fakeEnginesOf(ctx)(FAKE_SGLANG, ['serve', '--port', String(p0), '--node-rank', '0', ...common], { CUDA_VISIBLE_DEVICES: '0' });
    const worker = fakeEnginesOf(ctx)(FAKE_SGLANG, ['serve', '--port', String(p1), '--node-rank', '1', ...common], { CUDA_VISIBLE_DEVICES: '0' });
    await outputMatches(leader, /rendezvous: rank joined/);
    await outputMatches(leader, /Uvicorn running/);
    expect(await completes(p0, 'org/m', 10_000)).toBe(200);
    process.kill(-worker.pid, 'SIGSTOP');
    await outputMatches(leader, /no word from the peer for \d+ ms/);
    expect(await completes(p0, 'org/m', 1_000)).toBeUndefined();
    expect(isRunning(leader.pid)).toBe(true);
    // Back before the watchdog: the held request finishes.
    const held = completes(p0, 'org/m', 20_000);
    process.kill(-worker.pid, 'SIGCONT');
    expect(await held).toBe(200);
    // Silent again, with a request in a forward step: the watchdog's.
    process.kill(-worker.pid, 'SIGSTOP');
    await until(() => (leader.output().match(/no word from the peer/g) ?? []).length === 2, 'rank 0 to see the peer silent again');
    void completes(p0, 'org/m', 30_000);
    const ended = await leader.exited;
    expect(ended.signal).toBe('SIGKILL');
    expect(leader.output()).toMatch(/Scheduler watchdog timeout \(self\.watchdog_timeout=3, self\.soft=False\)/);
    process.kill(-worker.pid, 'SIGCONT');
  });
});
