import { describe, expect, it } from 'vitest';
import { EngineRegistry } from '../../../src/agent/engines/engine-registry.js';
import { LlmgwError } from '../../../src/lib/errors.js';

function messageOf(fn: () => unknown): string {
  try {
    fn();
  } catch (e) {
    expect(e).toBeInstanceOf(LlmgwError);
    expect((e as LlmgwError).kind).toBe('failure');
    return (e as LlmgwError).message;
  }
  throw new Error('expected a refusal');
}

describe('EngineRegistry', () => {
  const registry = new EngineRegistry({ engines: { vllm: { command: ['/opt/vllm'], env: {}, extraArgs: [], allowedEnv: [], enabled: true } }, mgmtInterface: 'eth0' });

  it('returns each enabled engine by name, with its configuration', () => {
    expect(['vllm', 'sglang'].map((n) => registry.get(n).name)).toEqual(['vllm', 'sglang']);
  });

  it('refuses an unknown engine, listing the registered ones', () => {
    expect(messageOf(() => registry.get('tgi'))).toBe('unknown engine "tgi"; known engines: vllm, sglang');
  });

  it('does not register sim unless engines.sim.enabled is true', () => {
    expect(messageOf(() => registry.get('sim'))).toBe(
      'engine "sim" is not enabled on this node (set engines.sim.enabled: true in the agent\'s config); known engines: vllm, sglang',
    );
    const dev = new EngineRegistry({ engines: { sim: { command: [], env: {}, extraArgs: [], allowedEnv: [], enabled: true } }, mgmtInterface: 'lo' });
    expect(dev.get('sim').name).toBe('sim');
    expect(dev.names()).toEqual(['vllm', 'sglang', 'sim']);
  });

  it('leaves out an engine the operator disabled', () => {
    const noVllm = new EngineRegistry({ engines: { vllm: { command: [], env: {}, extraArgs: [], allowedEnv: [], enabled: false } }, mgmtInterface: 'lo' });
    expect(noVllm.names()).toEqual(['sglang']);
  });
});
