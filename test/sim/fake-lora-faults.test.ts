import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { freePort } from '../helpers/engine-processes.js';
import { FAKE_SGLANG, FAKE_VLLM, killFakeEngines, outputMatches, startFakeEngine } from '../helpers/fake-engines.js';
import { AdapterDirs, answer, postJson } from '../helpers/lora-adapters.js';

/*
 * The doubles' adapters that answer as the base (a zero update, a healthy
 * adapter) and the engines' faults that serve the wrong weights, each with
 * its innocent look-alike: vLLM #9688 (loaded in name only), vLLM #12199
 * (a runtime id that names a cached adapter), SGLang #8263 (a reused name's
 * buffer kept).
 */

afterEach(killFakeEngines);
const dirs = new AdapterDirs();
afterAll(() => dirs.cleanup());

const GATE = { VLLM_ALLOW_RUNTIME_LORA_UPDATING: 'True' };
const ZERO = Buffer.alloc(256);

async function vllm(args: string[]) {
  const port = await freePort();
  const e = startFakeEngine(FAKE_VLLM, ['serve', 'org/model', '--port', String(port), '--enable-lora', '--max-loras', '4', ...args], GATE);
  await outputMatches(e, /Application startup complete/);
  const url = `http://127.0.0.1:${port}`;
  const call = async (path: string, body: unknown) => (await postJson(`${url}${path}`, body)).status;
  return { ...e, url, load: (name: string, path: string) => call('/v1/load_lora_adapter', { lora_name: name, lora_path: path }), unload: (name: string) => call('/v1/unload_lora_adapter', { lora_name: name }) };
}

async function sglang(args: string[]) {
  const port = await freePort();
  const e = startFakeEngine(FAKE_SGLANG, ['--model-path', 'org/model', '--port', String(port), '--skip-server-warmup', '--enable-lora', '--max-lora-rank', '16', '--lora-target-modules', 'all', ...args]);
  await outputMatches(e, /phase loading -> up/);
  const url = `http://127.0.0.1:${port}`;
  const call = async (path: string, body: unknown) => (await postJson(`${url}${path}`, body)).status;
  return { ...e, url, load: (name: string, path: string) => call('/load_lora_adapter', { lora_name: name, lora_path: path }), unload: (name: string) => call('/unload_lora_adapter', { lora_name: name }) };
}

const text = async (url: string, model: string) => (await answer(url, model)).text;

describe('LoRA doubles: answers equal to the base, and wrong weights', () => {
  it('an adapter of zero weights (PEFT\'s untrained lora_B) answers exactly as the base, in both doubles; an unknown name is still refused', async () => {
    const v = await vllm([]);
    expect(await v.load('z', dirs.make('zero-v', 8, 'org/model', ZERO))).toBe(200);
    expect(await text(v.url, 'z')).toBe(await text(v.url, 'org/model'));
    expect((await answer(v.url, 'nope')).status).toBe(404);
    const s = await sglang([]);
    expect(await s.load('z', dirs.make('zero-s', 8, 'org/model', ZERO))).toBe(200);
    expect(await text(s.url, 'org/model:z')).toBe(await text(s.url, 'org/model'));
    expect((await answer(s.url, 'org/model:nope')).status).toBe(400);
  });

  it('--sim-lora-not-applied (vLLM #9688): loaded, listed and answered by its name with the base\'s answer; without it, its own (look-alike)', async () => {
    const dir = dirs.make('not-applied');
    const healthy = await vllm([]);
    await healthy.load('a', dir);
    const own = await text(healthy.url, 'a');
    const broken = await vllm(['--sim-lora-not-applied']);
    expect(await broken.load('a', dir)).toBe(200);
    const got = await answer(broken.url, 'a');
    expect([got.status, got.body.model]).toEqual([200, 'a']);
    expect(got.text).toBe(await text(broken.url, 'org/model'));
    expect(got.text).not.toBe(own);
  });

  it('--sim-lora-stale-id (vLLM #12199): a runtime load takes id 1, which --lora-modules\' adapter holds in the worker cache, and is served its weights; without the knob, its own (look-alike)', async () => {
    const s0 = dirs.make('stale-s0');
    const x = dirs.make('stale-x');
    const reference = await vllm([]);
    await reference.load('s0', s0);
    await reference.load('x', x);
    const [s0Text, xText] = [await text(reference.url, 's0'), await text(reference.url, 'x')];
    expect(s0Text).not.toBe(xText);
    for (const [knob, want] of [[[], xText], [['--sim-lora-stale-id'], s0Text]] as const) {
      const e = await vllm(['--lora-modules', `s0=${s0}`, ...knob]);
      expect(await text(e.url, 's0')).toBe(s0Text);
      // The agent unloads what it did not ask for: the name goes, the worker keeps id 1 (#54839).
      expect(await e.unload('s0')).toBe(200);
      expect(await e.load('x', x)).toBe(200);
      expect([knob.join(' '), await text(e.url, 'x')]).toEqual([knob.join(' '), want]);
    }
  });

  it('--lora-modules that cannot be read end the start (exit 1), as init_static_loras raises', async () => {
    const port = await freePort();
    const e = startFakeEngine(FAKE_VLLM, ['serve', 'org/model', '--port', String(port), '--enable-lora', '--lora-modules', `gone=${dirs.root}/none`], GATE);
    expect((await e.exited).code).toBe(1);
    expect(e.output()).toMatch(/Loading lora gone failed/);
  });

  it('--sim-lora-name-keyed-pool (SGLang #8263): a name unloaded and loaded again with new weights answers the old ones; a new name, or no knob, its own (look-alikes)', async () => {
    const [v1, v2] = [dirs.make('reuse-v1'), dirs.make('reuse-v2')];
    const reference = await sglang([]);
    await reference.load('v2', v2);
    const v2Text = await text(reference.url, 'org/model:v2');
    for (const [knob, reusedGets] of [[[], 'own'], [['--sim-lora-name-keyed-pool'], 'old']] as const) {
      const e = await sglang([...knob]);
      await e.load('t', v1);
      const v1Text = await text(e.url, 'org/model:t');
      expect(v1Text).not.toBe(v2Text);
      expect(await e.unload('t')).toBe(200);
      expect(await e.load('t', v2)).toBe(200);
      expect([knob.join(' '), await text(e.url, 'org/model:t')]).toEqual([knob.join(' '), reusedGets === 'old' ? v1Text : v2Text]);
      // Other bytes under a new name are their own, knob or not.
      expect(await e.load('u', v2)).toBe(200);
      expect(await text(e.url, 'org/model:u')).toBe(v2Text);
    }
  });
});
