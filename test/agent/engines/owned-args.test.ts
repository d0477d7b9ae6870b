import { describe, expect, it } from 'vitest';
import { SglangEngine } from '../../../src/agent/engines/sglang/sglang-engine.js';
import { VllmEngine } from '../../../src/agent/engines/vllm/vllm-engine.js';
import { LlmgwError } from '../../../src/lib/errors.js';
import { context, shard } from './engine-fixtures.js';

const vllm = new VllmEngine({ command: [process.execPath] }, 'eth0');
const sglang = new SglangEngine({ command: [process.execPath] }, 'eth0');

async function refusal(e: VllmEngine | SglangEngine, args: string[], model?: string): Promise<string | undefined> {
  try {
    await e.validate(shard({ profile: { args, ...(model ? { model } : {}) } }), context());
    return undefined;
  } catch (err) {
    expect(err).toBeInstanceOf(LlmgwError);
    return (err as LlmgwError).message;
  }
}

const owned = (flag: string) => `shard s1: profile args set ${flag}, which the agent sets itself (ports, served name, parallelism, drain, multi-node); remove it from the profile`;

describe('flags the agent owns, in profile args (security review 2, N1)', () => {
  it('refuses vLLM flags that would undo the agent\'s: port, host, drain, parallelism, multi-node, also as --x=v, with underscores or abbreviated', async () => {
    expect(await refusal(vllm, ['--port', '9000'])).toBe(owned('--port'));
    expect(await refusal(vllm, ['--host=0.0.0.0'])).toBe(owned('--host'));
    expect(await refusal(vllm, ['--shutdown-timeout', '0'])).toBe(owned('--shutdown-timeout'));
    expect(await refusal(vllm, ['--served_model_name', 'x'])).toBe(owned('--served-model-name'));
    expect(await refusal(vllm, ['-tp', '8'])).toBe(owned('-tp'));
    expect(await refusal(vllm, ['--shutdown-t', '0'])).toBe(owned('--shutdown-t'));
    expect(await refusal(vllm, ['--uds', '/tmp/x.sock'])).toBe(owned('--uds'));
    // argparse reads -n8 as -n 8 (nnodes), and -t as -tp, the only vLLM option beginning with -t.
    expect(await refusal(vllm, ['-n8'])).toBe(owned('-n'));
    expect(await refusal(vllm, ['-t', '8'])).toBe(owned('-t'));
    expect(await refusal(vllm, ['--port.x', '1'])).toBe(owned('--port'));
  });
  it('lets a profile set what is its own: tuning flags, and vLLM\'s --data-parallel-size', async () => {
    expect(await refusal(vllm, ['--max-model-len', '8192', '--enforce-eager', '--gpu-memory-utilization=0.9'])).toBeUndefined();
    expect(await refusal(vllm, ['--data-parallel-size', '1'])).toBeUndefined();
    expect(await refusal(sglang, ['--mem-fraction-static', '0.85', '--enable-metrics'])).toBeUndefined();
  });
  it('refuses SGLang\'s own spellings of the same flags', async () => {
    expect(await refusal(sglang, ['--tp-size', '4'])).toBe(owned('--tp-size'));
    expect(await refusal(sglang, ['--model-path', '/etc'])).toBe(owned('--model-path'));
    expect(await refusal(sglang, ['--dist-init-addr=1.2.3.4:5'])).toBe(owned('--dist-init-addr'));
    expect(await refusal(sglang, ['--enable-weights-cpu-backup'])).toBe(owned('--enable-weights-cpu-backup'));
  });
  it('refuses a model that begins with "-", which the engine would read as a flag', async () => {
    expect(await refusal(vllm, [], '--help')).toBe('shard s1: profile.model "--help" begins with "-", which the engine would read as a flag');
  });
});
