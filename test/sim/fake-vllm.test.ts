import { describe, it, type TestContext } from 'vitest';
import { freePort, groupMembers, isRunning, until } from '../helpers/engine-processes.js';
import { FAKE_VLLM, consumeStream, fakeEnginesOf, outputMatches } from '../helpers/fake-engines.js';

/*
 * The tests run side by side (describe.concurrent): most of each is waiting on the double's timers
 * (a load, token latency, a drain). Each kills only the doubles it started when it ends (fakeEnginesOf),
 * and takes expect from its context: vitest tracks no concurrent test in its globals.
 */

const post = (url: string, body: unknown, headers: Record<string, string> = {}) =>
  fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });

async function vllm(ctx: TestContext, args: string[], env: Record<string, string> = {}, waitFor = /Application startup complete/) {
  const port = await freePort();
  const e = fakeEnginesOf(ctx)(FAKE_VLLM, ['serve', 'org/model', '--port', String(port), ...args], env);
  await outputMatches(e, waitFor);
  return { ...e, port, url: `http://127.0.0.1:${port}` };
}

/** One series of /metrics by name and extra labels; NaN when absent. */
async function metric(url: string, name: string, extra = ''): Promise<number> {
  const text = await (await fetch(`${url}/metrics`)).text();
  const labels = `engine="0",model_name="served"${extra}`;
  const line = text.split('\n').find((l) => l.startsWith(`${name}{${labels}} `));
  return line ? Number(line.split(' ')[1]) : Number.NaN;
}

const workerPids = (out: string) => [...out.matchAll(/Worker proc (\d+) ready/g)].map((m) => Number(m[1]));

describe.concurrent('bin/fake-vllm', () => {
  it('refuses an unknown flag as argparse does, and --shutdown-timeout on a vLLM older than 0.18', async (ctx) => {
    const { expect } = ctx;
    const bad = fakeEnginesOf(ctx)(FAKE_VLLM, ['serve', 'm', '--port=1', '--x']);
    expect(await bad.exited).toEqual({ code: 2, signal: null });
    expect(bad.output()).toBe('usage: vllm serve [model_tag] [options]\nvllm serve: error: unrecognized arguments: --x\n');
    const old = fakeEnginesOf(ctx)(FAKE_VLLM, ['serve', 'm', '--shutdown-timeout', '10', '--sim-version', '0.17']);
    expect(await old.exited).toEqual({ code: 2, signal: null });
    expect(old.output()).toMatch(/vllm serve: error: unrecognized arguments: --shutdown-timeout 10/);
  });

  it('keeps its port closed while loading, then answers /health with an empty 200 and lists the served name', async (ctx) => {
    const { expect } = ctx;
    // A load far longer than the test: the closed port is seen while it surely loads, whatever the machine's load.
    const loading = await vllm(ctx, ['--sim-load-time', '600s'], {}, /Starting to load model/);
    await expect(fetch(`${loading.url}/health`)).rejects.toMatchObject({ cause: { code: 'ECONNREFUSED' } });
    const e = await vllm(ctx, ['--served-model-name', 'served', '--sim-load-time', '200ms'], {}, /Starting to load model/);
    await outputMatches(e, /Application startup complete/);
    const health = await fetch(`${e.url}/health`);
    expect([health.status, await health.text()]).toEqual([200, '']);
    expect(await (await fetch(`${e.url}/v1/models`)).json()).toMatchObject({ data: [{ id: 'served', root: 'org/model' }] });
  });

  it('with VLLM_API_KEY guards every /v1 path (401) and leaves /health and /metrics open', async (ctx) => {
    const { expect } = ctx;
    const e = await vllm(ctx, [], { VLLM_API_KEY: 'k1' });
    const denied = await fetch(`${e.url}/v1/models`);
    expect([denied.status, await denied.json()]).toEqual([401, { error: 'Unauthorized' }]);
    expect((await fetch(`${e.url}/v1/models`, { headers: { authorization: 'Bearer k1' } })).status).toBe(200);
    expect((await post(`${e.url}/v1/completions`, { prompt: 'x' })).status).toBe(401);
    expect((await fetch(`${e.url}/health`)).status).toBe(200);
    expect((await fetch(`${e.url}/metrics`)).status).toBe(200);
  });

  it('counts running and waiting beyond --sim-max-running, tokens per token, and successes by finish reason', async (ctx) => {
    const { expect } = ctx;
    const e = await vllm(ctx, ['--served-model-name', 'served', '--sim-max-running', '1', '--sim-token-latency', '40ms', '--sim-max-tokens', '3']);
    const a = post(`${e.url}/v1/completions`, { prompt: 'one two three', max_tokens: 10 }).then((r) => r.json());
    const b = post(`${e.url}/v1/chat/completions`, { messages: [{ role: 'user', content: 'hi' }] }).then((r) => r.json());
    await until(async () => (await metric(e.url, 'vllm:num_requests_waiting')) === 1, 'one waiting');
    expect(await metric(e.url, 'vllm:num_requests_running')).toBe(1);
    await until(async () => (await metric(e.url, 'vllm:generation_tokens_total')) >= 2, 'tokens moving');
    const [ra, rb] = (await Promise.all([a, b])) as { choices: { finish_reason: string }[] }[];
    expect([ra?.choices[0]?.finish_reason, rb?.choices[0]?.finish_reason]).toEqual(['length', 'stop']);
    expect(await metric(e.url, 'vllm:generation_tokens_total')).toBe(13);
    expect(await metric(e.url, 'vllm:prompt_tokens_total')).toBe(4);
    expect(await metric(e.url, 'vllm:request_success_total', ',finished_reason="length"')).toBe(1);
    expect(await metric(e.url, 'vllm:request_success_total', ',finished_reason="stop"')).toBe(1);
    expect(await metric(e.url, 'vllm:num_requests_running')).toBe(0);
  });

  it('has no engine metrics with --disable-log-stats, and /load counts HTTP requests in flight with --enable-server-load-tracking', async (ctx) => {
    const { expect } = ctx;
    const e = await vllm(ctx, ['--disable-log-stats', '--enable-server-load-tracking', '--sim-token-latency', '50ms']);
    expect(await (await fetch(`${e.url}/metrics`)).text()).not.toMatch(/vllm:/);
    const s = post(`${e.url}/v1/completions`, { prompt: 'x', max_tokens: 10, stream: true }).then((r) => r.text());
    await until(async () => ((await (await fetch(`${e.url}/load`)).json()) as { server_load: number }).server_load === 1, 'one in flight');
    await s;
    await until(async () => ((await (await fetch(`${e.url}/load`)).json()) as { server_load: number }).server_load === 0, 'none in flight');
  });

  it('with --runner pooling serves embeddings: prompt tokens counted when they finish, no generation tokens', async (ctx) => {
    const { expect } = ctx;
    const e = await vllm(ctx, ['--served-model-name', 'served', '--runner', 'pooling', '--sim-embed-latency', '300ms']);
    const r = post(`${e.url}/v1/embeddings`, { input: ['a b c', 'd'] }).then((x) => x.json());
    await until(async () => (await metric(e.url, 'vllm:num_requests_running')) === 1, 'running');
    expect(await metric(e.url, 'vllm:prompt_tokens_total')).toBe(0);
    expect(await r).toMatchObject({ object: 'list', data: [{ index: 0, object: 'embedding' }, { index: 1 }], usage: { prompt_tokens: 4 } });
    expect(await metric(e.url, 'vllm:prompt_tokens_total')).toBe(4);
    expect(await metric(e.url, 'vllm:generation_tokens_total')).toBe(0);
    expect((await post(`${e.url}/v1/completions`, { prompt: 'x' })).status).toBe(404);
  });

  it('with TP=2 runs two workers in its own group; a group SIGTERM kills them and cuts a draining stream before [DONE]', async (ctx) => {
    const { expect } = ctx;
    const e = await vllm(ctx, ['--tensor-parallel-size', '2', '--shutdown-timeout', '10', '--sim-token-latency', '50ms'], {}, /Worker proc \d+ ready[\s\S]*Worker proc \d+ ready/);
    const workers = workerPids(e.output());
    expect(workers).toHaveLength(2);
    expect(groupMembers(e.pid).sort()).toEqual([e.pid, ...workers].sort());
    const res = await post(`${e.url}/v1/completions`, { prompt: 'x', max_tokens: 100, stream: true });
    let seen = 0;
    const stream = consumeStream(res, (n) => {
      seen = n;
    });
    await until(() => seen >= 3, 'some tokens');
    process.kill(-e.pid, 'SIGTERM');
    const got = await stream;
    expect(got.done).toBe(false);
    expect(got.tokens).toBeLessThan(100);
    expect(e.output()).toMatch(/Worker proc \d+ died unexpectedly, shutting down executor/);
    expect((await e.exited).code).toBe(1);
  });

  it('with --shutdown-timeout, a SIGTERM to the main process only drains: /health stays 200, new work is refused, every token arrives, workers ended, exit 0', async (ctx) => {
    const { expect } = ctx;
    const e = await vllm(ctx, ['--tensor-parallel-size', '2', '--shutdown-timeout', '10', '--sim-token-latency', '20ms'], {}, /Worker proc \d+ ready[\s\S]*Worker proc \d+ ready/);
    const workers = workerPids(e.output());
    const res = await post(`${e.url}/v1/completions`, { prompt: 'x', max_tokens: 40, stream: true });
    const stream = consumeStream(res);
    process.kill(e.pid, 'SIGTERM');
    await outputMatches(e, /mode=drain timeout=10s/);
    expect((await fetch(`${e.url}/health`)).status).toBe(200);
    expect((await post(`${e.url}/v1/completions`, { prompt: 'x' })).status).toBe(503);
    expect(await stream).toEqual({ tokens: 40, done: true });
    expect(await e.exited).toEqual({ code: 0, signal: null });
    expect(workers.filter(isRunning)).toEqual([]);
    expect(e.output()).not.toMatch(/died unexpectedly/);
  });

  it('without --shutdown-timeout a SIGTERM aborts in-flight requests at once and exits 0', async (ctx) => {
    const { expect } = ctx;
    const e = await vllm(ctx, ['--sim-token-latency', '50ms']);
    const res = await post(`${e.url}/v1/completions`, { prompt: 'x', max_tokens: 100, stream: true });
    let seen = 0;
    const stream = consumeStream(res, (n) => {
      seen = n;
    });
    await until(() => seen >= 2, 'some tokens');
    process.kill(e.pid, 'SIGTERM');
    expect((await stream).done).toBe(false);
    expect(e.output()).toMatch(/mode=abort/);
    expect(await e.exited).toEqual({ code: 0, signal: null });
  });

  it('with --data-parallel-size 2 runs two API servers, and a SIGTERM to the main process cuts the stream though --shutdown-timeout is set (review §3 N2)', async (ctx) => {
    const { expect } = ctx;
    const e = await vllm(ctx, ['--data-parallel-size', '2', '--shutdown-timeout', '10', '--sim-token-latency', '20ms']);
    expect(e.output()).toMatch(/2 API server processes/);
    const res = await post(`${e.url}/v1/completions`, { prompt: 'x', max_tokens: 100, stream: true });
    let seen = 0;
    const stream = consumeStream(res, (n) => {
      seen = n;
    });
    await until(() => seen >= 3, 'some tokens');
    process.kill(e.pid, 'SIGTERM');
    const got = await stream;
    expect(got.done).toBe(false);
    expect(got.tokens).toBeLessThan(100);
    expect(await e.exited).toEqual({ code: 0, signal: null });
    expect(e.output()).not.toMatch(/mode=drain/);
  });

  it('with --data-parallel-size 2 and --api-server-count 1 drains a SIGTERM as a single API server does: every token arrives', async (ctx) => {
    const { expect } = ctx;
    const e = await vllm(ctx, ['-dp', '2', '--api-server-count', '1', '--shutdown-timeout', '10', '--sim-token-latency', '20ms']);
    expect(e.output()).not.toMatch(/API server processes/);
    const res = await post(`${e.url}/v1/completions`, { prompt: 'x', max_tokens: 40, stream: true });
    let seen = 0;
    const stream = consumeStream(res, (n) => {
      seen = n;
    });
    await until(() => seen >= 3, 'some tokens');
    process.kill(e.pid, 'SIGTERM');
    expect(await stream).toEqual({ tokens: 40, done: true });
    expect(e.output()).toMatch(/mode=drain timeout=10s/);
    expect(await e.exited).toEqual({ code: 0, signal: null });
  });

  it('refuses --api-server-count on a headless rank, as vllm serve raises before starting anything', async (ctx) => {
    const { expect } = ctx;
    const e = fakeEnginesOf(ctx)(FAKE_VLLM, ['serve', 'm', '-dp', '2', '-dpl', '1', '-dpr', '1', '--headless', '-asc', '1']);
    expect(await e.exited).toEqual({ code: 1, signal: null });
    expect(e.output()).toMatch(/ValueError: --api-server-count=1 cannot be used with --headless/);
  });

  it('fails the engine when a worker dies: in-flight aborted, /health 503, then exit 1', async (ctx) => {
    const { expect } = ctx;
    const e = await vllm(ctx, ['--pipeline-parallel-size', '2', '--sim-token-latency', '50ms'], {}, /Worker proc \d+ ready[\s\S]*Worker proc \d+ ready/);
    const [w] = workerPids(e.output());
    const res = await post(`${e.url}/v1/chat/completions`, { messages: [], max_tokens: 100, stream: true });
    const stream = consumeStream(res);
    process.kill(w as number, 'SIGKILL');
    expect((await stream).done).toBe(false);
    expect(e.output()).toMatch(new RegExp(`Worker proc ${w} died unexpectedly, shutting down executor.`));
    expect((await fetch(`${e.url}/health`)).status).toBe(503);
    expect(await e.exited).toEqual({ code: 1, signal: null });
  });

  it('as a headless TP rank serves no HTTP and exits at once on SIGTERM; rank 0 logs the broadcast address from VLLM_HOST_IP', async (ctx) => {
    const { expect } = ctx;
    const port = await freePort();
    const leader = fakeEnginesOf(ctx)(FAKE_VLLM, ['serve', 'm', '--port', String(port), '--tensor-parallel-size', '2', '--nnodes', '2', '--node-rank', '0', '--master-addr', '10.0.0.1', '--master-port', '29501'], { VLLM_HOST_IP: '10.9.8.7' });
    await outputMatches(leader, /binding scheduler-output broadcast queue on 10\.9\.8\.7/);
    const follower = fakeEnginesOf(ctx)(FAKE_VLLM, ['serve', 'm', '--port', String(port + 1), '--tensor-parallel-size', '2', '--nnodes', '2', '--node-rank', '1', '--master-addr', '10.0.0.1', '--master-port', '29501', '--headless']);
    await outputMatches(follower, /Worker proc \d+ ready/);
    await expect(fetch(`http://127.0.0.1:${port + 1}/health`)).rejects.toMatchObject({ cause: { code: 'ECONNREFUSED' } });
    process.kill(follower.pid, 'SIGTERM');
    expect(await follower.exited).toEqual({ code: 0, signal: null });
  });
});
