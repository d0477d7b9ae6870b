import { mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { loadAgentConfig } from '../../../src/agent/config/load-agent-config.js';
import { findUser } from '../../../src/agent/config/find-user.js';
import { VllmEngine } from '../../../src/agent/engines/vllm/vllm-engine.js';
import { StoreLayout } from '../../../src/models/store-layout.js';
import { context, shard } from './engine-fixtures.js';

/*
 * Security review 4, S9: engines of one account share every cache that
 * account writes (one tenant's engine planted a Triton cuda_utils.so in
 * another model's cache). engines.<name>.profile_users gives a profile an
 * account of its own: its engine runs as that uid, and its caches are that
 * uid's leaves of the store (engines/<uid>/<engine>/<model>).
 */

const tmp = mkdtempSync(join(tmpdir(), 'llmgw-profile-users-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));
const daemon = findUser('daemon');
const nobody = findUser('nobody');

function configFile(yaml: string): string {
  const path = join(tmp, `agent-${Math.random().toString(36).slice(2)}.yaml`);
  writeFileSync(path, `node_id: n\nserver: http://127.0.0.1:9\nengines:\n${yaml}`);
  return path;
}

function configError(path: string): string {
  try {
    loadAgentConfig({ configPath: path, env: {} });
  } catch (err) {
    return (err as Error).message;
  }
  throw new Error('the config loaded');
}

describe.skipIf(process.geteuid?.() !== 0 || !daemon || !nobody)('engines.<name>.profile_users (security review 4, S9)', () => {
  it('runs a listed profile as its own account with caches of its own, and any other profile as engines.<name>.user', async () => {
    const config = loadAgentConfig({ configPath: configFile('  vllm:\n    user: daemon\n    profile_users:\n      tenant-b: nobody\n'), env: {} }).config;
    const vllm = config.engines.vllm;
    expect(vllm?.profileUsers?.['tenant-b']?.uid).toBe(65534);
    const store = join(tmp, 'store');
    const engine = new VllmEngine({ ...vllm, command: [process.execPath] }, 'eth0');
    engine.useModelStore(store);
    const layout = new StoreLayout(store);
    const plans = [];
    for (const profile of ['tenant-a', 'tenant-b']) {
      const spec = shard({ shardId: profile, profile: { name: profile, model: 'acme/m' } });
      await engine.validate(spec, context({ agentUid: 0 }));
      plans.push(engine.command(spec));
    }
    const [a, b] = plans;
    expect([a?.user?.uid, b?.user?.uid]).toEqual([daemon?.uid, 65534]);
    // One model, two accounts: two leaves, each its own account's.
    const leafA = layout.engineCacheDir(daemon?.uid as number, 'vllm', 'acme/m');
    const leafB = layout.engineCacheDir(65534, 'vllm', 'acme/m');
    expect(statSync(leafA).uid).toBe(daemon?.uid);
    expect(statSync(leafB).uid).toBe(65534);
    expect(a?.env.TRITON_CACHE_DIR?.startsWith(`${leafA}/`)).toBe(true);
    expect(b?.env.TRITON_CACHE_DIR?.startsWith(`${leafB}/`)).toBe(true);
  });

  it('refuses an unknown account and root by name, in one line', () => {
    expect(configError(configFile('  vllm:\n    profile_users:\n      p: no-such-account-x\n'))).toMatch(/vllm\.profile_users\.p: no account named "no-such-account-x" on this node; create it \(useradd --system no-such-account-x\) or fix the name/);
    expect(configError(configFile('  vllm:\n    profile_users:\n      p: root\n'))).toMatch(/vllm\.profile_users\.p: root is root; name an unprivileged account/);
    expect(configError(configFile('  vllm:\n    profile_users: [nobody]\n'))).toMatch(/vllm\.profile_users must be a map of profile name to account name/);
  });

  it('starts a listed profile under a root agent whose engine has no user, refusing the others (look-alike: the root refusal stands)', async () => {
    const config = loadAgentConfig({ configPath: configFile('  vllm:\n    profile_users:\n      tenant-b: nobody\n'), env: {} }).config;
    const engine = new VllmEngine({ ...config.engines.vllm, command: [process.execPath] }, 'eth0');
    await expect(engine.validate(shard({ profile: { name: 'tenant-b' } }), context({ agentUid: 0 }))).resolves.toBeUndefined();
    await expect(engine.validate(shard({ profile: { name: 'tenant-a' } }), context({ agentUid: 0 }))).rejects.toThrow(/^shard s1: engines\.vllm\.user is empty and the agent runs as root/);
  });
});
