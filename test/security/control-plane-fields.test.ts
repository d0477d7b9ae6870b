import { create, toBinary } from '@bufbuild/protobuf';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { MessageInitShape } from '@bufbuild/protobuf';
import { AgentMessageSchema, type AgentMessage, ShardState, type StartShard, StartShardSchema } from '../../src/gen/llmgw/v1/agent_pb.js';
import { freePort } from '../faults/scenarios/fault-harness.js';
import { agentDirs } from '../helpers/agent-process.js';
import { freeFakeGpu } from '../helpers/fake-gpus.js';
import { expectAgentUnharmed } from './agent-unharmed.js';
import { bootAgentAgainst, type HostileControlPlane, startHostileControlPlane } from './hostile-control-plane.js';

/*
 * Finding N6 of the second security review, against the real agent: pool,
 * fabric, hcas and leader_addr were taken unbounded and unchecked. A 12 MiB
 * pool was kept in the state file and echoed in every later Register, which
 * a gRPC control plane (4 MiB) then refused for ever; NCCL selector syntax in
 * hcas reached NCCL_IB_HCA.
 */

const root = mkdtempSync(join(tmpdir(), 'llmgw-sec-fields-'));
const dirs = agentDirs(root);
let cp: HostileControlPlane;

beforeAll(async () => {
  cp = await startHostileControlPlane();
});
afterAll(async () => {
  await cp?.close();
  rmSync(root, { recursive: true, force: true });
});

function start(shardId: string, over: Omit<MessageInitShape<typeof StartShardSchema>, '$typeName'>, gpu: number, port: number): StartShard {
  return create(StartShardSchema, {
    shardId,
    replicaId: `r-${shardId}`,
    nnodes: 1,
    gpuIndices: [gpu],
    httpPort: port,
    profile: { name: 'p', engine: 'sim', model: 'sim/m', servedModelName: 'm', tensorParallelSize: 1, args: ['--load-time', '100ms'] },
    ...over,
  });
}

const settled = (id: string) => (m: AgentMessage) =>
  m.msg.case === 'shard' && m.msg.value.shardId === id && [ShardState.FAILED, ShardState.READY].includes(m.msg.value.state);

async function outcome(spec: StartShard): Promise<{ state: string; error: string }> {
  cp.send({ case: 'start', value: spec });
  const s = (await cp.waitFor(settled(spec.shardId), 60_000)).msg.value as { state: ShardState; error: string };
  return { state: ShardState[s.state], error: s.error };
}

describe('bounded control-plane fields (security review 2, finding N6)', () => {
  it('refuses a 12 MiB pool and NCCL selector syntax in hcas, keeps nothing of them, and the next Register stays small', { timeout: 120_000 }, async () => {
    // The product's heartbeat (5 s), so its HTTP/2 ping timeout (twice the heartbeat, 5 s at least) is 10 s: at the
    // tests' 200 ms it was 1 s then (5 s since, PING_TIMEOUT_FLOOR_MS), and the agent's loop, busy taking in the 12 MiB
    // message on a loaded machine, ran its ping timer before the ack waiting in its socket, dropped the connection and
    // the message with it (no outcome in 60 s).
    const first = await bootAgentAgainst(cp, { dirs, nodeId: 'fields-node', heartbeat: '5s' });
    const big = await outcome(start('bigpool', { pool: 'p'.repeat(12 * 1024 * 1024) }, freeFakeGpu(0), await freePort()));
    expect(big).toEqual({ state: 'FAILED', error: 'shard bigpool: pool is 12582912 bytes; at most 256 are accepted' });
    const hcas = await outcome(start('selector', { hcas: ['x,^=mlx5_1'] }, freeFakeGpu(1), await freePort()));
    expect(hcas.state).toBe('FAILED');
    expect(hcas.error).toMatch(/^shard selector: hcas names "x,\^=mlx5_1", which is not an HCA of this node/);
    const leader = await outcome(start('leader', { nnodes: 2, leaderAddr: '$(reboot)', leaderPort: 29500, profile: { name: 'p', engine: 'sim', model: 'sim/m', tensorParallelSize: 2, args: [] } }, freeFakeGpu(2), await freePort()));
    expect(leader).toEqual({ state: 'FAILED', error: 'shard leader: leader_addr "$(reboot)" is neither an IP address nor a hostname' });
    // Nothing launched, nothing kept: the refusal came before the state file.
    expect(existsSync(join(dirs.stateDir, 'shards', 'bigpool.json'))).toBe(false);
    expectAgentUnharmed(first.pid);

    // An agent restart: its Register is what a 4 MiB gRPC control plane takes.
    await first.stop();
    const registered = cp.waitFor((m) => m.msg.case === 'register', 30_000);
    const second = await bootAgentAgainst(cp, { dirs, nodeId: 'fields-node', heartbeat: '5s' });
    const bytes = toBinary(AgentMessageSchema, await registered).length;
    expect(bytes).toBeLessThan(4 * 1024 * 1024);
    expectAgentUnharmed(second.pid);
  });

  it('refuses profile env levers inside the allowed families, naming each (security review 2, N2)', { timeout: 60_000 }, async () => {
    const agent = await bootAgentAgainst(cp, { dirs: agentDirs(join(root, 'levers')), nodeId: 'levers-node' });
    const leverStart = (id: string, env: Record<string, string>) =>
      start(id, { profile: { name: 'p', engine: 'sim', model: 'sim/m', servedModelName: 'm', tensorParallelSize: 1, env, args: [] } }, freeFakeGpu(3), 0);
    for (const [id, name, value] of [
      ['conf', 'NCCL_CONF_FILE', '/root/.cache/huggingface/evil.conf'],
      ['endpoint', 'HF_ENDPOINT', 'http://collector.invalid'],
      ['logcfg', 'VLLM_LOGGING_CONFIG_PATH', '/root/.cache/huggingface/x.json'],
    ] as const) {
      const r = await outcome(leverStart(id, { [name]: value }));
      expect(r).toEqual({
        state: 'FAILED',
        error: `shard ${id}: profile env sets ${name}, which names a file, directory, endpoint, plugin or switch the engine acts on; a pattern does not allow it: list ${name} itself in engines.sim.allowed_env`,
      });
    }
    expectAgentUnharmed(agent.pid);
  });

  it("refuses profile args that set the agent's own flags, and a model that is a flag (security review 2, N1)", { timeout: 60_000 }, async () => {
    const agent = await bootAgentAgainst(cp, { dirs: agentDirs(join(root, 'args')), nodeId: 'args-node' });
    const args = (id: string, profileArgs: string[], model = 'sim/m') =>
      start(id, { profile: { name: 'p', engine: 'sim', model, servedModelName: 'm', tensorParallelSize: 1, args: profileArgs } }, freeFakeGpu(4), 0);
    expect(await outcome(args('port', ['--port', '9000']))).toEqual({
      state: 'FAILED',
      error: 'shard port: profile args set --port, which the agent sets itself (ports, served name, parallelism, drain, multi-node); remove it from the profile',
    });
    expect(await outcome(args('help', [], '--help'))).toEqual({
      state: 'FAILED',
      error: 'shard help: profile.model "--help" begins with "-", which the engine would read as a flag',
    });
    expectAgentUnharmed(agent.pid);
  });
});
