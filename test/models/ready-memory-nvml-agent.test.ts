import { chmodSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { create } from '@bufbuild/protobuf';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ShardState, type ShardStatus, StopShardSchema } from '../../src/gen/llmgw/v1/agent_pb.js';
import { buildFakeNvml, fakeNvmlUnavailable } from '../agent/discovery/fake-nvml.js';
import { type AgentDirs, type AgentProcess, agentDirs, endAgentFixture, FAKE_NVIDIA_SMI, startAgentProcess } from '../helpers/agent-process.js';
import { DOUBLE_ENGINES_YAML, doubleStart } from '../helpers/double-shards.js';
import { freePort, until } from '../helpers/engine-processes.js';
import { runCli } from '../helpers/run-cli.js';
import { isRegister, shardIs } from '../helpers/sim-shards.js';
import { type StartedControlPlane, startControlPlane } from '../helpers/start-control-plane.js';

/*
 * Issue 51, GPU memory at READY read through NVML, as a node with a driver
 * reads it: the fake libnvidia-ml.so (NVIDIA's ABI, fixtures/nvml/fake-nvml.c)
 * adds what the vLLM double holds to nvmlDeviceGetMemoryInfo; the nvidia-smi
 * the agent is given does not, so the double's memory is learned only if the
 * agent read it through NVML. The look-alike, the same node without NVML,
 * learns what that nvidia-smi says.
 */

const DOUBLE_MIB = 8000;
/** GPU 5's memory.used in the fake box's data set, which both readers show. */
const GPU5_BASE_MIB = 3;

interface Node {
  cp: StartedControlPlane;
  agent: AgentProcess;
  dirs: AgentDirs;
  usageDir: string;
  metricsPort: number;
}

async function node(tag: string, nvml: boolean): Promise<Node> {
  const cp = await startControlPlane();
  const dirs = agentDirs(mkdtempSync(join(tmpdir(), `llmgw-${tag}-`)));
  const usageDir = join(dirs.root, 'gpu-usage');
  // An nvidia-smi blind to the doubles' memory: only NVML shows it.
  const blindSmi = join(dirs.root, 'nvidia-smi-blind');
  writeFileSync(blindSmi, `#!/bin/sh\nunset LLMGW_FAKE_GPU_USAGE_DIR\nexec ${FAKE_NVIDIA_SMI} "$@"\n`);
  chmodSync(blindSmi, 0o755);
  const metricsPort = await freePort();
  const registered = cp.cp.waitFor('node-a', isRegister, 30_000);
  const agent = startAgentProcess({
    server: cp.url,
    dirs,
    nvidiaSmi: blindSmi,
    // Without NVML: a library that is not there, so the agent falls back to nvidia-smi.
    nvmlLibrary: nvml ? buildFakeNvml() : join(dirs.root, 'no-libnvidia-ml.so.1'),
    extraYaml: `metrics_addr: 127.0.0.1:${metricsPort}\n${DOUBLE_ENGINES_YAML}`,
    env: { LLMGW_FAKE_GPU_USAGE_DIR: usageDir },
  });
  await registered;
  return { cp, agent, dirs, usageDir, metricsPort };
}

/** Starts the double holding DOUBLE_MIB on GPU 5, waits for the memory at READY to be learned, stops it; what ctl status and /metrics then say. */
async function learned(n: Node): Promise<{ mib: number | undefined; gpus: number | undefined; metrics: string }> {
  const spec = doubleStart('vllm', 'mem-1', await freePort(), { gpus: [5], args: ['--sim-gpu-memory', String(DOUBLE_MIB), '--sim-gpu-usage-dir', n.usageDir] });
  const ended = n.cp.cp.waitFor('node-a', shardIs('mem-1', ShardState.READY, ShardState.FAILED), 60_000);
  n.cp.cp.send('node-a', { case: 'start', value: spec });
  const st = (await ended).msg.value as ShardStatus;
  expect([st.state, st.error]).toEqual([ShardState.READY, '']);
  await until(() => n.agent.logs().some((r) => r.msg === 'GPU memory at READY measured' && r.shard === 'mem-1'), 'the memory at READY learned', 30_000);
  const status = JSON.parse((await runCli(['ctl', 'status', '--socket', n.dirs.socket, '--json'])).stdout) as { inventory: { warmth?: { profile: string; gpuMemoryAtReadyMib?: number; gpuMemoryAtReadyGpus?: number }[] } };
  const w = status.inventory.warmth?.find((x) => x.profile === 'vllm-double');
  const metrics = await (await fetch(`http://127.0.0.1:${n.metricsPort}/metrics`)).text();
  const stopped = n.cp.cp.waitFor('node-a', shardIs('mem-1', ShardState.STOPPED), 30_000);
  n.cp.cp.send('node-a', { case: 'stop', value: create(StopShardSchema, { shardId: 'mem-1' }) });
  await stopped;
  return { mib: w?.gpuMemoryAtReadyMib, gpus: w?.gpuMemoryAtReadyGpus, metrics };
}

describe.skipIf(fakeNvmlUnavailable() !== undefined)('GPU memory at READY read through NVML (issue 51)', () => {
  let withNvml: Node | undefined;
  let withoutNvml: Node | undefined;
  beforeAll(async () => {
    withNvml = await node('ready-nvml', true);
    withoutNvml = await node('ready-no-nvml', false);
  }, 90_000);
  afterAll(async () => {
    for (const n of [withNvml, withoutNvml]) if (n) await endAgentFixture({ agent: n.agent, cp: n.cp, dirs: n.dirs });
  });

  it('learns the memory the shard holds from NVML, in Inventory, ctl status and /metrics', { timeout: 120_000 }, async () => {
    const n = withNvml as Node;
    const got = await learned(n);
    expect(got).toMatchObject({ mib: GPU5_BASE_MIB + DOUBLE_MIB, gpus: 1 });
    expect(got.metrics).toContain(`llmgw_model_gpu_memory_at_ready_bytes{model="org/m",engine="vllm",profile="vllm-double"} ${(GPU5_BASE_MIB + DOUBLE_MIB) * 1024 * 1024}`);
    expect(n.agent.logs().some((r) => r.msg === 'GPUs read through NVML')).toBe(true);
  });

  it('look-alike: the same node without NVML learns what its nvidia-smi says, blind to the double', { timeout: 120_000 }, async () => {
    const n = withoutNvml as Node;
    const got = await learned(n);
    expect(got).toMatchObject({ mib: GPU5_BASE_MIB, gpus: 1 });
    expect(n.agent.logs().some((r) => r.msg === 'GPUs read through nvidia-smi')).toBe(true);
    expect(n.agent.logs().some((r) => r.msg === 'GPUs read through NVML')).toBe(false);
  });
});
