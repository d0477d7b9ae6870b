import { describe, expect, it } from 'vitest';
import { adapterFilesRead, checkedAdapterMeta, isAdapterListing, parseAdapterConfig } from '../../src/models/adapters/adapter-files.js';
import { adapterConfigText } from '../helpers/fake-adapter-repo.js';

describe('adapterFilesRead: what vLLM and SGLang load of an adapter folder', () => {
  it('reads the config and the weights, not the README or what a subfolder holds', () => {
    expect(adapterFilesRead(['README.md', 'adapter_config.json', 'adapter_model.safetensors', 'checkpoint-100/adapter_model.safetensors'])).toEqual({
      reads: ['adapter_config.json', 'adapter_model.safetensors'],
      missing: [],
    });
  });

  it('takes safetensors over a .bin twin (both engines do), and .bin without the trainer leftovers when there is no safetensors', () => {
    expect(adapterFilesRead(['adapter_config.json', 'adapter_model.bin', 'adapter_model.safetensors']).reads).toEqual(['adapter_config.json', 'adapter_model.safetensors']);
    expect(adapterFilesRead(['adapter_config.json', 'adapter_model.bin', 'training_args.bin']).reads).toEqual(['adapter_config.json', 'adapter_model.bin']);
    expect(adapterFilesRead(['adapter_config.json', 'adapter_model.pt']).reads).toEqual(['adapter_config.json', 'adapter_model.pt']);
  });

  it('counts every top-level safetensors SGLang globs and added_tokens.json, which SGLang reads when it is there', () => {
    expect(adapterFilesRead(['adapter_config.json', 'adapter_model.safetensors', 'extra.safetensors', 'added_tokens.json', 'tokenizer.json']).reads).toEqual([
      'adapter_config.json',
      'adapter_model.safetensors',
      'extra.safetensors',
      'added_tokens.json',
    ]);
  });

  it("names vLLM's weight file as missing when it has none of its names, even if SGLang's glob would find one", () => {
    expect(adapterFilesRead(['adapter_config.json', 'lora.safetensors']).missing).toEqual(['adapter_model.safetensors']);
    expect(adapterFilesRead(['adapter_config.json', 'adapter_model.bin']).missing).toEqual([]);
  });

  it('calls a listing an adapter only with a top-level adapter_config.json', () => {
    expect([isAdapterListing(['adapter_config.json']), isAdapterListing(['lora/adapter_config.json', 'config.json']), isAdapterListing(['config.json'])]).toEqual([true, false, false]);
  });
});

describe('parseAdapterConfig', () => {
  const what = 'acme/x@main';
  it('reads base and rank from a PEFT config', () => {
    expect(parseAdapterConfig(adapterConfigText('meta-llama/Llama-3.1-8B-Instruct', 64).toString(), what)).toEqual({ baseModel: 'meta-llama/Llama-3.1-8B-Instruct', rank: 64, features: { useDora: false, modulesToSave: false, bias: 'none' } });
    // A trainer's local path is a base too: it is what the config says, compared by the agent.
    expect(parseAdapterConfig(adapterConfigText('/home/u/llama', 8).toString(), what).baseModel).toBe('/home/u/llama');
  });

  it('refuses what the loaders refuse: no r, a rank that is no positive integer, no lora_alpha or target_modules, not JSON', () => {
    const refusals: [string, RegExp][] = [
      [adapterConfigText('b', undefined).toString(), /has no r; /],
      [adapterConfigText('b', 0).toString(), /has r 0, not a positive integer/],
      [adapterConfigText('b', 8.5).toString(), /has r 8\.5, not a positive integer/],
      [adapterConfigText('b', 8, { r: '8' }).toString(), /has r "8", not a positive integer/],
      [adapterConfigText('b', 8, { lora_alpha: null, target_modules: undefined }).toString(), /has no lora_alpha, target_modules; /],
      ['{"r": 8,', /is not JSON/],
      ['[8]', /is not a JSON object/],
    ];
    for (const [text, re] of refusals) expect(() => parseAdapterConfig(text, what)).toThrow(re);
  });

  it('refuses a config with no base, or a base no model has (control characters)', () => {
    expect(() => parseAdapterConfig(adapterConfigText(undefined, 8).toString(), what)).toThrow(/^acme\/x@main's adapter_config\.json has no base_model_name_or_path; /);
    expect(() => parseAdapterConfig(adapterConfigText('', 8).toString(), what)).toThrow(/has no base_model_name_or_path/);
    expect(() => parseAdapterConfig(adapterConfigText('a\x1b[2Jb', 8).toString(), what)).toThrow(/control characters/);
  });

  it('keeps a manifest record only when parseAdapterConfig could have made it', () => {
    expect(checkedAdapterMeta({ baseModel: 'acme/base', rank: 8 })).toEqual({ baseModel: 'acme/base', rank: 8 });
    expect([checkedAdapterMeta({ baseModel: 'acme/base', rank: 0 }), checkedAdapterMeta({ baseModel: 1, rank: 8 }), checkedAdapterMeta('x'), checkedAdapterMeta(null)]).toEqual([undefined, undefined, undefined, undefined]);
  });
});
