import { describe, expect, it } from 'vitest';
import { EngineRegistry } from '../../../src/agent/engines/engine-registry.js';
import { LlmgwError } from '../../../src/lib/errors.js';

describe('EngineRegistry', () => {
  const registry = new EngineRegistry({ engines: { vllm: { command: ['/opt/vllm'], env: {}, extraArgs: [] } }, mgmtInterface: 'eth0' });

  it('returns each known engine by name, with its configuration', () => {
    expect(['vllm', 'sglang', 'sim'].map((n) => registry.get(n).name)).toEqual(['vllm', 'sglang', 'sim']);
  });

  it('refuses an unknown engine, listing the known ones', () => {
    let err: unknown;
    try {
      registry.get('tgi');
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(LlmgwError);
    expect((err as LlmgwError).kind).toBe('failure');
    expect((err as LlmgwError).message).toBe('unknown engine "tgi"; known engines: vllm, sglang, sim');
  });
});
