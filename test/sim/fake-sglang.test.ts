import { once } from 'node:events';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, it, type TestContext } from 'vitest';
import { freePort, groupMembers, isRunning, until } from '../helpers/engine-processes.js';
import { readGpuUsage } from '../../src/sim/fake-gpu-usage.js';
import { FAKE_SGLANG, consumeStream, fakeEnginesOf, outputMatches } from '../helpers/fake-engines.js';

/*
 * The tests run side by side (describe.concurrent): each starts doubles of its own and waits mostly on
 * their timers (a load, /health's 1 s generation, a stall past SGLANG_HEALTH_CHECK_TIMEOUT, token latency),
 * which they now wait out together. Each kills only the doubles it started when it ends (fakeEnginesOf),
 * and takes expect from its context: vitest tracks no concurrent test in its globals.
 */

const post = (url: string, body: unknown, headers: Record<string, string> = {}) =>
  fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });

async function sglang(ctx: TestContext, args: string[], env: Record<string, string> = {}, waitFor = /fired up and ready to roll/) {
  const port = await freePort();
  const e = fakeEnginesOf(ctx)(FAKE_SGLANG, ['serve', '--model-path', 'org/model', '--port', String(port), ...args], env);
  await outputMatches(e, waitFor);
  return { ...e, port, url: `http://127.0.0.1:${port}` };
}

const LABELS = 'model_name="served",engine_type="unified",tp_rank="0",pp_rank="0",moe_ep_rank="0"';

/** The sum of a series over its label sets that start with LABELS plus `extra`; NaN when none. */
async function metric(url: string, name: string, extra = ''): Promise<number> {
  const text = await (await fetch(`${url}/metrics`)).text();
  const lines = text.split('\n').filter((l) => l.startsWith(`${name}{${LABELS}${extra}`));
  return lines.length ? lines.reduce((s, l) => s + Number(l.split(' ').at(-1)), 0) : Number.NaN;
}

const schedulerPids = (out: string) => [...out.matchAll(/Scheduler proc (\d+) ready/g)].map((m) => Number(m[1]));

describe.concurrent('bin/fake-sglang', () => {
  it('refuses an unknown flag as argparse does, in both command forms', async (ctx) => {
    const { expect } = ctx;
    const cli = fakeEnginesOf(ctx)(FAKE_SGLANG, ['serve', '--model-path', 'm', '--x']);
    expect(await cli.exited).toEqual({ code: 2, signal: null });
    expect(cli.output()).toMatch(/^usage: sglang serve .*\nsglang serve: error: unrecognized arguments: --x\n$/);
    const legacy = fakeEnginesOf(ctx)(FAKE_SGLANG, ['--port', '1']);
    expect(await legacy.exited).toEqual({ code: 2, signal: null });
    expect(legacy.output()).toMatch(/launch_server.py: error: the following arguments are required: --model-path\/--model/);
  });

  it('opens no port while loading; then /health takes at least 1 s, /ping is instant, /v1/models lists the served name', async (ctx) => {
    const { expect } = ctx;
    // A load far longer than the test: the closed port is seen while it surely loads, whatever the machine's load.
    const loading = await sglang(ctx, ['--sim-load-time', '600s'], {}, /Load weight begin/);
    await expect(fetch(`${loading.url}/health`)).rejects.toMatchObject({ cause: { code: 'ECONNREFUSED' } });
    const e = await sglang(ctx, ['--served-model-name', 'served', '--sim-load-time', '200ms'], {}, /Load weight begin/);
    await outputMatches(e, /fired up and ready to roll/);
    const t0 = Date.now();
    expect((await fetch(`${e.url}/health`)).status).toBe(200);
    const healthMs = Date.now() - t0;
    expect(healthMs).toBeGreaterThanOrEqual(1000);
    const t1 = Date.now();
    expect((await fetch(`${e.url}/ping`)).status).toBe(200);
    // /ping does not wait the second /health does (a bound relative to it, not to the wall clock).
    expect(Date.now() - t1).toBeLessThan(healthMs);
    expect(await (await fetch(`${e.url}/v1/models`)).json()).toMatchObject({ data: [{ id: 'served', owned_by: 'sglang' }] });
  });

  it('answers /health at once with SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION=0, but /health_generate still generates', async (ctx) => {
    const { expect } = ctx;
    const e = await sglang(ctx, [], { SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION: '0' });
    // At once: /health, asked just after a /health_generate, answers before it, which waits 1 s for its generation
    // (a /health that generated too would answer after it). By the order, not the wall clock: a first fetch took
    // 4.7 s at load 18, past the 500 ms bound this had; the /ping first pays the connection's first costs.
    expect((await fetch(`${e.url}/ping`)).status).toBe(200);
    const answered: string[] = [];
    const ask = async (path: string) => {
      const r = await fetch(`${e.url}${path}`);
      answered.push(path);
      return r.status;
    };
    const t1 = Date.now();
    const generate = ask('/health_generate');
    const health = ask('/health');
    expect(await Promise.all([generate, health])).toEqual([200, 200]);
    expect(Date.now() - t1).toBeGreaterThanOrEqual(1000);
    expect(answered).toEqual(['/health', '/health_generate']);
  });

  it('after a stall, /health answers 503 once SGLANG_HEALTH_CHECK_TIMEOUT passes without output', async (ctx) => {
    const { expect } = ctx;
    // The stall comes after the warmup (which must end for "fired up"): at 100 ms it raced the start on a loaded machine.
    const e = await sglang(ctx, ['--sim-stall-after', '1500ms'], { SGLANG_HEALTH_CHECK_TIMEOUT: '2' });
    await outputMatches(e, /no token produced/);
    expect((await fetch(`${e.url}/health`)).status).toBe(503);
  });

  it('with --api-key guards all but /health* and /metrics: /ping too (auth.py:100)', async (ctx) => {
    const { expect } = ctx;
    const e = await sglang(ctx, ['--api-key', 'k1', '--enable-metrics'], { SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION: 'false' });
    const denied = await fetch(`${e.url}/v1/models`);
    expect([denied.status, await denied.json()]).toEqual([401, { error: 'Unauthorized' }]);
    expect((await fetch(`${e.url}/v1/models`, { headers: { authorization: 'Bearer k1' } })).status).toBe(200);
    expect((await fetch(`${e.url}/v1/loads`)).status).toBe(401);
    for (const p of ['/health', '/metrics']) expect((await fetch(`${e.url}${p}`)).status).toBe(200);
    expect((await fetch(`${e.url}/ping`)).status).toBe(401);
    expect((await fetch(`${e.url}/ping`, { headers: { authorization: 'Bearer k1' } })).status).toBe(200);
  });

  describe('--admin-api-key: the three-way rule of ADMIN_OPTIONAL routes (auth.py:123-146)', () => {
    const bearer = (k: string) => ({ authorization: `Bearer ${k}` });
    const pause = (url: string, h: Record<string, string> = {}) => post(`${url}/pause_generation`, { mode: 'abort' }, h).then((r) => r.status);
    const cont = (url: string, h: Record<string, string> = {}) => post(`${url}/continue_generation`, {}, h).then((r) => r.status);
    const models = (url: string, h: Record<string, string> = {}) => fetch(`${url}/v1/models`, { headers: h }).then((r) => r.status);

    it('only --admin-api-key: the admin routes take that key alone, /v1 is open', async (ctx) => {
      const { expect } = ctx;
      const e = await sglang(ctx, ['--admin-api-key', 'adm']);
      expect(await pause(e.url)).toBe(401);
      expect(await pause(e.url, bearer('other'))).toBe(401);
      expect(await pause(e.url, bearer('adm'))).toBe(200);
      expect(await cont(e.url, bearer('adm'))).toBe(200);
      expect(await models(e.url)).toBe(200);
    });

    it('both keys: the admin routes refuse the API key and take the admin key; /v1 takes the API key only', async (ctx) => {
      const { expect } = ctx;
      const e = await sglang(ctx, ['--api-key', 'api', '--admin-api-key', 'adm']);
      expect(await pause(e.url, bearer('api'))).toBe(401);
      expect(await post(`${e.url}/release_memory_occupation`, {}, bearer('api')).then((r) => r.status)).toBe(401);
      expect(await pause(e.url, bearer('adm'))).toBe(200);
      expect(await cont(e.url, bearer('adm'))).toBe(200);
      expect(await models(e.url, bearer('api'))).toBe(200);
      expect(await models(e.url, bearer('adm'))).toBe(401);
    });

    it('only --api-key: the admin routes take the API key', async (ctx) => {
      const { expect } = ctx;
      const e = await sglang(ctx, ['--api-key', 'api']);
      expect(await pause(e.url)).toBe(401);
      expect(await pause(e.url, bearer('api'))).toBe(200);
      expect(await cont(e.url, bearer('api'))).toBe(200);
    });
  });

  it('has /metrics only with --enable-metrics', async (ctx) => {
    const { expect } = ctx;
    const e = await sglang(ctx, []);
    expect((await fetch(`${e.url}/metrics`)).status).toBe(404);
  });

  it('keeps generation_tokens_total flat during a long stream while realtime_tokens_total rises, then adds the whole count', async (ctx) => {
    const { expect } = ctx;
    const e = await sglang(ctx, ['--served-model-name', 'served', '--enable-metrics', '--sim-token-latency', '20ms', '--decode-log-interval', '5']);
    const res = await post(`${e.url}/v1/completions`, { prompt: 'a b c', max_tokens: 40, stream: true });
    let seen = 0;
    const stream = consumeStream(res, (n) => {
      seen = n;
    });
    await until(() => seen >= 10, 'ten tokens');
    // Refreshed at the 5th decode step (--decode-log-interval 5), so it shows the request by now.
    expect(await metric(e.url, 'sglang:num_running_reqs')).toBe(1);
    expect(await metric(e.url, 'sglang:generation_tokens_total')).toBe(0);
    expect(await metric(e.url, 'sglang:realtime_tokens_total', ',mode="decode"')).toBeGreaterThanOrEqual(9);
    // The prompt's 3 and the warmup's 1: the scheduler counts its own requests too.
    expect(await metric(e.url, 'sglang:realtime_tokens_total', ',mode="prefill_compute"')).toBe(4);
    expect(await stream).toEqual({ tokens: 40, done: true });
    expect(await metric(e.url, 'sglang:generation_tokens_total')).toBe(40);
    expect(await metric(e.url, 'sglang:prompt_tokens_total')).toBe(3);
    expect(await metric(e.url, 'sglang:num_requests_total')).toBe(1);
  });

  it('counts requests beyond --sim-max-running in num_queue_reqs and /v1/loads; with priority scheduling writes the total and each priority', async (ctx) => {
    const { expect } = ctx;
    // Gauges refreshed at every decode step, so they show the batch once its first step is done.
    const e = await sglang(ctx, ['--served-model-name', 'served', '--enable-metrics', '--enable-priority-scheduling', '--sim-max-running', '1', '--sim-token-latency', '30ms', '--decode-log-interval', '1']);
    const a = post(`${e.url}/v1/completions`, { prompt: 'x', max_tokens: 20, priority: 1 }).then((r) => r.json());
    const b = post(`${e.url}/v1/completions`, { prompt: 'x', max_tokens: 2, priority: 2 }).then((r) => r.json());
    await until(async () => ((await (await fetch(`${e.url}/v1/loads`)).json()) as { loads: Record<string, number>[] }).loads[0]?.num_waiting_reqs === 1, 'one waiting');
    expect(((await (await fetch(`${e.url}/v1/loads`)).json()) as { loads: Record<string, number>[] }).loads[0]).toMatchObject({ dp_rank: 0, num_running_reqs: 1, num_waiting_reqs: 1 });
    await until(async () => (await metric(e.url, 'sglang:num_running_reqs', ',priority=""')) === 1, 'the gauge refreshed by a decode step');
    expect(await metric(e.url, 'sglang:num_running_reqs', ',priority="1"')).toBe(1);
    // Summed over every label set the running count doubles (review §0 #10).
    expect(await metric(e.url, 'sglang:num_running_reqs')).toBe(2);
    expect(await metric(e.url, 'sglang:num_queue_reqs', ',priority="2"')).toBe(1);
    await Promise.all([a, b]);
  });

  it('runs tp×pp schedulers and a detokenizer in its group; a group SIGTERM kills them, the watchdog kills the tree and cuts the stream', async (ctx) => {
    const { expect } = ctx;
    const e = await sglang(ctx, ['--tp-size', '2', '--sim-token-latency', '50ms'], {}, /Detokenizer proc \d+ ready[\s\S]*fired up|fired up[\s\S]*Detokenizer proc \d+ ready/);
    await until(() => schedulerPids(e.output()).length === 2, 'two schedulers');
    expect(groupMembers(e.pid)).toHaveLength(4);
    const res = await post(`${e.url}/v1/completions`, { prompt: 'x', max_tokens: 200, stream: true });
    let seen = 0;
    const stream = consumeStream(res, (n) => {
      seen = n;
    });
    await until(() => seen >= 2, 'some tokens');
    process.kill(-e.pid, 'SIGTERM');
    expect((await stream).done).toBe(false);
    expect(await e.exited).toEqual({ code: null, signal: 'SIGKILL' });
    expect(e.output()).toMatch(/Received sigquit from a child process/);
  });

  it('on a SIGTERM to the main process only drains: /health 503, every token arrives, schedulers ended, then it SIGKILLs itself as kill_process_tree does', async (ctx) => {
    const { expect } = ctx;
    const e = await sglang(ctx, ['--tp-size', '2', '--sim-drain-poll', '200ms', '--sim-token-latency', '20ms']);
    await until(() => schedulerPids(e.output()).length === 2, 'two schedulers');
    const schedulers = schedulerPids(e.output());
    const res = await post(`${e.url}/v1/completions`, { prompt: 'x', max_tokens: 40, stream: true });
    const stream = consumeStream(res);
    process.kill(e.pid, 'SIGTERM');
    await outputMatches(e, /gracefully exiting/);
    expect((await fetch(`${e.url}/health`)).status).toBe(503);
    expect(await stream).toEqual({ tokens: 40, done: true });
    expect(await e.exited).toEqual({ code: null, signal: 'SIGKILL' });
    expect(schedulers.filter(isRunning)).toEqual([]);
  });

  it('with SGL_FORCE_SHUTDOWN exits at once on SIGTERM, in-flight requests cut', async (ctx) => {
    const { expect } = ctx;
    const e = await sglang(ctx, ['--sim-token-latency', '50ms'], { SGL_FORCE_SHUTDOWN: '1' });
    const res = await post(`${e.url}/v1/completions`, { prompt: 'x', max_tokens: 100, stream: true });
    const stream = consumeStream(res);
    process.kill(e.pid, 'SIGTERM');
    expect((await stream).done).toBe(false);
    expect(await e.exited).toEqual({ code: null, signal: 'SIGKILL' });
  });

  it('publishes num_running_reqs at a prefill and every --decode-log-interval decode steps, not live: a request alone shorter than the interval never shows', async (ctx) => {
    const { expect } = ctx;
    const e = await sglang(ctx, ['--served-model-name', 'served', '--enable-metrics', '--sim-token-latency', '10ms']);
    const reads: number[] = [];
    const pending: Promise<void>[] = [];
    // 30 tokens: 29 decode steps, fewer than the default 40.
    const res = await post(`${e.url}/v1/completions`, { prompt: 'x', max_tokens: 30, stream: true });
    const done = consumeStream(res, (n) => {
      if (n % 5 === 0 && n < 30) pending.push(metric(e.url, 'sglang:num_running_reqs').then((v) => void reads.push(v)));
    });
    expect(await done).toEqual({ tokens: 30, done: true });
    await Promise.all(pending);
    expect(reads).toHaveLength(5);
    expect(new Set(reads)).toEqual(new Set([0]));

    // With --decode-log-interval 5 the same request shows from its 5th decode step, and 0 once the scheduler idles.
    const f = await sglang(ctx, ['--served-model-name', 'served', '--enable-metrics', '--sim-token-latency', '10ms', '--decode-log-interval', '5']);
    let seen = 0;
    const stream = consumeStream(await post(`${f.url}/v1/completions`, { prompt: 'x', max_tokens: 200, stream: true }), (n) => {
      seen = n;
    });
    await until(() => seen >= 12, 'twelve tokens');
    expect(await metric(f.url, 'sglang:num_running_reqs')).toBe(1);
    await stream;
    await until(async () => (await metric(f.url, 'sglang:num_running_reqs')) === 0, 'the idle scheduler to publish 0');
  });

  it('counts a repeated prompt as prefill_cache, all but its last token, and has no series for a mode never counted', async (ctx) => {
    const { expect } = ctx;
    const e = await sglang(ctx, ['--served-model-name', 'served', '--enable-metrics']);
    expect(await metric(e.url, 'sglang:realtime_tokens_total', ',mode="prefill_cache"')).toBeNaN();
    expect(await metric(e.url, 'sglang:realtime_tokens_total', ',mode="decode"')).toBeNaN();
    const prompt = 'one two three four five six';
    await (await post(`${e.url}/v1/completions`, { prompt, max_tokens: 3 })).json();
    const computed = await metric(e.url, 'sglang:realtime_tokens_total', ',mode="prefill_compute"');
    expect(await metric(e.url, 'sglang:realtime_tokens_total', ',mode="prefill_cache"')).toBeNaN();
    expect(await metric(e.url, 'sglang:realtime_tokens_total', ',mode="decode"')).toBe(2);
    await (await post(`${e.url}/v1/completions`, { prompt, max_tokens: 3 })).json();
    expect(await metric(e.url, 'sglang:realtime_tokens_total', ',mode="prefill_cache"')).toBe(5);
    expect(await metric(e.url, 'sglang:realtime_tokens_total', ',mode="prefill_compute"')).toBe(computed + 1);
    expect(await metric(e.url, 'sglang:realtime_tokens_total', ',mode="decode"')).toBe(4);
  });

  it('while paused answers /v1/models, /model_info and /server_info without running the model, and holds /health_generate', async (ctx) => {
    const { expect } = ctx;
    const e = await sglang(ctx, ['--served-model-name', 'served']);
    expect((await post(`${e.url}/pause_generation`, { mode: 'abort' })).status).toBe(200);
    let healthSettled = false;
    const health = fetch(`${e.url}/health_generate`).finally(() => {
      healthSettled = true;
    });
    expect(await (await fetch(`${e.url}/v1/models`)).json()).toMatchObject({ data: [{ id: 'served' }] });
    expect(await (await fetch(`${e.url}/model_info`)).json()).toMatchObject({ model_path: 'org/model', served_model_name: 'served', is_generation: true });
    expect(await (await fetch(`${e.url}/server_info`)).json()).toMatchObject({ model_path: 'org/model', version: '0.5.18' });
    // It cannot answer before /continue_generation (nor within SGLANG_HEALTH_CHECK_TIMEOUT's 20 s).
    expect(healthSettled).toBe(false);
    expect((await post(`${e.url}/continue_generation`, {})).status).toBe(200);
    expect((await health).status).toBe(200);
  });

  it('while paused never finishes its SIGTERM drain: the request it holds counts (rid_to_state), until the supervisor kills it', async (ctx) => {
    const { expect } = ctx;
    const e = await sglang(ctx, ['--sim-drain-poll', '100ms']);
    expect((await post(`${e.url}/pause_generation`, { mode: 'abort' })).status).toBe(200);
    let answered = false;
    const held = post(`${e.url}/v1/completions`, { prompt: 'x', max_tokens: 3 }).then(
      () => {
        answered = true;
      },
      () => {},
    );
    process.kill(e.pid, 'SIGTERM');
    await until(() => (e.output().match(/Remaining number of requests 1\./g) ?? []).length >= 5, 'five drain looks that count the held request');
    expect(isRunning(e.pid)).toBe(true);
    expect(answered).toBe(false);
    process.kill(-e.pid, 'SIGKILL');
    expect(await e.exited).toEqual({ code: null, signal: 'SIGKILL' });
    await held;
    expect(answered).toBe(false);
  });

  it('a /health_generate held by a pause sets UnHealthy at its own timeout though its client left; the next SIGTERM skips the drain', async (ctx) => {
    const { expect } = ctx;
    const e = await sglang(ctx, ['--sim-drain-poll', '100ms'], { SGLANG_HEALTH_CHECK_TIMEOUT: '2' });
    expect((await post(`${e.url}/pause_generation`, { mode: 'abort' })).status).toBe(200);
    // Cut before its headers went out, or after: either way not done.
    const held = post(`${e.url}/v1/completions`, { prompt: 'x', max_tokens: 3, stream: true }).then(consumeStream, () => ({ tokens: 0, done: false }));
    // A prober that gives up long before SGLang does (the agent's 5 s against its 20 s).
    await expect(fetch(`${e.url}/health_generate`, { signal: AbortSignal.timeout(200) })).rejects.toThrow();
    await outputMatches(e, /Health check failed/);
    process.kill(e.pid, 'SIGTERM');
    await outputMatches(e, /Signal SIGTERM received while health check failed\. Force exiting\./);
    expect(await e.exited).toEqual({ code: null, signal: 'SIGKILL' });
    expect((await held).done).toBe(false);
  });

  it('as node rank 1 serves no API but a dummy /health on its port once loaded, and keeps running when that port is taken', async (ctx) => {
    const { expect } = ctx;
    const port = await freePort();
    const args = ['--model-path', 'm', '--host', '127.0.0.1', '--port', String(port), '--tp-size', '2', '--nnodes', '2', '--node-rank', '1', '--dist-init-addr', '10.0.0.1:25000'];
    const loadingPort = await freePort();
    const loadingArgs = args.map((a) => (a === String(port) ? String(loadingPort) : a));
    // A load far longer than the test: the closed port is seen while it surely loads, whatever the machine's load.
    const loading = fakeEnginesOf(ctx)(FAKE_SGLANG, [...loadingArgs, '--sim-load-time', '600s']);
    await outputMatches(loading, /Load weight begin/);
    await expect(fetch(`http://127.0.0.1:${loadingPort}/health`)).rejects.toMatchObject({ cause: { code: 'ECONNREFUSED' } });
    const w = fakeEnginesOf(ctx)(FAKE_SGLANG, [...args, '--sim-load-time', '200ms']);
    await outputMatches(w, /Dummy health server/);
    expect((await fetch(`http://127.0.0.1:${port}/health`)).status).toBe(200);
    expect((await fetch(`http://127.0.0.1:${port}/v1/models`)).status).toBe(404);
    expect(w.output()).not.toMatch(/Detokenizer/);

    const taken = await freePort();
    const holder = createServer().listen(taken, '127.0.0.1');
    // Bound before the engine starts, not on a later turn of this loop.
    await once(holder, 'listening');
    try {
      const w2 = fakeEnginesOf(ctx)(FAKE_SGLANG, ['--model-path', 'm', '--port', String(taken), '--nnodes', '2', '--node-rank', '1', '--dist-init-addr', '10.0.0.1:25000']);
      await outputMatches(w2, /Failed to start the dummy health server/);
      await new Promise((r) => setTimeout(r, 300));
      expect(isRunning(w2.pid)).toBe(true);
    } finally {
      holder.close();
    }
  });
  describe('memory saver (release_memory_occupation / resume_memory_occupation)', () => {
    const saver = async (ctx: TestContext, extra: string[]) => {
      const dir = mkdtempSync(join(tmpdir(), 'fake-sglang-usage-'));
      // Registered before the double's kill, so it runs after it (a test's end hooks run as a stack).
      ctx.onTestFinished(() => rmSync(dir, { recursive: true, force: true }));
      const e = await sglang(ctx, ['--sim-gpu-memory', '10000', '--sim-gpu-usage-dir', dir, '--sim-wake-time', '300ms', '--sim-token-latency', '30ms', ...extra], { CUDA_VISIBLE_DEVICES: '3' });
      return { ...e, dir, used: () => readGpuUsage(dir).get(3) };
    };

    it('with --enable-memory-saver: release frees the GPU memory and answers null, resume takes it back after the wake time', async (ctx) => {
      const { expect } = ctx;
      const e = await saver(ctx, ['--enable-memory-saver']);
      expect(e.used()).toBe(10000);
      const released = await post(`${e.url}/release_memory_occupation`, {});
      expect(released.status).toBe(200);
      expect(await released.text()).toBe('null');
      expect(e.used()).toBeLessThan(500);
      const resumed = await post(`${e.url}/resume_memory_occupation`, {});
      expect(resumed.status).toBe(200);
      expect(e.used()).toBe(10000);
      // Only the KV cache: the weights stay.
      await post(`${e.url}/release_memory_occupation`, { tags: ['kv_cache'] });
      expect(e.used()).toBe(5000);
      await post(`${e.url}/resume_memory_occupation`, { tags: ['kv_cache'] });
      const res = await post(`${e.url}/v1/completions`, { prompt: 'x', max_tokens: 3, stream: true });
      expect(await consumeStream(res)).toEqual({ tokens: 3, done: true });
    });

    it('released, says so nowhere, as SGLang (docs/engines.md): no /is_sleeping, and /server_info as it was awake', async (ctx) => {
      const { expect } = ctx;
      const e = await saver(ctx, ['--enable-memory-saver']);
      const info = async () => (await fetch(`${e.url}/server_info`)).json();
      const awake = await info();
      expect((await post(`${e.url}/release_memory_occupation`, {})).status).toBe(200);
      expect(e.used()).toBeLessThan(500);
      const asked = await fetch(`${e.url}/is_sleeping`);
      expect(asked.status).toBe(404);
      expect(await asked.json()).toEqual({ detail: 'Not Found' });
      expect(await info()).toEqual(awake);
    });

    /** A non-streamed completion's text (the double's tokens, or '!' for each when its weights are lost). */
    const complete = async (url: string) => ((await (await post(`${url}/v1/completions`, { prompt: 'x', max_tokens: 4 })).json()) as { choices: { text: string }[] }).choices[0]?.text;
    const checksum = async (url: string) => ((await (await post(`${url}/weights_checker`, { action: 'checksum' })).json()) as { per_engine_checksum: string }).per_engine_checksum;

    it('without --enable-weights-cpu-backup a release of the weights loses them: after the resume health, /v1/models and memory are fine, every token is garbage', async (ctx) => {
      const { expect } = ctx;
      const e = await saver(ctx, ['--enable-memory-saver', '--served-model-name', 'served']);
      const good = await complete(e.url);
      expect(good).not.toMatch(/^!+$/);
      const before = await checksum(e.url);
      expect((await post(`${e.url}/release_memory_occupation`, {})).status).toBe(200);
      expect((await post(`${e.url}/resume_memory_occupation`, {})).status).toBe(200);
      expect(e.used()).toBe(10000);
      expect((await fetch(`${e.url}/health_generate`)).status).toBe(200);
      expect(await (await fetch(`${e.url}/v1/models`)).json()).toMatchObject({ data: [{ id: 'served' }] });
      expect(await complete(e.url)).toBe('!!!!');
      expect(await checksum(e.url)).not.toBe(before);
      // The same on a stream.
      const stream = await (await post(`${e.url}/v1/chat/completions`, { messages: [{ role: 'user', content: 'hi' }], max_tokens: 2, stream: true })).text();
      expect([...stream.matchAll(/"content":"([^"]*)"/g)].map((m) => m[1])).toEqual(['!', '!']);
    });

    it('POST /update_weights_from_disk brings the weights back (success answer), and the server then names itself by that model_path', async (ctx) => {
      const { expect } = ctx;
      const e = await saver(ctx, ['--enable-memory-saver', '--served-model-name', 'served']);
      const good = await complete(e.url);
      const before = await checksum(e.url);
      await post(`${e.url}/release_memory_occupation`, {});
      await post(`${e.url}/resume_memory_occupation`, {});
      expect(await complete(e.url)).toBe('!!!!');
      const missing = await post(`${e.url}/update_weights_from_disk`, {});
      expect(missing.status).toBe(400);
      const reloaded = await post(`${e.url}/update_weights_from_disk`, { model_path: 'org/model' });
      expect([reloaded.status, await reloaded.json()]).toEqual([200, { success: true, message: 'Succeeded to update model weights.', num_paused_requests: 0 }]);
      expect(await complete(e.url)).toBe(good);
      expect(await checksum(e.url)).toBe(before);
      // tokenizer_manager.py:2099-2103: served_model_name = model_path.
      expect(await (await fetch(`${e.url}/v1/models`)).json()).toMatchObject({ data: [{ id: 'org/model' }] });
      expect(await (await fetch(`${e.url}/model_info`)).json()).toMatchObject({ model_path: 'org/model', served_model_name: 'org/model' });
    });

    it('while paused and released, /update_weights_from_disk into the released weights kills the engine', async (ctx) => {
      const { expect } = ctx;
      const e = await saver(ctx, ['--enable-memory-saver']);
      await post(`${e.url}/pause_generation`, { mode: 'abort' });
      await post(`${e.url}/release_memory_occupation`, {});
      await expect(post(`${e.url}/update_weights_from_disk`, { model_path: 'org/model' })).rejects.toThrow();
      expect(await e.exited).toEqual({ code: null, signal: 'SIGKILL' });
      expect(e.output()).toMatch(/illegal memory access/);
    });

    it('with --enable-weights-cpu-backup the resume restores working weights (a pinned host copy kept)', async (ctx) => {
      const { expect } = ctx;
      const e = await saver(ctx, ['--enable-memory-saver', '--enable-weights-cpu-backup']);
      const good = await complete(e.url);
      const before = await checksum(e.url);
      await post(`${e.url}/release_memory_occupation`, {});
      expect(e.used()).toBeLessThan(500);
      expect(e.output()).toMatch(/weights copied to pinned host memory \(cpu backup, ~4500 MiB per GPU, kept until exit\)/);
      await post(`${e.url}/resume_memory_occupation`, {});
      expect(e.used()).toBe(10000);
      expect(await complete(e.url)).toBe(good);
      expect(await checksum(e.url)).toBe(before);
    });

    // Issue 47 item 8 (review engine-fidelity-3 §3 D7): torch_memory_saver's pause pins the backup with
    // cudaMallocHost and its resume maps with cu_mem_create, each under a check that exit(1)s (csrc/core.cpp, csrc/utils.h at 1a565eb).
    it('dies on the first release with a backup when the pinned copy does not fit MemAvailable (--sim-mem-available), at either "level"', async (ctx) => {
      const { expect } = ctx;
      const e = await saver(ctx, ['--enable-memory-saver', '--enable-weights-cpu-backup', '--sim-mem-available', '4499']);
      await expect(post(`${e.url}/release_memory_occupation`, {})).rejects.toThrow();
      expect(await e.exited).toEqual({ code: null, signal: 'SIGKILL' });
      expect(e.output()).toMatch(/\[torch_memory_saver\.cpp\] cudaError error: 2 \(out of memory\) \(cudaMallocHost of 4500 MiB of cpu backup, 4499 MiB available\)/);
    });

    it('pins a copy that fits, and asks no room again at its next release (the buffer is kept)', async (ctx) => {
      const { expect } = ctx;
      const e = await saver(ctx, ['--enable-memory-saver', '--enable-weights-cpu-backup', '--sim-mem-available', '4500']);
      for (let i = 0; i < 2; i++) {
        expect((await post(`${e.url}/release_memory_occupation`, {})).status).toBe(200);
        expect((await post(`${e.url}/resume_memory_occupation`, {})).status).toBe(200);
      }
      expect(e.output().match(/weights copied to pinned host memory/g)).toHaveLength(1);
      expect(e.used()).toBe(10000);
    });

    it('dies on a resume when another process now holds its GPU (the fake nvidia-smi figures), and resumes beside a small one', async (ctx) => {
      const { expect } = ctx;
      const e = await saver(ctx, ['--enable-memory-saver', '--enable-weights-cpu-backup']);
      expect((await post(`${e.url}/release_memory_occupation`, {})).status).toBe(200);
      // Another process on GPU 3 and one on GPU 2: only the first is in the way (81559 MiB per GPU).
      writeFileSync(join(e.dir, '1.csv'), '3,1000\n2,80000\n');
      expect((await post(`${e.url}/resume_memory_occupation`, {})).status).toBe(200);
      expect((await post(`${e.url}/release_memory_occupation`, {})).status).toBe(200);
      writeFileSync(join(e.dir, '1.csv'), '3,72000\n');
      await expect(post(`${e.url}/resume_memory_occupation`, {})).rejects.toThrow();
      expect(await e.exited).toEqual({ code: null, signal: 'SIGKILL' });
      expect(e.output()).toMatch(/\[torch_memory_saver\.cpp\] CUresult error: 2 \(out of memory\) \(cu_mem_create on GPU 3: 72000 MiB held by other processes of 81559 MiB\)/);
    });

    it('answers 400 to a release without a JSON object body, and frees nothing', async (ctx) => {
      const { expect } = ctx;
      const e = await saver(ctx, ['--enable-memory-saver']);
      const none = await fetch(`${e.url}/release_memory_occupation`, { method: 'POST' });
      expect(none.status).toBe(400);
      expect(await none.json()).toMatchObject({ object: 'error', code: 400 });
      expect((await post(`${e.url}/release_memory_occupation`, { tags: 'weights' })).status).toBe(400);
      expect(e.used()).toBe(10000);
    });

    it('without --enable-memory-saver answers 200 and frees nothing', async (ctx) => {
      const { expect } = ctx;
      const e = await saver(ctx, []);
      expect((await post(`${e.url}/release_memory_occupation`, {})).status).toBe(200);
      expect(e.used()).toBe(10000);
      expect((await post(`${e.url}/resume_memory_occupation`, {})).status).toBe(200);
      expect((await fetch(`${e.url}/health`)).status).toBe(200);
    });

    it('dies on a resume of memory never released (KeyError in the scheduler), even without the flag', async (ctx) => {
      const { expect } = ctx;
      const e = await saver(ctx, []);
      await expect(post(`${e.url}/resume_memory_occupation`, {})).rejects.toThrow();
      expect(await e.exited).toEqual({ code: null, signal: 'SIGKILL' });
      expect(e.output()).toMatch(/KeyError: 'kv_cache'/);
    });

    it('dies on a release while a request is in flight (the scheduler asserts it is idle)', async (ctx) => {
      const { expect } = ctx;
      const e = await saver(ctx, ['--enable-memory-saver']);
      const stream = consumeStream(await post(`${e.url}/v1/completions`, { prompt: 'x', max_tokens: 200, stream: true }));
      await expect(post(`${e.url}/release_memory_occupation`, {})).rejects.toThrow();
      expect((await stream).done).toBe(false);
      expect(await e.exited).toEqual({ code: null, signal: 'SIGKILL' });
      expect(e.output()).toMatch(/should be called only when server is idle/);
    });

    it('dies on a request that reaches the scheduler while released', async (ctx) => {
      const { expect } = ctx;
      const e = await saver(ctx, ['--enable-memory-saver']);
      expect((await post(`${e.url}/release_memory_occupation`, {})).status).toBe(200);
      await expect(post(`${e.url}/v1/completions`, { prompt: 'x', max_tokens: 3 })).rejects.toThrow();
      expect(await e.exited).toEqual({ code: null, signal: 'SIGKILL' });
      expect(e.output()).toMatch(/illegal memory access/);
    });

    it('with /pause_generation holds a request sent while released and runs it after resume and /continue_generation', async (ctx) => {
      const { expect } = ctx;
      const e = await saver(ctx, ['--enable-memory-saver']);
      const paused = await post(`${e.url}/pause_generation`, { mode: 'abort' });
      expect(await paused.json()).toEqual({ message: 'Generation paused successfully.', status: 'ok' });
      expect((await post(`${e.url}/release_memory_occupation`, {})).status).toBe(200);
      let answered = false;
      const held = post(`${e.url}/v1/completions`, { prompt: 'x', max_tokens: 3, stream: true }).then((r) => {
        answered = true;
        return consumeStream(r);
      });
      await sleep(300);
      expect(answered).toBe(false);
      expect((await post(`${e.url}/resume_memory_occupation`, {})).status).toBe(200);
      expect(answered).toBe(false);
      expect((await post(`${e.url}/continue_generation`, {})).status).toBe(200);
      expect(await held).toEqual({ tokens: 3, done: true });
      expect(isRunning(e.pid)).toBe(true);
    });
  });
});
