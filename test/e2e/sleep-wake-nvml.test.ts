import { chmodSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { create } from '@bufbuild/protobuf';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type AgentMessage, ShardState, type ShardStatus, SleepShardSchema, WakeShardSchema } from '../../src/gen/llmgw/v1/agent_pb.js';
import { readGpuUsage } from '../../src/sim/fake-gpu-usage.js';
import { buildFakeNvml, fakeNvmlUnavailable } from '../agent/discovery/fake-nvml.js';
import { type AgentDirs, type AgentProcess, agentDirs, endAgentFixture, FAKE_NVIDIA_SMI, startAgentProcess } from '../helpers/agent-process.js';
import { DOUBLE_ENGINES_YAML, doubleStart, streamChat } from '../helpers/double-shards.js';
import { freePort, until } from '../helpers/engine-processes.js';
import { consumeStream } from '../helpers/fake-engines.js';
import { isRegister, shardIs } from '../helpers/sim-shards.js';
import { type StartedControlPlane, startControlPlane } from '../helpers/start-control-plane.js';

/*
 * Sleep and wake seen through NVML, as a node with a driver sees them
 * (issue 30: "sleep → GPU memory released (fake NVML) → wake"). The fake
 * libnvidia-ml.so adds what the vLLM double holds to its memory readings;
 * the nvidia-smi the agent is given does not, so a sleep is seen released
 * only if the agent reads memory through NVML.
 */

const NODE = 'node-sleep-nvml';
const S = ShardState;
const statusOf = (m: AgentMessage) => m.msg.value as ShardStatus;
let cp: StartedControlPlane;
let agent: AgentProcess;
let dirs: AgentDirs;
let usageDir: string;

describe.skipIf(fakeNvmlUnavailable() !== undefined)('sleep and wake read through NVML', () => {
  beforeAll(async () => {
    cp = await startControlPlane();
    dirs = agentDirs(mkdtempSync(join(tmpdir(), 'llmgw-sleep-nvml-')));
    usageDir = join(dirs.root, 'gpu-usage');
    // An nvidia-smi blind to the doubles' memory: only NVML shows it.
    const blindSmi = join(dirs.root, 'nvidia-smi-blind');
    writeFileSync(blindSmi, `#!/bin/sh\nunset LLMGW_FAKE_GPU_USAGE_DIR\nexec ${FAKE_NVIDIA_SMI} "$@"\n`);
    chmodSync(blindSmi, 0o755);
    const registered = cp.cp.waitFor(NODE, isRegister, 30_000);
    agent = startAgentProcess({
      server: cp.url,
      dirs,
      nodeId: NODE,
      nvidiaSmi: blindSmi,
      nvmlLibrary: buildFakeNvml(),
      extraYaml: DOUBLE_ENGINES_YAML,
      env: { LLMGW_FAKE_GPU_USAGE_DIR: usageDir },
    });
    await registered;
  });

  afterAll(() => endAgentFixture({ agent, cp, dirs }));

  it('sleeps a vLLM shard once NVML shows its memory released, and wakes it READY once NVML shows it back', async () => {
    const port = await freePort();
    const spec = doubleStart('vllm', 'n-1', port, { gpus: [5], args: ['--sim-gpu-memory', '8000', '--sim-gpu-usage-dir', usageDir] });
    if (spec.profile) spec.profile.sleepMode = true;
    const readyP = cp.cp.waitFor(NODE, shardIs('n-1', S.READY, S.FAILED), 60_000);
    cp.cp.send(NODE, { case: 'start', value: spec });
    const ready = statusOf(await readyP);
    expect(ready.state, ready.error).toBe(S.READY);

    const sleepingP = cp.cp.waitFor(NODE, (m) => m.msg.case === 'shard' && m.msg.value.shardId === 'n-1' && (m.msg.value.state === S.SLEEPING || m.msg.value.error !== ''), 60_000);
    cp.cp.send(NODE, { case: 'sleep', value: create(SleepShardSchema, { shardId: 'n-1', level: 1 }) });
    const sleeping = statusOf(await sleepingP);
    expect(sleeping.state, sleeping.error).toBe(S.SLEEPING);
    await until(() => agent.logs().some((r) => r.msg === 'shard asleep: GPU memory released' && r.shard === 'n-1'), 'n-1 seen asleep through NVML', 60_000);
    expect(readGpuUsage(usageDir).get(5)).toBeLessThan(8000 / 2);
    expect(agent.logs().some((r) => r.msg === 'NVML unavailable; GPUs read through nvidia-smi')).toBe(false);

    const wokenP = cp.cp.waitFor(NODE, (m) => m.msg.case === 'shard' && m.msg.value.shardId === 'n-1' && (m.msg.value.state === S.READY || m.msg.value.error !== ''), 60_000);
    cp.cp.send(NODE, { case: 'wake', value: create(WakeShardSchema, { shardId: 'n-1' }) });
    const woken = statusOf(await wokenP);
    expect(woken.state, woken.error).toBe(S.READY);
    expect(await consumeStream(await streamChat(port, 2))).toEqual({ tokens: 2, done: true });
  });
});
