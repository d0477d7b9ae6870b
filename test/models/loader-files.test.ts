import { describe, expect, it } from 'vitest';
import { filesAnyLoaderReads, filesLoaderReads, loadFormatOf, weightMapFiles } from '../../src/models/loader-files.js';

/*
 * What an engine's loader reads of a repo (loader-files.ts, with the
 * loaders' source lines): indexed safetensors, never original/, never .bin
 * twins; and the look-alikes that must still count.
 */

const noIndex = () => undefined;
const llama = ['config.json', 'generation_config.json', 'model-00001-of-00002.safetensors', 'model-00002-of-00002.safetensors', 'model.safetensors.index.json', 'original/consolidated.00.pth', 'original/params.json', 'original/tokenizer.model', 'pytorch_model.bin', 'tokenizer.json', 'tokenizer_config.json', 'README.md', 'LICENSE'];
const index = (p: string) => (p === 'model.safetensors.index.json' ? ['model-00001-of-00002.safetensors', 'model-00002-of-00002.safetensors'] : undefined);

describe('filesLoaderReads', () => {
  it('reads the indexed safetensors and the config and tokenizer files, never original/, a .bin twin or the model card', () => {
    expect(filesLoaderReads(llama, index, { engine: 'vllm' })).toEqual(['config.json', 'generation_config.json', 'model-00001-of-00002.safetensors', 'model-00002-of-00002.safetensors', 'model.safetensors.index.json', 'tokenizer.json', 'tokenizer_config.json']);
    expect(filesLoaderReads(llama, index, { engine: 'sglang' })).toEqual(filesLoaderReads(llama, index, { engine: 'vllm' }));
  });

  it('leaves out a consolidated safetensors file the index does not name, and names an indexed shard the repo lacks', () => {
    const files = ['config.json', 'model.safetensors', 'model-00001-of-00001.safetensors', 'model.safetensors.index.json'];
    expect(filesLoaderReads(files, (p) => (p === 'model.safetensors.index.json' ? ['model-00001-of-00001.safetensors', 'model-00009.safetensors'] : undefined), { engine: 'sglang' })).toEqual([
      'config.json',
      'model-00001-of-00001.safetensors',
      'model.safetensors.index.json',
      'model-00009.safetensors',
    ]);
  });

  it('reads every top-level safetensors file without an index, and .bin only where there is no safetensors, without trainer leftovers', () => {
    expect(filesLoaderReads(['a.safetensors', 'b.safetensors', 'x.bin'], noIndex, { engine: 'vllm' })).toEqual(['a.safetensors', 'b.safetensors']);
    expect(filesLoaderReads(['config.json', 'pytorch_model.bin', 'training_args.bin', 'optimizer.pt'], noIndex, { engine: 'vllm' })).toEqual(['config.json', 'pytorch_model.bin']);
    expect(filesLoaderReads(['config.json', 'model.pt'], noIndex, { engine: 'vllm' })).toEqual(['config.json', 'model.pt']);
    // Weights in a subfolder are not globbed (top folder only).
    expect(filesLoaderReads(['config.json', 'sub/model.safetensors', 'model.bin'], noIndex, { engine: 'vllm' })).toEqual(['config.json', 'model.bin']);
  });

  it('is mistral on vLLM when consolidated safetensors are there, never on SGLang', () => {
    const files = ['params.json', 'consolidated.safetensors', 'model.safetensors', 'tekken.json'];
    expect(filesLoaderReads(files, noIndex, { engine: 'vllm' })).toEqual(['params.json', 'consolidated.safetensors', 'tekken.json']);
    expect(filesLoaderReads(files, noIndex, { engine: 'sglang' })).toEqual(['params.json', 'consolidated.safetensors', 'model.safetensors', 'tekken.json']);
    expect(filesAnyLoaderReads(files, noIndex)).toEqual(['params.json', 'consolidated.safetensors', 'model.safetensors', 'tekken.json']);
  });

  it('honours --load-format, and counts every file for a format it does not know', () => {
    expect(filesLoaderReads(['a.safetensors', 'b.pt'], noIndex, { engine: 'vllm', loadFormat: 'pt' })).toEqual(['b.pt']);
    expect(filesLoaderReads(['c.json', 'a.gguf', 'README.md'], noIndex, { engine: 'vllm', loadFormat: 'gguf' })).toEqual(['c.json', 'a.gguf']);
    expect(loadFormatOf(['--load-format', 'pt'])).toBe('pt');
    expect(loadFormatOf(['--load_format=safetensors'])).toBe('safetensors');
    expect(loadFormatOf(['--max-model-len', '8'])).toBeUndefined();
  });

  it('reads an index by its weight_map and refuses what is not one', () => {
    expect(weightMapFiles('{"weight_map":{"a":"x.safetensors","b":"x.safetensors","c":"y.safetensors"}}')).toEqual(['x.safetensors', 'y.safetensors']);
    expect(weightMapFiles('{"metadata":{}}')).toBeUndefined();
    expect(weightMapFiles('not json')).toBeUndefined();
  });
});
