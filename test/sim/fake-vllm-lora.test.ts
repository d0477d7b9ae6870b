import { afterAll, describe, it, type TestContext } from 'vitest';
import { freePort, until } from '../helpers/engine-processes.js';
import { FAKE_VLLM, fakeEnginesOf, outputMatches } from '../helpers/fake-engines.js';
import { AdapterDirs, answer, postJson } from '../helpers/lora-adapters.js';

/*
 * The tests run side by side (describe.concurrent): most of each is waiting on the doubles' timers.
 * Each kills only the doubles it started when it ends (fakeEnginesOf), and takes expect from its
 * context: vitest tracks no concurrent test in its globals.
 */
const dirs = new AdapterDirs();
afterAll(() => dirs.cleanup());

const GATE = { VLLM_ALLOW_RUNTIME_LORA_UPDATING: 'True' };

async function vllm(ctx: TestContext, args: string[], env: Record<string, string> = GATE) {
  const port = await freePort();
  const e = fakeEnginesOf(ctx)(FAKE_VLLM, ['serve', 'org/model', '--port', String(port), ...args], env);
  await outputMatches(e, /Application startup complete/);
  const url = `http://127.0.0.1:${port}`;
  const load = async (name: string, path: string, extra: Record<string, unknown> = {}) => {
    const r = await postJson(`${url}/v1/load_lora_adapter`, { lora_name: name, lora_path: path, ...extra });
    return { status: r.status, text: await r.text() };
  };
  const unload = async (name: string) => {
    const r = await postJson(`${url}/v1/unload_lora_adapter`, { lora_name: name });
    return { status: r.status, text: await r.text() };
  };
  const worker = async () => ((await (await fetch(`${url}/sim/loras`)).json()) as { registry: string[]; worker: { id: number; name: string }[] });
  return { ...e, url, load, unload, worker };
}

describe.concurrent('bin/fake-vllm LoRA adapters', () => {
  it('mounts the load routes only with VLLM_ALLOW_RUNTIME_LORA_UPDATING 1 or true (any case)', async (ctx) => {
    const { expect } = ctx;
    for (const [value, mounted] of [['True', true], ['1', true], [' TRUE ', true], ['yes', false], ['0', false]] as const) {
      const e = await vllm(ctx, ['--enable-lora'], { VLLM_ALLOW_RUNTIME_LORA_UPDATING: value });
      expect([value, (await e.load('a', dirs.make(`gate-${value.trim()}`))).status]).toEqual([value, mounted ? 200 : 404]);
    }
    const none = await vllm(ctx, ['--enable-lora'], {});
    expect(await none.load('a', dirs.make('gate-none'))).toEqual({ status: 404, text: '{"detail":"Not Found"}' });
  });

  it('answers by base and adapter bytes: another adapter another answer, the same bytes under two names the same, the base unchanged', async (ctx) => {
    const { expect } = ctx;
    const e = await vllm(ctx, ['--enable-lora', '--max-loras', '3']);
    const base = await answer(e.url, 'org/model');
    const weights = Buffer.from('the same weights');
    expect((await e.load('a', dirs.make('ans-a'))).text).toBe("Success: LoRA adapter 'a' added successfully.");
    await e.load('b', dirs.make('ans-b'));
    await e.load('a2', dirs.make('ans-a2', 8, 'org/model', weights));
    await e.load('a3', dirs.make('ans-a3', 8, 'org/model', weights));
    const [a, b, a2, a3] = await Promise.all(['a', 'b', 'a2', 'a3'].map((m) => answer(e.url, m)));
    expect(new Set([base.text, a?.text, b?.text, a2?.text]).size).toBe(4);
    expect(a3?.text).toBe(a2?.text);
    expect(a?.body.model).toBe('a');
    // The base's words are still the adapter's: the adapter marks each of them.
    expect(a?.text.replace(/~[0-9a-f]{2}/g, '')).toBe(base.text);
    expect((await answer(e.url, 'org/model')).text).toBe(base.text);
  });

  it('answers an unknown or unloaded name 404 as vLLM does; the unload forgets only the name, a reload caches a second copy (#54839)', async (ctx) => {
    const { expect } = ctx;
    const e = await vllm(ctx, ['--enable-lora', '--max-loras', '2', '--max-cpu-loras', '4']);
    const dir = dirs.make('copies');
    expect(await answer(e.url, 'x')).toMatchObject({ status: 404, body: { message: 'The model `x` does not exist.', type: 'NotFoundError' } });
    await e.load('a', dir);
    expect(await e.unload('a')).toEqual({ status: 200, text: "Success: LoRA adapter 'a' removed successfully." });
    expect((await answer(e.url, 'a')).status).toBe(404);
    expect(await e.worker()).toMatchObject({ registry: [], worker: [{ id: 1, name: 'a' }] });
    await e.load('a', dir);
    expect((await e.worker()).worker.map((w) => w.id)).toEqual([1, 2]);
    expect((await e.unload('zz')).status).toBe(404);
  });

  it('innocent look-alike: a load in place under a loaded name keeps one copy, new weights answered', async (ctx) => {
    const { expect } = ctx;
    const e = await vllm(ctx, ['--enable-lora', '--max-loras', '2']);
    await e.load('a', dirs.make('inplace-1'));
    const before = await answer(e.url, 'a');
    expect((await e.load('a', dirs.make('inplace-1b'))).status).toBe(400);
    expect((await e.load('a', dirs.make('inplace-2'), { load_inplace: true })).status).toBe(200);
    expect((await e.worker()).worker.map((w) => w.id)).toEqual([1]);
    expect((await answer(e.url, 'a')).text).not.toBe(before.text);
  });

  it('loads of one name run one at a time: of two at once one succeeds, the other is told it is loaded; two names both load (look-alike)', async (ctx) => {
    const { expect } = ctx;
    const e = await vllm(ctx, ['--enable-lora', '--max-loras', '2']);
    const same = await Promise.all([e.load('a', dirs.make('lock-a1')), e.load('a', dirs.make('lock-a2'))]);
    expect(same.map((r) => r.status).sort()).toEqual([200, 400]);
    const two = await Promise.all([e.load('b', dirs.make('lock-b')), e.load('c', dirs.make('lock-c'))]);
    expect(two.map((r) => r.status)).toEqual([200, 200]);
    // b and c load at once: the registry holds both, in the order their loads ended.
    expect([...(await e.worker()).registry].sort()).toEqual(['a', 'b', 'c']);
  });

  it('the worker cache is LRU of --max-cpu-loras: stale copies push live adapters out, which a request loads again', async (ctx) => {
    const { expect } = ctx;
    const e = await vllm(ctx, ['--enable-lora', '--max-loras', '1', '--max-cpu-loras', '2']);
    await e.load('a', dirs.make('lru-a'));
    await e.load('b', dirs.make('lru-b'));
    await e.unload('b');
    await e.load('c', dirs.make('lru-c'));
    expect((await e.worker()).worker.map((w) => w.name)).toEqual(['b', 'c']);
    expect((await answer(e.url, 'a')).status).toBe(200);
    expect((await e.worker()).worker.map((w) => w.name)).toEqual(['c', 'a']);
  });

  it('refuses a rank over --max-lora-rank (500, the engine core words) and takes one equal to it', async (ctx) => {
    const { expect } = ctx;
    const e = await vllm(ctx, ['--enable-lora', '--max-lora-rank', '32']);
    const over = await e.load('big', dirs.make('rank-64', 64));
    expect(over.status).toBe(500);
    expect(JSON.parse(over.text)).toMatchObject({ message: 'Call to add_lora method failed: LoRA rank 64 is greater than max_lora_rank 32.', type: 'InternalServerError' });
    expect((await e.load('eq', dirs.make('rank-32', 32))).status).toBe(200);
  });

  it('without --enable-lora a load fails in the engine core (500); a folder without an adapter is 404; empty fields 400', async (ctx) => {
    const { expect } = ctx;
    const off = await vllm(ctx, []);
    const r = await off.load('a', dirs.make('off'));
    expect([r.status, JSON.parse(r.text).message]).toEqual([500, 'Call to add_lora method failed: LoRA is not enabled. Use --enable-lora to enable LoRA.']);
    const on = await vllm(ctx, ['--enable-lora']);
    const missing = await on.load('m', `${dirs.root}/no-such`);
    expect([missing.status, JSON.parse(missing.text).message]).toEqual([404, `Loading lora m failed: No adapter found for ${dirs.root}/no-such`]);
    expect((await on.load('', '/x')).status).toBe(400);
  });

  it('refuses at start what LoRAConfig refuses: --max-cpu-loras below --max-loras (exit 1), a rank it does not take (exit 2)', async (ctx) => {
    const { expect } = ctx;
    const cpu = fakeEnginesOf(ctx)(FAKE_VLLM, ['serve', 'm', '--enable-lora', '--max-loras', '4', '--max-cpu-loras', '2']);
    expect((await cpu.exited).code).toBe(1);
    expect(cpu.output()).toMatch(/max_cpu_loras \(2\) must be >= max_loras \(4\)/);
    const rank = fakeEnginesOf(ctx)(FAKE_VLLM, ['serve', 'm', '--enable-lora', '--max-lora-rank', '24']);
    expect((await rank.exited).code).toBe(2);
    expect(rank.output()).toMatch(/argument --max-lora-rank: invalid choice: '24'/);
  });

  it('batches at most --max-loras adapters: another adapter waits, the same adapter joins (look-alike)', async (ctx) => {
    const { expect } = ctx;
    const e = await vllm(ctx, ['--enable-lora', '--max-loras', '1', '--sim-token-latency', '60ms']);
    await e.load('a', dirs.make('batch-a'));
    await e.load('b', dirs.make('batch-b'));
    const info = async () => (await (await fetch(`${e.url}/metrics`)).text()).split('\n').filter((l) => l.startsWith('vllm:lora_requests_info{')).at(-1) ?? '';
    const a1 = answer(e.url, 'a', { max_tokens: 6 });
    await until(async () => (await info()).includes('running_lora_adapters="a"'), 'a running');
    const a2 = answer(e.url, 'a', { max_tokens: 2 });
    const b = answer(e.url, 'b', { max_tokens: 2 });
    await until(async () => (await info()).includes('waiting_lora_adapters="b"'), 'b waiting');
    expect(await info()).toMatch(/^vllm:lora_requests_info\{max_lora="1",waiting_lora_adapters="b",running_lora_adapters="a"\} \d+\.\d+$/);
    await Promise.all([a1, a2, b]);
    expect(await info()).toMatch(/waiting_lora_adapters="",running_lora_adapters=""/);
  });

  it('has no vllm:lora_requests_info without --enable-lora', async (ctx) => {
    const { expect } = ctx;
    const e = await vllm(ctx, []);
    expect(await (await fetch(`${e.url}/metrics`)).text()).not.toMatch(/lora_requests_info/);
  });

  it('--sim-lora-wrong-adapter (#47724): a serves b\'s answer, no error; without it each its own (look-alike)', async (ctx) => {
    const { expect } = ctx;
    const aDir = dirs.make('wrong-a');
    const bDir = dirs.make('wrong-b');
    const right = await vllm(ctx, ['--enable-lora', '--max-loras', '2']);
    await right.load('a', aDir);
    await right.load('b', bDir);
    const [ra, rb] = [await answer(right.url, 'a'), await answer(right.url, 'b')];
    expect(ra.text).not.toBe(rb.text);
    const wrong = await vllm(ctx, ['--enable-lora', '--max-loras', '2', '--sim-lora-wrong-adapter']);
    await wrong.load('a', aDir);
    const alone = await answer(wrong.url, 'a');
    expect(alone.text).toBe(ra.text);
    await wrong.load('b', bDir);
    const wa = await answer(wrong.url, 'a');
    expect([wa.status, wa.body.model, wa.text]).toEqual([200, 'a', rb.text]);
  });

  it('a load during generation succeeds by default; with --sim-lora-load-crash-busy (#13698) it kills the engine, and idle it does not (look-alike)', async (ctx) => {
    const { expect } = ctx;
    const ok = await vllm(ctx, ['--enable-lora', '--max-loras', '2', '--sim-token-latency', '50ms']);
    const running = answer(ok.url, 'org/model', { max_tokens: 60 });
    await until(async () => /vllm:num_requests_running\{[^}]*\} 1/.test(await (await fetch(`${ok.url}/metrics`)).text()), 'one running');
    expect((await ok.load('a', dirs.make('busy-a'))).status).toBe(200);
    expect((await running).status).toBe(200);

    const crash = await vllm(ctx, ['--enable-lora', '--max-loras', '2', '--sim-token-latency', '50ms', '--sim-lora-load-crash-busy']);
    expect((await crash.load('idle', dirs.make('busy-idle'))).status).toBe(200);
    const cut = answer(crash.url, 'org/model', { max_tokens: 40 }).catch(() => ({ status: 0 }));
    await until(async () => /vllm:num_requests_running\{[^}]*\} 1/.test(await (await fetch(`${crash.url}/metrics`)).text()), 'one running');
    expect((await crash.load('b', dirs.make('busy-b'))).status).toBe(500);
    expect((await fetch(`${crash.url}/health`)).status).toBe(503);
    expect((await cut).status).not.toBe(200);
    expect((await crash.exited).code).toBe(1);
  });
});
