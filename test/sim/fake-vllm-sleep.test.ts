import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, describe, it, type TestContext } from 'vitest';
import { readGpuUsage } from '../../src/sim/fake-gpu-usage.js';
import { freePort, until } from '../helpers/engine-processes.js';
import { FAKE_VLLM, consumeStream, fakeEnginesOf, outputMatches } from '../helpers/fake-engines.js';

/*
 * The vLLM double's sleep mode as unkind as vLLM 2f41c894 (review
 * engine-fidelity-2 §3 N1, N10; src/sim/fake-vllm-sleep.ts): a level-2 sleep
 * discards the weights, and a wake without reload_weights serves garbage
 * while /health, /v1/models and the GPU memory all look right; /sleep
 * without --enable-sleep-mode is a 200 that aborts and frees nothing.
 *
 * The tests run side by side (describe.concurrent): most of each is waiting on the doubles' timers.
 * Each kills only the doubles it started when it ends (fakeEnginesOf), and takes expect from its
 * context: vitest tracks no concurrent test in its globals.
 */

const roots: string[] = [];
afterAll(() => {
  for (const r of roots) rmSync(r, { recursive: true, force: true });
});

/**
 * The double's API-server watchdog looks every 5 s, as vLLM's does, and only then exits after an engine
 * death: tests that wait for that exit and check nothing in between shorten it (--sim-engine-watchdog).
 * Tests that check the window between the death and the exit (/health 503) keep vLLM's 5 s.
 */
const QUICK_WATCHDOG = ['--sim-engine-watchdog', '200ms'];

const GPU = 3;
const MIB = 10_000;

const post = (url: string, body?: unknown) =>
  fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, ...(body === undefined ? {} : { body: JSON.stringify(body) }) });

async function vllm(ctx: TestContext, args: string[] = ['--enable-sleep-mode']) {
  const usage = mkdtempSync(join(tmpdir(), 'llmgw-vllm-sleep-'));
  roots.push(usage);
  const port = await freePort();
  const e = fakeEnginesOf(ctx)(
    FAKE_VLLM,
    ['serve', 'org/model', '--port', String(port), '--sim-gpu-memory', String(MIB), '--sim-gpu-usage-dir', usage, '--sim-wake-time', '20ms', ...args],
    { VLLM_SERVER_DEV_MODE: '1', CUDA_VISIBLE_DEVICES: String(GPU) },
  );
  await outputMatches(e, /Application startup complete/);
  const url = `http://127.0.0.1:${port}`;
  return {
    ...e,
    url,
    memory: () => readGpuUsage(usage).get(GPU),
    /** A greedy completion's text. */
    answer: async () => ((await (await post(`${url}/v1/completions`, { prompt: 'The capital of France is', max_tokens: 6, temperature: 0 })).json()) as { choices: { text: string }[] }).choices[0]?.text,
    sleeping: async () => ((await (await fetch(`${url}/is_sleeping`)).json()) as { is_sleeping: boolean }).is_sleeping,
    call: async (path: string, body?: unknown) => (await post(`${url}${path}`, body)).status,
  };
}

describe.concurrent('bin/fake-vllm sleep mode (V:vllm/entrypoints/serve/dev/sleep/api_router.py:21-48)', () => {
  it('after a level-2 sleep and a bare wake_up answers garbage, though /health, /v1/models, /is_sleeping and the GPU memory all say it is back', async (ctx) => {
    const { expect } = ctx;
    const e = await vllm(ctx);
    const before = await e.answer();
    expect(before).not.toMatch(/^!+$/);
    expect(await e.call('/sleep?level=2')).toBe(200);
    expect(e.memory()).toBeLessThan(MIB / 10);
    expect(await e.call('/wake_up')).toBe(200);
    expect((await fetch(`${e.url}/health`)).status).toBe(200);
    expect((await fetch(`${e.url}/v1/models`)).status).toBe(200);
    expect(await e.sleeping()).toBe(false);
    expect(e.memory()).toBe(MIB);
    expect(await e.answer()).toBe('!!!!!!');
  });

  it('wakes a level-2 sleep in the documented three calls (weights, reload_weights, kv_cache) with its own answer back, the partial wake seen in memory and /is_sleeping', async (ctx) => {
    const { expect } = ctx;
    const e = await vllm(ctx);
    const before = await e.answer();
    expect(await e.call('/sleep?level=2')).toBe(200);
    expect(await e.call('/wake_up?tags=weights')).toBe(200);
    const weightsOnly = e.memory() as number;
    expect(weightsOnly).toBeGreaterThan(MIB / 10);
    expect(weightsOnly).toBeLessThan(MIB / 2);
    expect(await e.sleeping()).toBe(true);
    const rpc = await post(`${e.url}/collective_rpc`, { method: 'reload_weights' });
    expect([rpc.status, await rpc.json()]).toEqual([200, { results: [null] }]);
    expect(await e.call('/wake_up?tags=kv_cache')).toBe(200);
    expect(e.memory()).toBe(MIB);
    expect(await e.sleeping()).toBe(false);
    expect(await e.answer()).toBe(before);
  });

  it('keeps the weights through a level-1 sleep: a bare wake_up answers as before', async (ctx) => {
    const { expect } = ctx;
    const e = await vllm(ctx);
    const before = await e.answer();
    expect(await e.call('/sleep?level=1')).toBe(200);
    expect(await e.sleeping()).toBe(true);
    expect(await e.call('/wake_up')).toBe(200);
    expect(await e.answer()).toBe(before);
  });

  it('queues a request sent while only the weights are awake and runs it once the KV cache is back (core.py:918-921)', async (ctx) => {
    const { expect } = ctx;
    const e = await vllm(ctx);
    expect(await e.call('/sleep?level=1')).toBe(200);
    expect(await e.call('/wake_up?tags=weights')).toBe(200);
    let answered = false;
    const held = e.answer().then((a) => {
      answered = true;
      return a;
    });
    await until(async () => (await (await fetch(`${e.url}/metrics`)).text()).includes('vllm:num_requests_waiting{engine="0",model_name="org/model"} 1.0'), 'the request queued');
    expect(answered).toBe(false);
    expect(await e.call('/wake_up?tags=kv_cache')).toBe(200);
    expect(await held).not.toMatch(/^!+$/);
  });

  it('fails the engine on reload_weights while the weights still sleep, and refuses a collective_rpc without a method', async (ctx) => {
    const { expect } = ctx;
    const e = await vllm(ctx);
    expect((await post(`${e.url}/collective_rpc`, {})).status).toBe(400);
    expect(await e.call('/sleep?level=2')).toBe(200);
    const rpc = await post(`${e.url}/collective_rpc`, { method: 'reload_weights' });
    expect(rpc.status).toBe(500);
    expect(await rpc.text()).toMatch(/illegal memory access/);
    expect((await fetch(`${e.url}/health`)).status).toBe(503);
    expect(await e.exited).toEqual({ code: 1, signal: null });
  });

  it('shows vllm:engine_sleep_state, which says awake after any wake_up, partial or not (V:vllm/v1/engine/async_llm.py:971-983)', async (ctx) => {
    const { expect } = ctx;
    const e = await vllm(ctx);
    const state = async () => {
      const text = await (await fetch(`${e.url}/metrics`)).text();
      return Object.fromEntries([...text.matchAll(/^vllm:engine_sleep_state\{.*sleep_state="(\w+)"\} ([\d.]+)$/gm)].map((m) => [m[1], Number(m[2])]));
    };
    expect(await state()).toEqual({ awake: 1, weights_offloaded: 0, discard_all: 0 });
    await e.call('/sleep?level=2');
    expect(await state()).toEqual({ awake: 0, weights_offloaded: 0, discard_all: 1 });
    await e.call('/wake_up?tags=weights');
    expect(await state()).toEqual({ awake: 1, weights_offloaded: 0, discard_all: 0 });
    expect(await e.sleeping()).toBe(true);
  });

  it('without --enable-sleep-mode answers /sleep 200 after aborting what was in flight, and frees nothing (review §3 N10)', async (ctx) => {
    const { expect } = ctx;
    const e = await vllm(ctx, ['--sim-token-latency', '30ms']);
    expect(e.output()).not.toMatch(/Sleep mode enabled/);
    const res = await post(`${e.url}/v1/completions`, { prompt: 'x', max_tokens: 200, stream: true });
    let seen = 0;
    const stream = consumeStream(res, (n) => {
      seen = n;
    });
    await until(() => seen >= 2, 'some tokens');
    expect(await e.call('/sleep?level=2')).toBe(200);
    expect((await stream).done).toBe(false);
    expect(await e.sleeping()).toBe(true);
    expect(e.memory()).toBe(MIB);
    expect(e.output()).toMatch(/Sleep mode freed 0\.00 GiB/);
    expect(await e.call('/wake_up')).toBe(200);
    expect(await e.answer()).not.toMatch(/^!+$/);
  });
});

// Issue 47 item 8 (review engine-fidelity-3 §3 D1, D2; src/sim/fake-vllm-sleep-faults.ts).
describe.concurrent('bin/fake-vllm sleeps it cannot survive', () => {
  const metric = async (url: string, name: string) => {
    const line = (await (await fetch(`${url}/metrics`)).text()).split('\n').find((l) => l.startsWith(`${name}{`));
    return Number(line?.split(' ').at(-1));
  };

  it('before #44483 (--sim-version 0.22.0) resumes its scheduler at wake_up?tags=weights and a request queued while asleep crashes it', async (ctx) => {
    const { expect } = ctx;
    const e = await vllm(ctx, ['--enable-sleep-mode', '--sim-version', '0.22.0', ...QUICK_WATCHDOG]);
    expect(await e.call('/sleep?level=2')).toBe(200);
    const held = e.answer().catch((err: unknown) => err);
    await until(async () => (await (await fetch(`${e.url}/metrics`)).text()).includes('vllm:num_requests_waiting{engine="0",model_name="org/model"} 1.0'), 'the request queued');
    expect(await e.call('/wake_up?tags=weights')).toBe(200);
    await held;
    expect(await e.exited).toEqual({ code: 1, signal: null });
    expect(e.output()).toMatch(/RuntimeError: CUDA error: an illegal memory access was encountered \(1 request\(s\) scheduled after a partial wake, tags kv_cache still asleep\)/);
  });

  it('before #44483 survives the same partial wake with nothing queued, and a level-1 wake with a request queued (look-alikes)', async (ctx) => {
    const { expect } = ctx;
    const e = await vllm(ctx, ['--enable-sleep-mode', '--sim-version', '0.22.0']);
    expect(await e.call('/sleep?level=1')).toBe(200);
    const held = e.answer();
    await until(async () => (await (await fetch(`${e.url}/metrics`)).text()).includes('vllm:num_requests_waiting{engine="0",model_name="org/model"} 1.0'), 'the request queued');
    expect(await e.call('/wake_up')).toBe(200);
    expect(await held).not.toMatch(/^!+$/);
    expect(await e.call('/sleep?level=2')).toBe(200);
    expect(await e.call('/wake_up?tags=weights')).toBe(200);
    expect((await post(`${e.url}/collective_rpc`, { method: 'reload_weights' })).status).toBe(200);
    expect(await e.call('/wake_up?tags=kv_cache')).toBe(200);
    expect((await fetch(`${e.url}/health`)).status).toBe(200);
  });

  it('before #44483 a DP rank asleep runs a dummy batch on its released memory and dies; a fixed version sleeps under DP', async (ctx) => {
    const { expect } = ctx;
    const old = await vllm(ctx, ['--enable-sleep-mode', '--sim-version', '0.23.0', '--data-parallel-size', '2', '--api-server-count', '1', ...QUICK_WATCHDOG]);
    expect(await old.call('/sleep?level=1')).toBe(200);
    expect(await old.exited).toEqual({ code: 1, signal: null });
    expect(old.output()).toMatch(/illegal memory access was encountered \(DP dummy batch while asleep\)/);
    const fixed = await vllm(ctx, ['--enable-sleep-mode', '--data-parallel-size', '2', '--api-server-count', '1']);
    expect(await fixed.call('/sleep?level=1')).toBe(200);
    await sleep(500);
    expect((await fetch(`${fixed.url}/is_sleeping`)).status).toBe(200);
    expect(await fixed.call('/wake_up')).toBe(200);
  });

  it('answers reload_weights 500 NotImplementedError for a loader without reload, the engine unharmed; a DefaultModelLoader format reloads', async (ctx) => {
    const { expect } = ctx;
    const e = await vllm(ctx, ['--enable-sleep-mode', '--load-format', 'runai_streamer']);
    expect(await e.call('/sleep?level=2')).toBe(200);
    expect(await e.call('/wake_up?tags=weights')).toBe(200);
    const rpc = await post(`${e.url}/collective_rpc`, { method: 'reload_weights' });
    expect(rpc.status).toBe(500);
    expect(await rpc.text()).toMatch(/NotImplementedError: Model reloading with `runai_streamer` format/);
    expect((await fetch(`${e.url}/health`)).status).toBe(200);
    const ok = await vllm(ctx, ['--enable-sleep-mode', '--load-format', 'safetensors']);
    expect(await ok.call('/sleep?level=2')).toBe(200);
    expect(await ok.call('/wake_up?tags=weights')).toBe(200);
    expect((await post(`${ok.url}/collective_rpc`, { method: 'reload_weights' })).status).toBe(200);
  });

  it('with --speculative-config stops accepting drafted tokens after a level-2 sleep, however it is woken, the answers unchanged; level 1 keeps the draft', async (ctx) => {
    const { expect } = ctx;
    const e = await vllm(ctx, ['--enable-sleep-mode', '--speculative-config', '{"method":"eagle","model":"org/draft","num_speculative_tokens":1}']);
    const before = await e.answer();
    expect(await metric(e.url, 'vllm:spec_decode_num_accepted_tokens_total')).toBe(6);
    expect(await e.call('/sleep?level=1')).toBe(200);
    expect(await e.call('/wake_up')).toBe(200);
    await e.answer();
    expect(await metric(e.url, 'vllm:spec_decode_num_accepted_tokens_total')).toBe(12);
    expect(await e.call('/sleep?level=2')).toBe(200);
    for (const step of ['/wake_up?tags=weights', '/collective_rpc', '/wake_up?tags=kv_cache']) {
      expect(step === '/collective_rpc' ? (await post(`${e.url}${step}`, { method: 'reload_weights' })).status : await e.call(step)).toBe(200);
    }
    expect(await e.answer()).toBe(before);
    expect(await metric(e.url, 'vllm:spec_decode_num_accepted_tokens_total')).toBe(12);
    expect(await metric(e.url, 'vllm:spec_decode_num_draft_tokens_total')).toBe(18);
  });

  it('reads the checkpoint at --sim-disk-rate in reload_weights: 300 MiB of weights at 100 MiB/s take 3 s', async (ctx) => {
    const { expect } = ctx;
    const e = await vllm(ctx, ['--enable-sleep-mode', '--sim-gpu-memory', '1000', '--sim-disk-rate', '100']);
    expect(await e.call('/sleep?level=2')).toBe(200);
    expect(await e.call('/wake_up?tags=weights')).toBe(200);
    const t0 = performance.now();
    expect((await post(`${e.url}/collective_rpc`, { method: 'reload_weights' })).status).toBe(200);
    expect(performance.now() - t0).toBeGreaterThanOrEqual(2900);
    expect(e.output()).toMatch(/Reloading and processing weights took 3\.00 seconds/);
  });
});

describe.concurrent('bin/fake-vllm --sim-hold-file (src/sim/sim-hold.ts)', () => {
  it('holds a named step before it runs, answers /is_sleeping only after it (utility calls in order, V:vllm/v1/engine/core.py:1417-1446), and runs it though its client went away', async (ctx) => {
    const { expect } = ctx;
    const dir = mkdtempSync(join(tmpdir(), 'llmgw-vllm-hold-'));
    roots.push(dir);
    const hold = join(dir, 'hold');
    writeFileSync(hold, 'wake_up\n');
    const e = await vllm(ctx, ['--enable-sleep-mode', '--sim-hold-file', hold]);
    expect(await e.call('/sleep?level=1')).toBe(200);
    const asker = new AbortController();
    const wake = fetch(`${e.url}/wake_up`, { method: 'POST', signal: asker.signal }).catch(() => 'gone');
    await until(() => existsSync(`${hold}.holding`), 'the double to hold wake_up');
    expect(readFileSync(`${hold}.holding`, 'utf8')).toBe('wake_up\n');
    // Whoever asked the wake goes away (an agent stopped), and a question comes behind it.
    asker.abort();
    expect(await wake).toBe('gone');
    const order: string[] = [];
    const asked = e.sleeping().then((v) => order.push(`is_sleeping ${v}`));
    // Not a wait for time: the question is in the chain, behind the held step, and only this line lets it go.
    expect(order).toEqual([]);
    writeFileSync(hold, '');
    await asked;
    expect(order).toEqual(['is_sleeping false']);
    expect(existsSync(`${hold}.holding`)).toBe(false);
    expect(e.memory()).toBe(MIB);
  });
});
