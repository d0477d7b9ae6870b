import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, describe, expect, it } from 'vitest';
import { freePort, groupMembers, isRunning, until } from '../helpers/engine-processes.js';
import { readGpuUsage } from '../../src/sim/fake-gpu-usage.js';
import { FAKE_SGLANG, consumeStream, killFakeEngines, outputMatches, startFakeEngine } from '../helpers/fake-engines.js';

afterEach(killFakeEngines);

const post = (url: string, body: unknown, headers: Record<string, string> = {}) =>
  fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });

async function sglang(args: string[], env: Record<string, string> = {}, waitFor = /fired up and ready to roll/) {
  const port = await freePort();
  const e = startFakeEngine(FAKE_SGLANG, ['serve', '--model-path', 'org/model', '--port', String(port), ...args], env);
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

describe('bin/fake-sglang', () => {
  it('refuses an unknown flag as argparse does, in both command forms', async () => {
    const cli = startFakeEngine(FAKE_SGLANG, ['serve', '--model-path', 'm', '--x']);
    expect(await cli.exited).toEqual({ code: 2, signal: null });
    expect(cli.output()).toMatch(/^usage: sglang serve .*\nsglang serve: error: unrecognized arguments: --x\n$/);
    const legacy = startFakeEngine(FAKE_SGLANG, ['--port', '1']);
    expect(await legacy.exited).toEqual({ code: 2, signal: null });
    expect(legacy.output()).toMatch(/launch_server.py: error: the following arguments are required: --model-path\/--model/);
  });

  it('opens no port while loading; then /health takes at least 1 s, /ping is instant, /v1/models lists the served name', async () => {
    const e = await sglang(['--served-model-name', 'served', '--sim-load-time', '800ms'], {}, /Load weight begin/);
    await expect(fetch(`${e.url}/health`)).rejects.toMatchObject({ cause: { code: 'ECONNREFUSED' } });
    await outputMatches(e, /fired up and ready to roll/);
    const t0 = Date.now();
    expect((await fetch(`${e.url}/health`)).status).toBe(200);
    expect(Date.now() - t0).toBeGreaterThanOrEqual(1000);
    const t1 = Date.now();
    expect((await fetch(`${e.url}/ping`)).status).toBe(200);
    expect(Date.now() - t1).toBeLessThan(500);
    expect(await (await fetch(`${e.url}/v1/models`)).json()).toMatchObject({ data: [{ id: 'served', owned_by: 'sglang' }] });
  });

  it('answers /health at once with SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION=0, but /health_generate still generates', async () => {
    const e = await sglang([], { SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION: '0' });
    const t0 = Date.now();
    expect((await fetch(`${e.url}/health`)).status).toBe(200);
    expect(Date.now() - t0).toBeLessThan(500);
    const t1 = Date.now();
    expect((await fetch(`${e.url}/health_generate`)).status).toBe(200);
    expect(Date.now() - t1).toBeGreaterThanOrEqual(1000);
  });

  it('after a stall, /health answers 503 once SGLANG_HEALTH_CHECK_TIMEOUT passes without output', async () => {
    const e = await sglang(['--sim-stall-after', '100ms'], { SGLANG_HEALTH_CHECK_TIMEOUT: '2' });
    await outputMatches(e, /no token produced/);
    expect((await fetch(`${e.url}/health`)).status).toBe(503);
  });

  it('with --api-key guards all but /health*, /metrics and /ping', async () => {
    const e = await sglang(['--api-key', 'k1', '--enable-metrics'], { SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION: 'false' });
    const denied = await fetch(`${e.url}/v1/models`);
    expect([denied.status, await denied.json()]).toEqual([401, { error: 'Unauthorized' }]);
    expect((await fetch(`${e.url}/v1/models`, { headers: { authorization: 'Bearer k1' } })).status).toBe(200);
    expect((await fetch(`${e.url}/v1/loads`)).status).toBe(401);
    for (const p of ['/health', '/metrics', '/ping']) expect((await fetch(`${e.url}${p}`)).status).toBe(200);
  });

  it('has /metrics only with --enable-metrics', async () => {
    const e = await sglang([]);
    expect((await fetch(`${e.url}/metrics`)).status).toBe(404);
  });

  it('keeps generation_tokens_total flat during a long stream while realtime_tokens_total rises, then adds the whole count', async () => {
    const e = await sglang(['--served-model-name', 'served', '--enable-metrics', '--sim-token-latency', '20ms']);
    const res = await post(`${e.url}/v1/completions`, { prompt: 'a b c', max_tokens: 40, stream: true });
    let seen = 0;
    const stream = consumeStream(res, (n) => {
      seen = n;
    });
    await until(() => seen >= 10, 'ten tokens');
    expect(await metric(e.url, 'sglang:num_running_reqs')).toBe(1);
    expect(await metric(e.url, 'sglang:generation_tokens_total')).toBe(0);
    expect(await metric(e.url, 'sglang:realtime_tokens_total', ',mode="decode"')).toBeGreaterThanOrEqual(9);
    expect(await metric(e.url, 'sglang:realtime_tokens_total', ',mode="prefill_compute"')).toBe(3);
    expect(await stream).toEqual({ tokens: 40, done: true });
    expect(await metric(e.url, 'sglang:generation_tokens_total')).toBe(40);
    expect(await metric(e.url, 'sglang:prompt_tokens_total')).toBe(3);
    expect(await metric(e.url, 'sglang:num_requests_total')).toBe(1);
  });

  it('counts requests beyond --sim-max-running in num_queue_reqs and /v1/loads; with priority scheduling writes the total and each priority', async () => {
    const e = await sglang(['--served-model-name', 'served', '--enable-metrics', '--enable-priority-scheduling', '--sim-max-running', '1', '--sim-token-latency', '30ms']);
    const a = post(`${e.url}/v1/completions`, { prompt: 'x', max_tokens: 20, priority: 1 }).then((r) => r.json());
    const b = post(`${e.url}/v1/completions`, { prompt: 'x', max_tokens: 2, priority: 2 }).then((r) => r.json());
    await until(async () => ((await (await fetch(`${e.url}/v1/loads`)).json()) as { loads: Record<string, number>[] }).loads[0]?.num_waiting_reqs === 1, 'one waiting');
    expect(((await (await fetch(`${e.url}/v1/loads`)).json()) as { loads: Record<string, number>[] }).loads[0]).toMatchObject({ dp_rank: 0, num_running_reqs: 1, num_waiting_reqs: 1 });
    expect(await metric(e.url, 'sglang:num_running_reqs', ',priority=""')).toBe(1);
    expect(await metric(e.url, 'sglang:num_running_reqs', ',priority="1"')).toBe(1);
    // Summed over every label set the running count doubles (review §0 #10).
    expect(await metric(e.url, 'sglang:num_running_reqs')).toBe(2);
    expect(await metric(e.url, 'sglang:num_queue_reqs', ',priority="2"')).toBe(1);
    await Promise.all([a, b]);
  });

  it('runs tp×pp schedulers and a detokenizer in its group; a group SIGTERM kills them, the watchdog kills the tree and cuts the stream', async () => {
    const e = await sglang(['--tp-size', '2', '--sim-token-latency', '50ms'], {}, /Detokenizer proc \d+ ready[\s\S]*fired up|fired up[\s\S]*Detokenizer proc \d+ ready/);
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

  it('on a SIGTERM to the main process only drains: /health 503, every token arrives, schedulers ended, then it SIGKILLs itself as kill_process_tree does', async () => {
    const e = await sglang(['--tp-size', '2', '--sim-drain-poll', '200ms', '--sim-token-latency', '20ms']);
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

  it('with SGL_FORCE_SHUTDOWN exits at once on SIGTERM, in-flight requests cut', async () => {
    const e = await sglang(['--sim-token-latency', '50ms'], { SGL_FORCE_SHUTDOWN: '1' });
    const res = await post(`${e.url}/v1/completions`, { prompt: 'x', max_tokens: 100, stream: true });
    const stream = consumeStream(res);
    process.kill(e.pid, 'SIGTERM');
    expect((await stream).done).toBe(false);
    expect(await e.exited).toEqual({ code: null, signal: 'SIGKILL' });
  });

  it('as node rank 1 serves no API but a dummy /health on its port once loaded, and keeps running when that port is taken', async () => {
    const port = await freePort();
    const args = ['--model-path', 'm', '--host', '127.0.0.1', '--port', String(port), '--tp-size', '2', '--nnodes', '2', '--node-rank', '1', '--dist-init-addr', '10.0.0.1:25000'];
    const w = startFakeEngine(FAKE_SGLANG, [...args, '--sim-load-time', '500ms']);
    await outputMatches(w, /Load weight begin/);
    await expect(fetch(`http://127.0.0.1:${port}/health`)).rejects.toMatchObject({ cause: { code: 'ECONNREFUSED' } });
    await outputMatches(w, /Dummy health server/);
    expect((await fetch(`http://127.0.0.1:${port}/health`)).status).toBe(200);
    expect((await fetch(`http://127.0.0.1:${port}/v1/models`)).status).toBe(404);
    expect(w.output()).not.toMatch(/Detokenizer/);

    const taken = await freePort();
    const holder = createServer().listen(taken, '127.0.0.1');
    try {
      const w2 = startFakeEngine(FAKE_SGLANG, ['--model-path', 'm', '--port', String(taken), '--nnodes', '2', '--node-rank', '1', '--dist-init-addr', '10.0.0.1:25000']);
      await outputMatches(w2, /Failed to start the dummy health server/);
      await new Promise((r) => setTimeout(r, 300));
      expect(isRunning(w2.pid)).toBe(true);
    } finally {
      holder.close();
    }
  });
  describe('memory saver (release_memory_occupation / resume_memory_occupation)', () => {
    const dirs: string[] = [];
    afterEach(() => {
      for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
    });
    const saver = async (extra: string[]) => {
      const dir = mkdtempSync(join(tmpdir(), 'fake-sglang-usage-'));
      dirs.push(dir);
      const e = await sglang(['--sim-gpu-memory', '10000', '--sim-gpu-usage-dir', dir, '--sim-wake-time', '300ms', '--sim-token-latency', '30ms', ...extra], { CUDA_VISIBLE_DEVICES: '3' });
      return { ...e, used: () => readGpuUsage(dir).get(3) };
    };

    it('with --enable-memory-saver: release frees the GPU memory and answers null, resume takes it back after the wake time', async () => {
      const e = await saver(['--enable-memory-saver']);
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

    it('answers 400 to a release without a JSON object body, and frees nothing', async () => {
      const e = await saver(['--enable-memory-saver']);
      const none = await fetch(`${e.url}/release_memory_occupation`, { method: 'POST' });
      expect(none.status).toBe(400);
      expect(await none.json()).toMatchObject({ object: 'error', code: 400 });
      expect((await post(`${e.url}/release_memory_occupation`, { tags: 'weights' })).status).toBe(400);
      expect(e.used()).toBe(10000);
    });

    it('without --enable-memory-saver answers 200 and frees nothing', async () => {
      const e = await saver([]);
      expect((await post(`${e.url}/release_memory_occupation`, {})).status).toBe(200);
      expect(e.used()).toBe(10000);
      expect((await post(`${e.url}/resume_memory_occupation`, {})).status).toBe(200);
      expect((await fetch(`${e.url}/health`)).status).toBe(200);
    });

    it('dies on a resume of memory never released (KeyError in the scheduler), even without the flag', async () => {
      const e = await saver([]);
      await expect(post(`${e.url}/resume_memory_occupation`, {})).rejects.toThrow();
      expect(await e.exited).toEqual({ code: null, signal: 'SIGKILL' });
      expect(e.output()).toMatch(/KeyError: 'kv_cache'/);
    });

    it('dies on a release while a request is in flight (the scheduler asserts it is idle)', async () => {
      const e = await saver(['--enable-memory-saver']);
      const stream = consumeStream(await post(`${e.url}/v1/completions`, { prompt: 'x', max_tokens: 200, stream: true }));
      await expect(post(`${e.url}/release_memory_occupation`, {})).rejects.toThrow();
      expect((await stream).done).toBe(false);
      expect(await e.exited).toEqual({ code: null, signal: 'SIGKILL' });
      expect(e.output()).toMatch(/should be called only when server is idle/);
    });

    it('dies on a request that reaches the scheduler while released', async () => {
      const e = await saver(['--enable-memory-saver']);
      expect((await post(`${e.url}/release_memory_occupation`, {})).status).toBe(200);
      await expect(post(`${e.url}/v1/completions`, { prompt: 'x', max_tokens: 3 })).rejects.toThrow();
      expect(await e.exited).toEqual({ code: null, signal: 'SIGKILL' });
      expect(e.output()).toMatch(/illegal memory access/);
    });

    it('with /pause_generation holds a request sent while released and runs it after resume and /continue_generation', async () => {
      const e = await saver(['--enable-memory-saver']);
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
