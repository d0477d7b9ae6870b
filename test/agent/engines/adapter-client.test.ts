import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { AdapterCallError, type AdapterTarget, adapterRequestsInFlight, listLoadedAdapters, loadAdapter, parseLoraRequestsInfo, unloadAdapter } from '../../../src/agent/engines/adapter-client.js';
import { SGLANG_ADAPTER_API } from '../../../src/agent/engines/sglang/sglang-adapters.js';
import { VLLM_ADAPTER_API } from '../../../src/agent/engines/vllm/vllm-adapters.js';
import { adapterRequestModel } from '../../../src/lib/engine-adapter-api.js';
import { freePort, until } from '../../helpers/engine-processes.js';
import { FAKE_SGLANG, FAKE_VLLM, killFakeEngines, outputMatches, startFakeEngine } from '../../helpers/fake-engines.js';
import { AdapterDirs, answer, postJson } from '../../helpers/lora-adapters.js';

afterEach(killFakeEngines);
const dirs = new AdapterDirs();
afterAll(() => dirs.cleanup());

async function vllm(args: string[], env: Record<string, string> = { VLLM_ALLOW_RUNTIME_LORA_UPDATING: 'True' }): Promise<AdapterTarget> {
  const port = await freePort();
  const e = startFakeEngine(FAKE_VLLM, ['serve', 'org/model', '--port', String(port), ...args], env);
  await outputMatches(e, /Application startup complete/);
  return { baseUrl: `http://127.0.0.1:${port}`, api: VLLM_ADAPTER_API };
}

async function sglang(args: string[]): Promise<AdapterTarget> {
  const port = await freePort();
  const e = startFakeEngine(FAKE_SGLANG, ['--model-path', 'org/model', '--port', String(port), '--skip-server-warmup', ...args]);
  await outputMatches(e, /phase loading -> up/);
  return { baseUrl: `http://127.0.0.1:${port}`, api: SGLANG_ADAPTER_API };
}

const SGLANG_LORA = ['--enable-lora', '--max-lora-rank', '16', '--lora-target-modules', 'all'];

describe('adapter-client against bin/fake-vllm', () => {
  it('loads, lists, answers by the adapter, and unloads; refusals carry the status and the engine words', async () => {
    const t = await vllm(['--enable-lora', '--max-loras', '2']);
    const a = dirs.make('va');
    await loadAdapter(t, 'a', a);
    expect(await listLoadedAdapters(t)).toEqual(['a']);
    const base = await answer(t.baseUrl, 'org/model');
    const viaA = await answer(t.baseUrl, adapterRequestModel(t.api, 'org/model', 'a'));
    expect(viaA.status).toBe(200);
    expect(viaA.text).not.toBe(base.text);
    // The same name again is refused 400 in vLLM's own words.
    await expect(loadAdapter(t, 'a', a)).rejects.toMatchObject({ status: 400, engineReason: expect.stringMatching(/has already been loaded/) });
    // A rank over --max-lora-rank (default 16): the engine core's ValueError, a 500.
    const err = await loadAdapter(t, 'big', dirs.make('vbig', 64)).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(AdapterCallError);
    expect(err).toMatchObject({ status: 500, engineReason: 'Call to add_lora method failed: LoRA rank 64 is greater than max_lora_rank 16.' });
    await expect(loadAdapter(t, 'gone', `${dirs.root}/nothing`)).rejects.toMatchObject({ status: 404 });
    await unloadAdapter(t, 'a');
    expect(await listLoadedAdapters(t)).toEqual([]);
    await expect(unloadAdapter(t, 'a')).rejects.toMatchObject({ status: 404, engineReason: "The lora adapter 'a' cannot be found." });
    // vLLM has no pin: asked for one, the client refuses without a call.
    await expect(loadAdapter(t, 'p', a, { pinned: true })).rejects.toThrow(/cannot pin/);
  });

  it('without VLLM_ALLOW_RUNTIME_LORA_UPDATING the routes are not there: 404 Not Found', async () => {
    const t = await vllm(['--enable-lora'], {});
    await expect(loadAdapter(t, 'a', dirs.make('vgate'))).rejects.toMatchObject({ status: 404, engineReason: 'Not Found' });
  });

  it('reads the adapters with requests in flight off vllm:lora_requests_info, none once they end', async () => {
    const t = await vllm(['--enable-lora', '--max-loras', '1', '--sim-token-latency', '100ms']);
    await loadAdapter(t, 'a', dirs.make('vfa'));
    await loadAdapter(t, 'b', dirs.make('vfb'));
    expect(await adapterRequestsInFlight(t)).toEqual(new Map());
    const ra = answer(t.baseUrl, 'a', { max_tokens: 5 });
    await until(async () => (await adapterRequestsInFlight(t))?.get('a')?.running === 1, 'a running');
    // --max-loras 1: b's request waits while a's runs.
    const rb = answer(t.baseUrl, 'b', { max_tokens: 1 });
    await until(async () => (await adapterRequestsInFlight(t))?.get('b')?.waiting === 1, 'b waiting');
    await Promise.all([ra, rb]);
    expect(await adapterRequestsInFlight(t)).toEqual(new Map());
  });

  it('says nothing of requests in flight when the engine exports no such metric', async () => {
    const t = await vllm(['--enable-lora', '--disable-log-stats']);
    expect(await adapterRequestsInFlight(t)).toBeUndefined();
    expect(await adapterRequestsInFlight({ ...t, api: SGLANG_ADAPTER_API })).toBeUndefined();
  });

  it('gives up on an engine that does not answer, by the caller signal, as a call with no status', async () => {
    const t = await vllm(['--enable-lora', '--sim-hang-after', '0s']);
    await expect(loadAdapter(t, 'a', dirs.make('vhang'), { signal: AbortSignal.timeout(300) })).rejects.toMatchObject({ status: undefined, engineReason: 'the call was cancelled' });
    // Without a signal the target's own limit ends it.
    await expect(unloadAdapter({ ...t, callTimeoutMs: 300 }, 'a')).rejects.toMatchObject({ status: undefined, engineReason: 'no answer within 0.3s' });
    await expect(listLoadedAdapters({ ...t, baseUrl: `http://127.0.0.1:${await freePort()}` })).rejects.toMatchObject({ status: undefined, engineReason: 'ECONNREFUSED' });
  });
});

describe('adapter-client against bin/fake-sglang', () => {
  it('loads (pinned too), lists, answers by base:adapter, and reads a refusal out of success false', async () => {
    const t = await sglang([...SGLANG_LORA, '--max-loaded-loras', '4', '--max-loras-per-batch', '4']);
    const a = dirs.make('sa');
    await loadAdapter(t, 'a', a, { pinned: true });
    await loadAdapter(t, 'b', dirs.make('sb'));
    expect((await listLoadedAdapters(t)).sort()).toEqual(['a', 'b']);
    const viaA = await answer(t.baseUrl, adapterRequestModel(t.api, 'org/model', 'a'));
    const base = await answer(t.baseUrl, 'org/model');
    expect(viaA.status).toBe(200);
    expect(viaA.text).not.toBe(base.text);
    await expect(loadAdapter(t, 'a', a)).rejects.toMatchObject({ status: 400, engineReason: 'Failed to load LoRA adapter a because it is already loaded' });
    await expect(loadAdapter(t, 'big', dirs.make('sbig', 64))).rejects.toMatchObject({ status: 400, engineReason: expect.stringMatching(/with rank 64 is incompatible/) });
    await unloadAdapter(t, 'a');
    expect(await listLoadedAdapters(t)).toEqual(['b']);
    await expect(unloadAdapter(t, 'a')).rejects.toMatchObject({ status: 400, engineReason: expect.stringMatching(/LoRA with name a does not exist/) });
  });

  it('an SGLang without --enable-lora refuses a load 400 in its words', async () => {
    const t = await sglang([]);
    await expect(loadAdapter(t, 'a', dirs.make('snone'))).rejects.toMatchObject({ status: 400, engineReason: 'LoRA is not enabled. Please set `--enable-lora` to enable LoRA.' });
    expect((await postJson(`${t.baseUrl}/load_lora_adapter`, { lora_name: 'a', lora_path: '/x' })).status).toBe(400);
  });
});

describe('parseLoraRequestsInfo', () => {
  it('takes the newest series, never an older one, and reads both label lists', () => {
    const text = [
      '# TYPE vllm:lora_requests_info gauge',
      'vllm:lora_requests_info{max_lora="2",waiting_lora_adapters="x",running_lora_adapters="a,b"} 1700000002.5',
      'vllm:lora_requests_info{max_lora="2",waiting_lora_adapters="",running_lora_adapters="b"} 1700000003.0',
      'vllm:lora_requests_info{max_lora="2",waiting_lora_adapters="",running_lora_adapters=""} 1700000001.0',
    ].join('\n');
    expect(parseLoraRequestsInfo(text, 'vllm:lora_requests_info')).toEqual(new Map([['b', { running: 1, waiting: 0 }]]));
    expect(parseLoraRequestsInfo('vllm:num_requests_running 1\n', 'vllm:lora_requests_info')).toBeUndefined();
  });
});
