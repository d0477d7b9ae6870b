import { create } from '@bufbuild/protobuf';
import { describe, expect, it } from 'vitest';
import { AdapterSpecSchema } from '../../../src/gen/llmgw/v1/agent_pb.js';
import { adapterLimitsOf, adapterLimitsProblem } from '../../../src/agent/adapters/adapter-limits.js';
import { type AdapterSetContext, adapterSetProblem, resolvedAdapterProblem } from '../../../src/agent/adapters/adapter-set-problem.js';
import { sglangRefusesConfig } from '../../../src/agent/engines/sglang/sglang-adapters.js';
import { vllmRefusesConfig } from '../../../src/agent/engines/vllm/vllm-adapters.js';
import { parseAdapterConfig } from '../../../src/models/adapters/adapter-files.js';

const a = (name: string, repo = 'org/lora', revision = '') => create(AdapterSpecSchema, { name, repo, revision });
const ctx: AdapterSetContext = { reservedNames: ['chat', 'org/base'], limits: { maxLoaded: 2, maxRank: 16 }, engine: 'vllm', hasAdapterApi: true };

describe('adapterSetProblem', () => {
  it.each([
    ['an empty set', [], undefined],
    ['two good adapters', [a('t1'), a('t2', 'org/x', 'v1.0')], undefined],
    ['a commit revision', [a('t1', 'org/x', 'a'.repeat(40))], undefined],
    ['more than the engine holds', [a('t1'), a('t2'), a('t3')], 'adapters lists 3; the engine holds 2 at once'],
    ['a name with a slash', [a('../x')], 'adapters[0].name "../x" is not an adapter name'],
    ['a name with a control character', [a('t\u001b[2J')], 'adapters[0].name (with the control character'],
    ['a name over 64 characters', [a('x'.repeat(65))], 'is not an adapter name'],
    ['a name twice', [a('t1'), a('t1', 'org/y')], 'adapters[1].name t1 is listed twice'],
    ['the shard\'s own served name', [a('chat')], "adapters[0].name chat is the shard's own model name"],
    ['a repo that escapes', [a('t1', '../../etc')], 'adapters[0].repo "../../etc" is not a hub model id'],
    ['a repo with --', [a('t1', 'org/a--b')], 'may not contain -- or ..'],
    ['a revision that escapes', [a('t1', 'org/x', '../../refs')], 'adapters[0].revision "../../refs" is not a branch, tag or commit'],
  ])('%s', (_, set, problem) => {
    const p = adapterSetProblem(set, ctx);
    if (problem === undefined) expect(p).toBeUndefined();
    else expect(p).toContain(problem);
  });

  it('refuses any adapter on an engine kind with no adapter API, naming it', () => {
    expect(adapterSetProblem([a('t1')], { ...ctx, engine: 'sim', hasAdapterApi: false })).toBe(
      'engine sim serves no LoRA adapters; remove adapters from the shard or use an engine that loads them (vllm, sglang)',
    );
  });

  it('refuses any adapter on a shard started without LoRA (max 0)', () => {
    expect(adapterSetProblem([a('t1')], { ...ctx, limits: { maxLoaded: 0, maxRank: 16 } })).toContain('the engine holds 0 at once');
  });
});

describe('resolvedAdapterProblem', () => {
  const c = { baseModels: ['org/base', 'chat'], maxRank: 16 };
  it('takes an adapter of the shard\'s base within its rank', () => {
    expect(resolvedAdapterProblem({ name: 't', baseModel: 'org/base', rank: 16 }, c)).toBeUndefined();
  });
  it('takes a base given as a local path by its last two segments', () => {
    expect(resolvedAdapterProblem({ name: 't', baseModel: 'org/base', rank: 8 }, { ...c, baseModels: ['/models/org/base/'] })).toBeUndefined();
  });
  it('refuses an unknown base, naming both', () => {
    expect(resolvedAdapterProblem({ name: 't', baseModel: 'org/other', rank: 8 }, c)).toBe('adapter t is for base model "org/other", not this shard\'s "org/base"; load it on a shard of its base');
  });
  it('refuses a rank over the limit', () => {
    expect(resolvedAdapterProblem({ name: 't', baseModel: 'org/base', rank: 32 }, c)).toContain('rank 32, above the shard\'s max_adapter_rank 16');
  });
  it('does not compare a base named by the trainer\'s local folder (no hub model: refusing it would call a healthy adapter broken); a hub id of another base still refused', () => {
    for (const base of ['/workspace/llama-3-8b', './base', '../models/x', '~/ckpt/base', 'C:\\models\\base']) {
      expect([base, resolvedAdapterProblem({ name: 't', baseModel: base, rank: 8 }, c)]).toEqual([base, undefined]);
    }
    expect(resolvedAdapterProblem({ name: 't', baseModel: 'workspace/llama-3-8b', rank: 8 }, c)).toMatch(/^adapter t is for base model "workspace\/llama-3-8b"/);
    // The rank is still checked when the base is not.
    expect(resolvedAdapterProblem({ name: 't', baseModel: '/workspace/x', rank: 32 }, c)).toContain('rank 32');
  });
});

describe('adapter configs the engines refuse (before any engine call)', () => {
  const plain = { useDora: false, modulesToSave: false, bias: 'none' };
  it('vLLM refuses DoRA, modules_to_save and a bias, in PEFTHelper\'s words; takes a plain LoRA (look-alike)', () => {
    expect(vllmRefusesConfig(plain)).toBeUndefined();
    expect(vllmRefusesConfig({ ...plain, useDora: true })).toBe('vLLM does not yet support DoRA (use_dora)');
    expect(vllmRefusesConfig({ ...plain, modulesToSave: true })).toBe('vLLM only supports modules_to_save being None');
    expect(vllmRefusesConfig({ ...plain, bias: 'lora_only' })).toBe('Adapter bias is not supported (bias "lora_only")');
  });
  it('SGLang refuses DoRA only; modules_to_save and a bias are left to it (look-alikes)', () => {
    expect(sglangRefusesConfig({ ...plain, useDora: true })).toMatch(/doesn't support DoRA adapters/);
    expect(sglangRefusesConfig({ useDora: false, modulesToSave: true, bias: 'all' })).toBeUndefined();
  });
  it('reads the features from adapter_config.json as PEFT writes them: an empty or null modules_to_save is none, bias "none" by default', () => {
    const cfg = (extra: Record<string, unknown>) => parseAdapterConfig(JSON.stringify({ r: 8, lora_alpha: 16, target_modules: ['q_proj'], base_model_name_or_path: 'org/base', ...extra }), 'x');
    expect(cfg({}).features).toEqual(plain);
    expect(cfg({ modules_to_save: [] }).features).toEqual(plain);
    expect(cfg({ modules_to_save: null, bias: 'none', use_dora: false }).features).toEqual(plain);
    expect(cfg({ modules_to_save: ['lm_head'], bias: 'all', use_dora: true }).features).toEqual({ useDora: true, modulesToSave: true, bias: 'all' });
  });
});

describe('adapter limits', () => {
  it('takes the StartShard\'s fields, then the profile\'s args, then the set\'s size and the default rank', () => {
    expect(adapterLimitsOf({ adapters: [], maxAdapters: 4, maxAdapterRank: 64 }, { maxLoaded: 2, maxRank: 8 })).toEqual({ maxLoaded: 4, maxRank: 64 });
    expect(adapterLimitsOf({ adapters: [], maxAdapters: 0, maxAdapterRank: 0 }, { maxLoaded: 2, maxRank: 8 })).toEqual({ maxLoaded: 2, maxRank: 8 });
    expect(adapterLimitsOf({ adapters: [a('x'), a('y')], maxAdapters: 0, maxAdapterRank: 0 })).toEqual({ maxLoaded: 2, maxRank: 16 });
    expect(adapterLimitsOf({ adapters: [], maxAdapters: 0, maxAdapterRank: 0 })).toEqual({ maxLoaded: 0, maxRank: 16 });
  });
  it('refuses limits beyond what the engines take', () => {
    expect(adapterLimitsProblem({ maxAdapters: 65, maxAdapterRank: 0 }, { maxLoaded: 64, maxRank: 512 })).toContain('max_adapters 65 is above 64');
    expect(adapterLimitsProblem({ maxAdapters: 0, maxAdapterRank: 1024 }, { maxLoaded: 64, maxRank: 512 })).toContain('max_adapter_rank 1024 is above 512');
    expect(adapterLimitsProblem({ maxAdapters: 64, maxAdapterRank: 512 }, { maxLoaded: 64, maxRank: 512 })).toBeUndefined();
  });
});
