import { afterAll, describe, it, type TestContext } from 'vitest';
import { freePort, until } from '../helpers/engine-processes.js';
import { FAKE_SGLANG, fakeEnginesOf, outputMatches } from '../helpers/fake-engines.js';
import { AdapterDirs, answer, postJson } from '../helpers/lora-adapters.js';

/*
 * The tests run side by side (describe.concurrent): most of each is waiting on the doubles' timers.
 * Each kills only the doubles it started when it ends (fakeEnginesOf), and takes expect from its
 * context: vitest tracks no concurrent test in its globals.
 */
const dirs = new AdapterDirs();
afterAll(() => dirs.cleanup());

const LORA = ['--enable-lora', '--max-lora-rank', '16', '--lora-target-modules', 'all'];

async function sglang(ctx: TestContext, args: string[]) {
  const port = await freePort();
  const e = fakeEnginesOf(ctx)(FAKE_SGLANG, ['--model-path', 'org/model', '--port', String(port), '--skip-server-warmup', ...args]);
  await outputMatches(e, /phase loading -> up/);
  const url = `http://127.0.0.1:${port}`;
  const call = async (path: string, body: unknown) => {
    const r = await postJson(`${url}${path}`, body);
    return { status: r.status, body: (await r.json()) as { success: boolean; error_message: string | null } };
  };
  const load = (name: string, path: string, pinned = false) => call('/load_lora_adapter', { lora_name: name, lora_path: path, pinned });
  const unload = (name: string) => call('/unload_lora_adapter', { lora_name: name });
  const listed = async () => ((await (await fetch(`${url}/v1/models`)).json()) as { data: { id: string; parent?: string }[] }).data.filter((c) => c.parent).map((c) => c.id);
  return { ...e, url, load, unload, listed };
}

describe.concurrent('bin/fake-sglang LoRA adapters', () => {
  it('refuses at start what ServerArgs asserts (exit 1) and starts when the limits fit (look-alike)', async (ctx) => {
    const { expect } = ctx;
    const noRank = fakeEnginesOf(ctx)(FAKE_SGLANG, ['--model-path', 'm', '--enable-lora']);
    expect((await noRank.exited).code).toBe(1);
    expect(noRank.output()).toMatch(/you need to specify both --max-lora-rank and --lora-target-modules/);
    const below = fakeEnginesOf(ctx)(FAKE_SGLANG, ['--model-path', 'm', ...LORA, '--max-loaded-loras', '2']);
    expect((await below.exited).code).toBe(1);
    expect(below.output()).toMatch(/max_loaded_loras=2, max_loras_per_batch=8/);
    const fits = await sglang(ctx, [...LORA, '--max-loaded-loras', '2', '--max-loras-per-batch', '2']);
    expect(await fits.listed()).toEqual([]);
  });

  it('--lora-paths turns LoRA on and loads them at start', async (ctx) => {
    const { expect } = ctx;
    const e = await sglang(ctx, ['--lora-paths', `a=${dirs.make('paths-a')}`]);
    expect(await e.listed()).toEqual(['a']);
    expect((await answer(e.url, 'org/model:a')).status).toBe(200);
  });

  it('names an adapter by base:adapter; a bare name is the base answer; a never-loaded one is 400', async (ctx) => {
    const { expect } = ctx;
    const e = await sglang(ctx, LORA);
    await e.load('a', dirs.make('name-a'));
    const base = await answer(e.url, 'org/model');
    const viaA = await answer(e.url, 'org/model:a');
    expect(viaA.text).not.toBe(base.text);
    expect(viaA.text.replace(/~[0-9a-f]{2}/g, '')).toBe(base.text);
    // lora_path names it too (serving_base.py:55-71).
    expect((await answer(e.url, 'org/model', { lora_path: 'a' })).text).toBe(viaA.text);
    expect((await answer(e.url, 'a')).text).toBe(base.text);
    const never = await answer(e.url, 'org/model:zz');
    expect([never.status, never.body.message]).toEqual([400, "Got LoRA adapter that has never been loaded: zz\nAll loaded adapters: dict_keys(['a'])."]);
  });

  it('evicts the least recently used beyond --max-loaded-loras, a request counting as use; a request loads an evicted one again', async (ctx) => {
    const { expect } = ctx;
    const e = await sglang(ctx, [...LORA, '--max-loaded-loras', '2', '--max-loras-per-batch', '2']);
    await e.load('a', dirs.make('lru-a'));
    await e.load('b', dirs.make('lru-b'));
    await answer(e.url, 'org/model:a');
    expect((await e.load('c', dirs.make('lru-c'))).status).toBe(200);
    expect((await e.listed()).sort()).toEqual(['a', 'c']);
    expect(e.output()).toMatch(/Unloading least recently used LoRA adapter 'b'/);
    // b again by a request: loaded, and a, now the least recently used, goes.
    expect((await answer(e.url, 'org/model:b')).status).toBe(200);
    expect((await e.listed()).sort()).toEqual(['b', 'c']);
    expect(e.output()).toMatch(/Reloading evicted adapter: b/);
  });

  it('never evicts a pinned adapter, though least recently used; pins at most --max-loras-per-batch - 1', async (ctx) => {
    const { expect } = ctx;
    const e = await sglang(ctx, [...LORA, '--max-loaded-loras', '2', '--max-loras-per-batch', '2']);
    expect((await e.load('p', dirs.make('pin-p'), true)).status).toBe(200);
    const second = await e.load('p2', dirs.make('pin-p2'), true);
    expect([second.status, second.body.error_message]).toEqual([400, expect.stringMatching(/It is not allowed to pin all slots/)]);
    await e.load('u', dirs.make('pin-u'));
    await e.load('v', dirs.make('pin-v'));
    expect((await e.listed()).sort()).toEqual(['p', 'v']);
    await e.load('w', dirs.make('pin-w'));
    expect((await e.listed()).sort()).toEqual(['p', 'w']);
    const wide = await sglang(ctx, [...LORA, '--max-loaded-loras', '4', '--max-loras-per-batch', '4']);
    for (const n of ['q1', 'q2', 'q3']) expect((await wide.load(n, dirs.make(`pin-${n}`), true)).status).toBe(200);
    expect((await wide.load('q4', dirs.make('pin-q4'), true)).status).toBe(400);
  });

  it('batches at most --max-loras-per-batch adapters, the base counting as one: an adapter waits behind a base request, the same adapter joins (look-alike)', async (ctx) => {
    const { expect } = ctx;
    const e = await sglang(ctx, [...LORA, '--max-loaded-loras', '2', '--max-loras-per-batch', '1', '--sim-token-latency', '60ms', '--enable-metrics']);
    await e.load('a', dirs.make('batch-a'));
    const gauge = async (name: string) => Number((await (await fetch(`${e.url}/metrics`)).text()).split('\n').find((l) => l.startsWith(`${name}{`))?.split(' ')[1]);
    const done: string[] = [];
    const ask = (label: string, model: string, n: number) => answer(e.url, model, { max_tokens: n }).then((r) => done.push(label) && r.status);
    const a1 = ask('a1', 'org/model:a', 60);
    await until(async () => (await gauge('sglang:lora_pool_slots_used')) === 1, 'a running');
    // The base would be a second adapter in the batch: it waits for a1; a2, the same adapter, joins at once.
    const base = ask('base', 'org/model', 2);
    const a2 = ask('a2', 'org/model:a', 2);
    expect(await Promise.all([a1, a2, base])).toEqual([200, 200, 200]);
    expect(done).toEqual(['a2', 'a1', 'base']);
  });

  it('an unload waits for the adapter requests to end, then frees it (n = 1: no deadlock)', async (ctx) => {
    const { expect } = ctx;
    const e = await sglang(ctx, [...LORA, '--sim-token-latency', '50ms', '--enable-metrics']);
    await e.load('a', dirs.make('drain-a'));
    const inFlight = answer(e.url, 'org/model:a', { max_tokens: 60 });
    await until(async () => ((await (await fetch(`${e.url}/sim/loras`)).json()) as { registry: { counter: number }[] }).registry[0]?.counter === 1, 'a in use');
    const pool = (await (await fetch(`${e.url}/metrics`)).text()).split('\n').filter((l) => l.startsWith('sglang:lora_pool'));
    expect(pool.map((l) => l.replace(/\{.*\}/, ''))).toEqual(['sglang:lora_pool_slots_used 1.0', 'sglang:lora_pool_slots_total 8.0', 'sglang:lora_pool_utilization 0.1']);
    const unloaded = e.unload('a');
    expect((await inFlight).status).toBe(200);
    expect((await unloaded).status).toBe(200);
    expect(await e.listed()).toEqual([]);
    expect((await answer(e.url, 'org/model', { n: 2 })).status).toBe(200);
  });

  it('after n > 1 traffic on an adapter its unload never returns and nothing is scheduled again (#36894); n > 1 elsewhere does not (look-alikes)', async (ctx) => {
    const { expect } = ctx;
    const e = await sglang(ctx, [...LORA, '--max-loaded-loras', '3', '--max-loras-per-batch', '3']);
    await e.load('a', dirs.make('dead-a'));
    await e.load('b', dirs.make('dead-b'));
    await e.load('c', dirs.make('dead-c'));
    // n > 1 on the base and on b: the unloads of a and c are not stuck.
    expect((await answer(e.url, 'org/model', { n: 4 })).status).toBe(200);
    expect((await answer(e.url, 'org/model:b', { n: 4 })).status).toBe(200);
    expect((await answer(e.url, 'org/model:a')).status).toBe(200);
    expect((await e.unload('a')).status).toBe(200);
    expect((await answer(e.url, 'org/model:c', { n: 1 })).status).toBe(200);
    expect((await e.unload('c')).status).toBe(200);
    // b served n > 1: its unload waits for ever, the process alive, "Start unload" its last word.
    let unloadAnswered = false;
    void e.unload('b').then(
      () => {
        unloadAnswered = true;
      },
      () => {},
    );
    await outputMatches(e, /Start unload Lora adapter\. Lora name=b/);
    const after = e.output().length;
    const base = fetch(`${e.url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'org/model', prompt: 'x', max_tokens: 2 }), signal: AbortSignal.timeout(2000) });
    await expect(base).rejects.toMatchObject({ name: 'TimeoutError' });
    expect(unloadAnswered).toBe(false);
    expect(e.child.exitCode).toBeNull();
    expect(e.output().slice(after)).not.toMatch(/LoRA adapter unloading completes/);
  });

  it('refuses a rank over --max-lora-rank 400 in its words; takes one equal (look-alike); guards the routes with the admin key', async (ctx) => {
    const { expect } = ctx;
    const e = await sglang(ctx, LORA);
    const over = await e.load('big', dirs.make('rank-32', 32));
    expect([over.status, over.body.success, over.body.error_message]).toEqual([400, false, expect.stringMatching(/^LoRA adapter big with rank 32 is incompatible/)]);
    expect((await e.load('eq', dirs.make('rank-16', 16))).status).toBe(200);
    const keyed = await sglang(ctx, [...LORA, '--api-key', 'k', '--admin-api-key', 'adm']);
    const dir = dirs.make('keyed');
    const withKey = (key: string) => fetch(`${keyed.url}/load_lora_adapter`, { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` }, body: JSON.stringify({ lora_name: 'a', lora_path: dir }) });
    expect((await withKey('k')).status).toBe(401);
    expect((await withKey('adm')).status).toBe(200);
  });
});
