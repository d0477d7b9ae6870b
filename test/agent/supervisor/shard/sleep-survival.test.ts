import { create } from '@bufbuild/protobuf';
import { describe, expect, it } from 'vitest';
import { type StartShard, StartShardSchema } from '../../../../src/gen/llmgw/v1/agent_pb.js';
import { judgeSurvival, RELOADABLE_LOAD_FORMATS, VLLM_PARTIAL_WAKE_FIXED, vllmHasPartialWakeFix } from '../../../../src/agent/supervisor/shard/sleep-survival.js';

/* Issue 47 item 5 (review engine-fidelity-3 E3, E5, E6): sleeps vLLM cannot survive, refused before anything is touched; and their look-alikes, accepted. */

function spec(engine: string, args: string[] = []): StartShard {
  return create(StartShardSchema, { shardId: 's1', replicaId: 'r1', gpuIndices: [0], profile: { name: 'p1', engine, sleepMode: true, args } });
}

describe('vllmHasPartialWakeFix', () => {
  it('is 0.24.0 and later, post releases and local builds of it included', () => {
    expect(VLLM_PARTIAL_WAKE_FIXED).toBe('0.24.0');
    for (const v of ['0.24.0', '0.24.0+cu129', '0.24.0.post1', '0.24.1', '0.27.1', '0.28.0', '1.0.0', 'v0.25.0']) expect(vllmHasPartialWakeFix(v), v).toBe(true);
  });

  it('is not 0.18 to 0.23, nor a pre-release or dev build of 0.24.0', () => {
    for (const v of ['0.18.0', '0.22.0', '0.23.0', '0.23.1', '0.23.1.dev12+g93ec645', '0.24.0rc1', '0.24.0.dev3', '0.10.2']) expect(vllmHasPartialWakeFix(v), v).toBe(false);
  });

  it('is unknown for no version or one it cannot read', () => {
    for (const v of [undefined, '', 'main', 'dev']) expect(vllmHasPartialWakeFix(v), String(v)).toBeUndefined();
  });
});

describe('judgeSurvival', () => {
  it('refuses a level-2 sleep of a vLLM before #44483 in one line naming the version and what to do', () => {
    expect(() => judgeSurvival(spec('vllm'), 2, '0.22.0')).toThrow(
      /^sleep refused: vLLM 0\.22\.0 lacks #44483 \(first in 0\.24\.0\): a level-2 wake resumes its scheduler after the weights alone and a queued request crashes it \("CUDA error: an illegal memory access"\); use level 1, or run vLLM >= 0\.24\.0$/,
    );
  });

  it('accepts level 1 of the same vLLM (look-alike: a full wake resumes the scheduler with every tag resident)', () => {
    expect(() => judgeSurvival(spec('vllm'), 1, '0.22.0')).not.toThrow();
  });

  it('accepts level 2 of a fixed vLLM (look-alike)', () => {
    expect(() => judgeSurvival(spec('vllm'), 2, '0.27.1')).not.toThrow();
    expect(() => judgeSurvival(spec('vllm'), 2, '0.24.0')).not.toThrow();
  });

  it('refuses any sleep of a DP profile before #44483 (its idle ranks run a dummy batch while asleep), and accepts it on a fixed vLLM', () => {
    expect(() => judgeSurvival(spec('vllm', ['--data-parallel-size', '2']), 1, '0.23.0')).toThrow(/^sleep refused: vLLM 0\.23\.0 lacks #44483 .*a sleep of data-parallel size 2 runs a dummy batch on its released memory and crashes .*; stop the shard instead/);
    expect(() => judgeSurvival(spec('vllm', ['-dp=2']), 1, '0.23.0')).toThrow(/data-parallel size 2/);
    expect(() => judgeSurvival(spec('vllm', ['--data-parallel-size', '2']), 1, '0.27.1')).not.toThrow();
    expect(() => judgeSurvival(spec('vllm', ['--data-parallel-size', '1']), 1, '0.23.0')).not.toThrow();
  });

  it('refuses level 2 and DP sleep when the version is unknown, saying so; level 1 of a one-rank profile needs none', () => {
    expect(() => judgeSurvival(spec('vllm'), 2, undefined)).toThrow(/^sleep refused: vLLM version unknown \(GET \/version gave no answer\), and before 0\.24\.0/);
    expect(() => judgeSurvival(spec('vllm'), 2, 'main')).toThrow(/^sleep refused: vLLM version unknown \(GET \/version gave "main"\)/);
    expect(() => judgeSurvival(spec('vllm', ['-dp', '4']), 1, undefined)).toThrow(/version unknown/);
    expect(() => judgeSurvival(spec('vllm'), 1, undefined)).not.toThrow();
  });

  it('refuses level 2 with --speculative-config (the draft is never reloaded, vLLM #52479) however it is spelt, and accepts level 1 of it', () => {
    const cases = [
      ['--speculative-config', '{"method":"eagle","model":"d","num_speculative_tokens":3}'],
      ['-sc', '{"method":"mtp","num_speculative_tokens":1}'],
      ['--speculative_config.method', 'eagle3'],
      ['--spec-model', 'acme/draft', '--spec-tokens', '4'],
      ['--spec-method', 'draft_model'],
    ];
    for (const args of cases) {
      expect(() => judgeSurvival(spec('vllm', args), 2, '0.27.1'), args.join(' ')).toThrow(/^sleep refused: level 2 with --speculative-config.*: .*the draft stays discarded \(vLLM #52479\).*; use level 1$/);
      expect(() => judgeSurvival(spec('vllm', args), 1, '0.27.1')).not.toThrow();
    }
  });

  it('accepts level 2 with a speculative method that loads no draft (n-gram, suffix): nothing for the sleep to lose', () => {
    for (const args of [['--speculative-config', '{"method":"ngram","num_speculative_tokens":4,"prompt_lookup_max":4}'], ['--spec-method', 'suffix'], ['--speculative-config.method', 'ngram_gpu']]) {
      expect(() => judgeSurvival(spec('vllm', args), 2, '0.27.1'), args.join(' ')).not.toThrow();
    }
  });

  it('refuses level 2 with a --load-format whose loader has no reload, and accepts every DefaultModelLoader format and level 1', () => {
    for (const format of ['runai_streamer', 'runai_streamer_sharded', 'sharded_state', 'tensorizer', 'modelexpress', 'dummy']) {
      expect(() => judgeSurvival(spec('vllm', ['--load-format', format]), 2, '0.27.1')).toThrow(new RegExp(`^sleep refused: level 2 with --load-format ${format}: its loader cannot reload`));
      expect(() => judgeSurvival(spec('vllm', [`--load_format=${format}`]), 2, '0.27.1')).toThrow(/cannot reload/);
      expect(() => judgeSurvival(spec('vllm', ['--load-format', format]), 1, '0.27.1')).not.toThrow();
    }
    for (const format of RELOADABLE_LOAD_FORMATS) expect(() => judgeSurvival(spec('vllm', ['--load-format', format]), 2, '0.27.1'), format).not.toThrow();
    // The last one wins, as in argparse.
    expect(() => judgeSurvival(spec('vllm', ['--load-format', 'tensorizer', '--load-format', 'safetensors']), 2, '0.27.1')).not.toThrow();
  });

  it('judges no SGLang sleep by version, draft or loader (its are judged by host room)', () => {
    expect(() => judgeSurvival(spec('sglang', ['--speculative-algorithm', 'EAGLE', '--load-format', 'dummy']), 2, undefined)).not.toThrow();
  });
});
