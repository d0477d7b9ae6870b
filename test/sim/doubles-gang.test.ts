import { afterEach, describe, expect, it } from 'vitest';
import { freePort, isRunning, until } from '../helpers/engine-processes.js';
import { FAKE_SGLANG, FAKE_VLLM, outputMatches, startFakeEngine } from '../helpers/fake-engines.js';
import { killFakeEngines } from '../helpers/fake-engines.js';

afterEach(killFakeEngines);

/*
 * Issue 40, item 6: the vLLM and SGLang doubles' ranks of a multi-node
 * replica hold a rendezvous, as their engines' ranks hold torch's TCPStore
 * and NCCL's connections, and block (never exit) when a peer goes. So a
 * broken gang stays broken until something ends it: the agents and the
 * control plane (test/e2e/gang-break.test.ts).
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

describe("the engine doubles' gangs", () => {
  it('vLLM: a headless rank lost leaves rank 0 answering /health and no completion; rank 0 lost leaves the headless rank running', async () => {
    const [p0, master] = [await freePort(), await freePort()];
    const common = ['--tensor-parallel-size', '2', '--nnodes', '2', '--master-addr', '127.0.0.1', '--master-port', String(master), '--sim-load-time', '100ms'];
    const leader = startFakeEngine(FAKE_VLLM, ['serve', 'org/m', '--port', String(p0), '--node-rank', '0', ...common], { CUDA_VISIBLE_DEVICES: '0' });
    const worker = startFakeEngine(FAKE_VLLM, ['serve', 'org/m', '--node-rank', '1', '--headless', ...common], { CUDA_VISIBLE_DEVICES: '0' });
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
    const leader2 = startFakeEngine(FAKE_VLLM, ['serve', 'org/m', '--port', String(q0), '--node-rank', '0', ...common2], { CUDA_VISIBLE_DEVICES: '0' });
    const worker2 = startFakeEngine(FAKE_VLLM, ['serve', 'org/m', '--node-rank', '1', '--headless', ...common2], { CUDA_VISIBLE_DEVICES: '0' });
    await outputMatches(worker2, /rendezvous: joined rank 0/);
    process.kill(-leader2.pid, 'SIGKILL');
    await outputMatches(worker2, /rank 0 at 127\.0\.0\.1:\d+ is gone; waiting in the collective/);
    await new Promise((r) => setTimeout(r, 1_000));
    expect(isRunning(worker2.pid)).toBe(true);
  });

  it('SGLang: rank 0 whose peer went holds its requests until --watchdog-timeout, then crashes; a rank ≥ 1 whose leader went stays', async () => {
    const [p0, p1, init] = [await freePort(), await freePort(), await freePort()];
    const common = ['--model-path', 'org/m', '--tp-size', '2', '--nnodes', '2', '--dist-init-addr', `127.0.0.1:${init}`, '--skip-server-warmup', '--watchdog-timeout', '2', '--sim-load-time', '100ms'];
    const leader = startFakeEngine(FAKE_SGLANG, ['serve', '--port', String(p0), '--node-rank', '0', ...common], { CUDA_VISIBLE_DEVICES: '0' });
    const worker = startFakeEngine(FAKE_SGLANG, ['serve', '--port', String(p1), '--node-rank', '1', ...common], { CUDA_VISIBLE_DEVICES: '0' });
    await outputMatches(leader, /rendezvous: rank joined/);
    await outputMatches(leader, /Uvicorn running/);
    process.kill(-worker.pid, 'SIGKILL');
    await outputMatches(leader, /a peer rank disconnected/);
    // A request in a forward step that never ends: the watchdog's.
    void completes(p0, 'org/m', 30_000);
    const ended = await leader.exited;
    expect(ended.signal).toBe('SIGKILL');
    expect(leader.output()).toMatch(/Scheduler watchdog timeout \(self\.watchdog_timeout=2, self\.soft=False\)/);

    const [q0, q1, init2] = [await freePort(), await freePort(), await freePort()];
    const common2 = common.map((a) => (a === `127.0.0.1:${init}` ? `127.0.0.1:${init2}` : a));
    const leader2 = startFakeEngine(FAKE_SGLANG, ['serve', '--port', String(q0), '--node-rank', '0', ...common2], { CUDA_VISIBLE_DEVICES: '0' });
    const worker2 = startFakeEngine(FAKE_SGLANG, ['serve', '--port', String(q1), '--node-rank', '1', ...common2], { CUDA_VISIBLE_DEVICES: '0' });
    await outputMatches(worker2, /rendezvous: joined rank 0/);
    process.kill(-leader2.pid, 'SIGKILL');
    await outputMatches(worker2, /is gone; waiting in the collective/);
    await until(async () => (await fetch(`http://127.0.0.1:${q1}/health`).catch(() => undefined))?.status === 200, 'the worker rank\'s dummy /health to answer 200');
    expect(isRunning(worker2.pid)).toBe(true);
  });
});
