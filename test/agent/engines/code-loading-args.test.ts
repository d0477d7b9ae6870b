import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { type CodeLoadingArgs, codeLoadingArgsIn } from '../../../src/agent/engines/code-loading-args.js';
import { SGLANG_CODE_LOADING_ARGS } from '../../../src/agent/engines/sglang/sglang-args.js';
import { VLLM_CODE_LOADING_ARGS } from '../../../src/agent/engines/vllm/vllm-args.js';
import { SglangEngine } from '../../../src/agent/engines/sglang/sglang-engine.js';
import { VLLM_OWNED_ARGS, VllmEngine } from '../../../src/agent/engines/vllm/vllm-engine.js';
import { findFlags } from '../../../src/agent/engines/find-flags.js';
import type { EngineConfig } from '../../../src/agent/config/agent-config.js';
import { LlmgwError } from '../../../src/lib/errors.js';
import { context, shard } from './engine-fixtures.js';

/** A flag list from test/fixtures/engines/: every option string the engine's real parser registers. */
function flagSet(file: string): string[] {
  const text = readFileSync(new URL(`../../fixtures/engines/${file}`, import.meta.url), 'utf8');
  return text
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l !== '' && !l.startsWith('#'));
}

const VLLM_FLAGS = flagSet('vllm-serve-flags.txt');
const SGLANG_FLAGS = flagSet('sglang-server-flags.txt');

const listed = (list: CodeLoadingArgs) => [...list.refused, ...list.modelPaths].flat();

async function refusal(engine: VllmEngine | SglangEngine, args: string[]): Promise<string | undefined> {
  try {
    await engine.validate(shard({ profile: { args } }), context());
    return undefined;
  } catch (err) {
    expect(err).toBeInstanceOf(LlmgwError);
    return (err as LlmgwError).message;
  }
}

const vllm = (config: Partial<EngineConfig> = {}) => new VllmEngine({ command: [process.execPath], ...config }, 'eth0');
const sglang = (config: Partial<EngineConfig> = {}) => new SglangEngine({ command: [process.execPath], ...config }, 'eth0');
const refused = (flag: string, engine = 'vllm', given = flag) =>
  `shard s1: profile args set ${given === flag ? flag : `${given} (${flag})`}, which loads code, opens files or reaches an endpoint on this node; list ${flag} in engines.${engine}.allowed_args to allow it`;

describe.each([
  ['vLLM', VLLM_CODE_LOADING_ARGS, VLLM_FLAGS],
  ['SGLang', SGLANG_CODE_LOADING_ARGS, SGLANG_FLAGS],
])('the %s lists, against every option its real parser registers', (_name, list, all) => {
  it('hold only real options', () => {
    expect(listed(list).filter((f) => !all.includes(f))).toEqual([]);
    expect(list.mayPass.filter((f) => !all.includes(f))).toEqual([]);
  });

  it('refuse no real option but the listed ones, however short the listed ones are (mayPass is complete)', () => {
    const hit = all.filter((o) => codeLoadingArgsIn([o, 'v'], list, []).length > 0);
    expect(hit.sort()).toEqual(listed(list).sort());
  });
});

describe('the owned vLLM flags, against its real parser', () => {
  it("refuse no real option but the owned ones (-dp, --data-parallel-size are the profile's)", () => {
    const hit = VLLM_FLAGS.filter((o) => findFlags([o], VLLM_OWNED_ARGS).length > 0);
    expect(hit.sort()).toEqual([...VLLM_OWNED_ARGS.flags].sort());
  });
});

describe('profile args that load code or open files (security review 2, N1)', () => {
  it('refuses the review\'s vLLM flags, naming the flag and engines.vllm.allowed_args', async () => {
    const e = vllm();
    expect(await refusal(e, ['--trust-remote-code'])).toBe(refused('--trust-remote-code'));
    expect(await refusal(e, ['--tool-parser-plugin', '/tmp/x.py'])).toBe(refused('--tool-parser-plugin'));
    expect(await refusal(e, ['--allowed-local-media-path', '/'])).toBe(refused('--allowed-local-media-path'));
    expect(await refusal(e, ['--chat-template', '/etc/shadow'])).toBe(refused('--chat-template'));
    expect(await refusal(e, ['--download-dir=/etc'])).toBe(refused('--download-dir'));
    expect(await refusal(e, ['--worker-cls', 'x.Y'])).toBe(refused('--worker-cls'));
    expect(await refusal(e, ['--middleware', 'x.y'])).toBe(refused('--middleware'));
    expect(await refusal(e, ['--config', '/tmp/all-of-it.yaml'])).toBe(refused('--config'));
  });

  it('refuses them spelt as vLLM reads them: underscores, abbreviated, an alias, a dotted JSON field', async () => {
    const e = vllm();
    expect(await refusal(e, ['--trust_remote_code'])).toBe(refused('--trust-remote-code'));
    expect(await refusal(e, ['--trust-remote'])).toBe(refused('--trust-remote-code', 'vllm', '--trust-remote'));
    expect(await refusal(e, ['-sc', '{"model": "pkg.Proposer"}'])).toBe(refused('--speculative-config', 'vllm', '-sc'));
    expect(await refusal(e, ['--structured-outputs-config.reasoning_parser_plugin', '/tmp/x.py'])).toBe(refused('--structured-outputs-config'));
    // The engine's own --reasoning-parser is not an abbreviation of --reasoning-parser-plugin.
    expect(await refusal(e, ['--reasoning-parser', 'qwen3', '--enable-auto-tool-choice', '--tool-call-parser', 'hermes'])).toBeUndefined();
  });

  it("refuses SGLang's, by its own names", async () => {
    const e = sglang();
    expect(await refusal(e, ['--trust-remote-code'])).toBe(refused('--trust-remote-code', 'sglang'));
    expect(await refusal(e, ['--enable-custom-logit-processor'])).toBe(refused('--enable-custom-logit-processor', 'sglang'));
    expect(await refusal(e, ['--forward-hooks', '[{"hook_factory": "os.system"}]'])).toBe(refused('--forward-hooks', 'sglang'));
    expect(await refusal(e, ['--log-requests-target', '/etc'])).toBe(refused('--log-requests-target', 'sglang'));
    expect(await refusal(e, ['--log-requests', '--quantization', 'fp8'])).toBeUndefined();
  });

  it('lets a profile set a flag the operator lists in allowed_args, by any of its spellings', async () => {
    expect(await refusal(vllm({ allowedArgs: ['--trust-remote-code'] }), ['--trust-remote-code'])).toBeUndefined();
    expect(await refusal(vllm({ allowedArgs: ['--trust-remote-code'] }), ['--trust_remote_code'])).toBeUndefined();
    expect(await refusal(vllm({ allowedArgs: ['--speculative-config'] }), ['-sc', '{}'])).toBeUndefined();
    expect(await refusal(sglang({ allowedArgs: ['--trust-remote-code'] }), ['--trust-remote-code'])).toBeUndefined();
    // One listed flag allows that flag only.
    expect(await refusal(vllm({ allowedArgs: ['--trust-remote-code'] }), ['--trust-remote-code', '--download-dir', '/etc'])).toBe(refused('--download-dir'));
  });

  it('checks a tokenizer or config given by path like the model: a hub id passes, a path only under model_roots', async () => {
    expect(await refusal(vllm(), ['--tokenizer', 'org/tok', '--generation-config', 'vllm'])).toBeUndefined();
    expect(await refusal(vllm(), ['--tokenizer', '/etc'])).toBe(
      'shard s1: profile args set --tokenizer "/etc", which is a local path, not a hub repo id (org/name), and engines.vllm.model_roots is empty; use a hub repo id, or list the directory that holds it in engines.vllm.model_roots, or list --tokenizer in engines.vllm.allowed_args',
    );
    expect(await refusal(sglang(), ['--speculative-draft-model=../../etc'])).toMatch(/^shard s1: profile args set --speculative-draft-model \(--speculative-draft-model-path\) "\.\.\/\.\.\/etc", which is a local path/);
    expect(await refusal(vllm({ allowedArgs: ['--tokenizer'] }), ['--tokenizer', '/etc'])).toBeUndefined();
  });

  it("leaves extra_args, the operator's own, alone", async () => {
    expect(await refusal(vllm({ extraArgs: ['--trust-remote-code', '--download-dir', '/srv/hf'] }), [])).toBeUndefined();
  });
});
