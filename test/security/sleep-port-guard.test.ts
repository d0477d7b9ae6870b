import { mkdirSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { create } from '@bufbuild/protobuf';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type AgentMessage, ShardState, type ShardStatus, SleepShardSchema, type StartShard, StopShardSchema, WakeShardSchema } from '../../src/gen/llmgw/v1/agent_pb.js';
import { NftPortGuard } from '../../src/lib/net/nft-port-guard.js';
import { type AgentDirs, type AgentProcess, agentDirs, endAgentFixture, startAgentProcess } from '../helpers/agent-process.js';
import { DOUBLE_ENGINES_YAML, doubleStart } from '../helpers/double-shards.js';
import { freePort, until } from '../helpers/engine-processes.js';
import { makeRemoteHost, type RemoteHost, requestAs } from '../helpers/http-as-other.js';
import { isRegister, shardIs } from '../helpers/sim-shards.js';
import { type StartedControlPlane, startControlPlane } from '../helpers/start-control-plane.js';

/*
 * Security review 4, S6, through the real agent and the vLLM double: with
 * sleep mode, another local user reached /sleep and /collective_rpc on the
 * engine's port and ended the shard. Now that port is the agent's and the
 * engine's alone on this host, while a host on the network (the router)
 * still reaches the engine directly, and a start whose guard cannot be set
 * is refused, never run open.
 */

const NODE = 'node-sleep-port-guard';
const S = ShardState;
const statusOf = (m: AgentMessage) => m.msg.value as ShardStatus;
const nft = new NftPortGuard();
let cp: StartedControlPlane;
let agent: AgentProcess;
let dirs: AgentDirs;
let usageDir: string;
let remote: RemoteHost;

beforeAll(async () => {
  remote = makeRemoteHost();
  cp = await startControlPlane();
  dirs = agentDirs(mkdtempSync(join(tmpdir(), 'llmgw-sleep-port-guard-')));
  usageDir = join(dirs.root, 'gpu-usage');
  mkdirSync(usageDir, { recursive: true });
  const registered = cp.cp.waitFor(NODE, isRegister, 30_000);
  agent = startAgentProcess({ server: cp.url, dirs, nodeId: NODE, extraYaml: DOUBLE_ENGINES_YAML, env: { LLMGW_FAKE_GPU_USAGE_DIR: usageDir } });
  await registered;
});

afterAll(async () => {
  await endAgentFixture({ agent, cp, dirs });
  remote?.remove();
});

function start(id: string, port: number, gpu: number, sleepMode: boolean): StartShard {
  const spec = doubleStart('vllm', id, port, { gpus: [gpu], args: ['--sim-gpu-memory', '20000', '--sim-gpu-usage-dir', usageDir] });
  if (spec.profile) spec.profile.sleepMode = sleepMode;
  return spec;
}

async function startReady(spec: StartShard, node = NODE, c = cp): Promise<ShardStatus> {
  const readyP = c.cp.waitFor(node, shardIs(spec.shardId, S.READY, S.FAILED), 60_000);
  c.cp.send(node, { case: 'start', value: spec });
  const ready = statusOf(await readyP);
  expect(ready.state, ready.error).toBe(S.READY);
  return ready;
}

describe('a sleep-mode shard\'s port (security review 4, S6)', () => {
  // Its waits (start, sleep, wake, stop: 30-60 s each) are safety nets; the test's own limit must not undercut them.
  it('refuses another local user /sleep and /collective_rpc, while the agent sleeps and wakes it and a host on the network reaches /v1 directly; the guard goes with the shard', { timeout: 180_000 }, async () => {
    const port = await freePort();
    await startReady(start('guarded', port, 5, true));
    expect((await nft.guarded()).get(port)?.sort()).toEqual([0]);
    // The review's two POSTs, as uid 65533: the connection itself is refused.
    expect(await requestAs(`http://127.0.0.1:${port}/sleep?level=2`, { method: 'POST' })).toBe('error ECONNREFUSED');
    expect(await requestAs(`http://127.0.0.1:${port}/collective_rpc`, { method: 'POST', body: '{"method":"reload_weights"}' })).toBe('error ECONNREFUSED');
    expect(await requestAs(`http://${remote.hostAddr}:${port}/wake_up`, { method: 'POST' })).toBe('error ECONNREFUSED');
    // The router's path, from another host: direct, untouched.
    expect(await requestAs(`http://${remote.hostAddr}:${port}/v1/models`, { netns: remote.netns })).toBe('status 200');
    // The agent's own: it sleeps and wakes the shard.
    const slept = cp.cp.waitFor(NODE, shardIs('guarded', S.SLEEPING), 30_000);
    cp.cp.send(NODE, { case: 'sleep', value: create(SleepShardSchema, { shardId: 'guarded', level: 1 }) });
    expect(statusOf(await slept).error).toBe('');
    // The agent saw the memory fall (its log, not a second SLEEPING): the sleep has finished.
    await until(() => agent.logs().some((r) => r.msg === 'shard asleep: GPU memory released' && r.shard === 'guarded'), 'shard guarded asleep', 30_000);
    const woke = cp.cp.waitFor(NODE, (m) => m.msg.case === 'shard' && m.msg.value.shardId === 'guarded' && (m.msg.value.state === S.READY || m.msg.value.error !== ''), 60_000);
    cp.cp.send(NODE, { case: 'wake', value: create(WakeShardSchema, { shardId: 'guarded' }) });
    const w = statusOf(await woke);
    expect(w.state, w.error).toBe(S.READY);
    // Stopped and gone: the port is everyone's again.
    const stopped = cp.cp.waitFor(NODE, shardIs('guarded', S.STOPPED), 60_000);
    cp.cp.send(NODE, { case: 'stop', value: create(StopShardSchema, { shardId: 'guarded' }) });
    await stopped;
    await until(async () => !(await nft.guarded()).has(port), 'the guard lifted', 20_000);
  });

  it('leaves a shard without sleep mode open to local users (look-alike: same engine, same double), lifting a guard an earlier shard left on its port', async () => {
    const port = await freePort();
    // What a sleep-mode shard that ended while no agent ran leaves behind.
    await nft.guard(port, [0]);
    await startReady(start('plain', port, 6, false));
    expect((await nft.guarded()).has(port)).toBe(false);
    expect(await requestAs(`http://127.0.0.1:${port}/v1/models`)).toBe('status 200');
  });

  it('refuses the start in one line when the guard cannot be set (no nft on the agent\'s PATH), never running the engine open', { timeout: 90_000 }, async () => {
    const node = 'node-sleep-port-guard-no-nft';
    const c = await startControlPlane();
    const d = agentDirs(mkdtempSync(join(tmpdir(), 'llmgw-sleep-port-guard-nonft-')));
    const registered = c.cp.waitFor(node, isRegister, 30_000);
    // /usr/sbin (nft's home) left out: what a node without nftables installed sees.
    const a = startAgentProcess({ server: c.url, dirs: d, nodeId: node, extraYaml: DOUBLE_ENGINES_YAML, env: { LLMGW_FAKE_GPU_USAGE_DIR: usageDir, PATH: '/usr/local/bin:/usr/bin:/bin' } });
    try {
      await registered;
      const port = await freePort();
      const refused = c.cp.waitFor(node, (m) => m.msg.case === 'shard' && m.msg.value.shardId === 'open' && m.msg.value.error !== '', 30_000);
      c.cp.send(node, { case: 'start', value: start('open', port, 2, true) });
      const r = statusOf(await refused);
      expect(r.state).toBe(S.FAILED);
      expect(r.error).toBe(
        `shard open: sleep_mode opens vLLM's dev endpoints (/sleep, /wake_up, /collective_rpc, /reset_prefix_cache) on port ${port} without a key, and the agent could not keep that port from other local users (nft is not installed (apt-get install nftables)); run the agent as root with nftables installed, or set engines.vllm.sleep_port_guard: none where no other local user runs`,
      );
      // Nothing listens there: no engine ran.
      expect(await requestAs(`http://127.0.0.1:${port}/v1/models`, { uid: 0 })).toBe('error ECONNREFUSED');
    } finally {
      await endAgentFixture({ agent: a, cp: c, dirs: d });
    }
  });
});
