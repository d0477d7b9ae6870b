import { describe, expect, it } from 'vitest';
import { describeEngineAccount, engineAccount } from '../../../src/agent/engines/engine-account.js';
import { SimEngine } from '../../../src/agent/engines/sim/sim-engine.js';
import { VllmEngine } from '../../../src/agent/engines/vllm/vllm-engine.js';
import { context, shard } from './engine-fixtures.js';

const llmgwEngine = { name: 'llmgw-engine', uid: 998, gid: 998, home: '/var/lib/llmgw-engine' };

describe('engines not as root (security review 2, N1)', () => {
  it('refuses a start on a root agent when engines.<name>.user is empty and allow_root is not true, naming both keys', async () => {
    const root = context({ agentUid: 0 });
    await expect(new VllmEngine({ command: [process.execPath] }, 'eth0').validate(shard(), root)).rejects.toThrow(
      'shard s1: engines.vllm.user is empty and the agent runs as root, so the engine would run as root; set engines.vllm.user to an unprivileged account (useradd --system llmgw-engine), or engines.vllm.allow_root: true to run it as root',
    );
    await expect(new SimEngine(undefined, 'lo').validate(shard(), root)).rejects.toThrow(/^shard s1: engines\.sim\.user is empty and the agent runs as root/);
  });

  it('starts it with a user, with allow_root: true, or under an agent that is not root', async () => {
    const root = context({ agentUid: 0 });
    await expect(new VllmEngine({ command: [process.execPath], user: llmgwEngine }, 'eth0').validate(shard(), root)).resolves.toBeUndefined();
    await expect(new VllmEngine({ command: [process.execPath], allowRoot: true }, 'eth0').validate(shard(), root)).resolves.toBeUndefined();
    await expect(new VllmEngine({ command: [process.execPath] }, 'eth0').validate(shard(), context({ agentUid: 1000 }))).resolves.toBeUndefined();
  });

  it('names a refusal of the profile before the node\'s own account problem', async () => {
    await expect(new VllmEngine({ command: [process.execPath] }, 'eth0').validate(shard({ profile: { args: ['--trust-remote-code'] } }), context({ agentUid: 0 }))).rejects.toThrow(
      /profile args set --trust-remote-code/,
    );
  });

  it('says who each engine runs as, in one line', () => {
    expect(describeEngineAccount(engineAccount('vllm', { user: llmgwEngine }, 0))).toBe('vllm → llmgw-engine (uid 998)');
    expect(describeEngineAccount(engineAccount('sglang', { allowRoot: true }, 0))).toBe('sglang → root (allow_root)');
    expect(describeEngineAccount(engineAccount('vllm', {}, 0))).toBe(
      'vllm → root: refused; set engines.vllm.user to an unprivileged account (or engines.vllm.allow_root: true)',
    );
    expect(engineAccount('vllm', { allowRoot: true }, 1000)).toMatchObject({ uid: 1000, configured: false, allowRoot: false, refused: false });
    expect(describeEngineAccount(engineAccount('vllm', {}, 1000))).toMatch(/^vllm → .* \(uid 1000\), the agent's own account$/);
  });
});
