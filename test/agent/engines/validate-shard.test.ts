import { create } from '@bufbuild/protobuf';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import type { ValidationContext } from '../../../src/agent/engines/engine.js';
import { VllmEngine } from '../../../src/agent/engines/vllm/vllm-engine.js';
import { GpuProcessSchema, HcaSchema, type StartShard } from '../../../src/gen/llmgw/v1/agent_pb.js';
import { LlmgwError } from '../../../src/lib/errors.js';
import { context, shard } from './engine-fixtures.js';

const tmp = mkdtempSync(join(tmpdir(), 'llmgw-validate-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

// An executable that certainly exists, so only the check under test fails.
const engine = new VllmEngine({ command: [process.execPath], env: {}, extraArgs: [] }, 'eth0');

async function refusal(spec: StartShard, ctx: ValidationContext = context(), e = engine): Promise<string> {
  try {
    await e.validate(spec, ctx);
  } catch (err) {
    expect(err).toBeInstanceOf(LlmgwError);
    expect((err as LlmgwError).kind).toBe('failure');
    const message = (err as LlmgwError).message;
    expect(message).not.toContain('\n');
    return message;
  }
  throw new Error('validation passed');
}

describe('engine validation', () => {
  it('refuses a vLLM sleep_mode profile unless engines.vllm.allow_sleep_mode opens its dev endpoints (security review 3, S6)', async () => {
    const sleepy = shard({ profile: { sleepMode: true } });
    expect(await refusal(sleepy)).toMatch(/^shard s1: profile \S+ sets sleep_mode, which opens vLLM's dev endpoints \(\/sleep, \/collective_rpc\) without a key; set engines\.vllm\.allow_sleep_mode: true/);
    const allowed = new VllmEngine({ command: [process.execPath], allowSleepMode: true }, 'eth0');
    await expect(allowed.validate(sleepy, context())).resolves.toBeUndefined();
    // Nothing changes for a profile without sleep.
    await expect(engine.validate(shard(), context())).resolves.toBeUndefined();
  });

  it('accepts a shard that fits the node', async () => {
    await expect(engine.validate(shard(), context())).resolves.toBeUndefined();
  });

  it('refuses GPU indices that do not exist, repeat, or are missing', async () => {
    expect(await refusal(shard({ gpuIndices: [7, 8] }))).toBe('GPU 8 does not exist on this node (GPUs: 0, 1, 2, 3, 4, 5, 6, 7)');
    expect(await refusal(shard({ gpuIndices: [3, 3] }))).toBe('GPU 3 is listed twice in gpu_indices [3, 3]');
    expect(await refusal(shard({ gpuIndices: [] }))).toBe('shard s1 lists no GPUs (gpu_indices is empty)');
  });

  it('refuses a GPU held by another live shard, naming it', async () => {
    expect(await refusal(shard(), context({ heldGpus: new Map([[1, 'llama-8b-r0']]) }))).toBe('GPU 1 is held by shard llama-8b-r0');
  });

  it('refuses a GPU used by a foreign compute process, naming the pid', async () => {
    const foreignProcesses = [create(GpuProcessSchema, { pid: 4242, gpuUuid: 'GPU-0', usedMemoryMb: 10240, processName: 'python3' })];
    expect(await refusal(shard(), context({ foreignProcesses }))).toBe('GPU 0 is in use by pid 4242 (python3), which no shard owns; stop it first');
  });

  it('refuses parallelism that does not match the GPUs of all ranks', async () => {
    expect(await refusal(shard({ profile: { tensorParallelSize: 4 } }))).toBe(
      'tensor_parallel_size 4 × pipeline_parallel_size 1 = 4 does not match 2 GPUs × 1 node = 2',
    );
    expect(await refusal(shard({ nnodes: 2, leaderAddr: '10.0.0.1', leaderPort: 29500, profile: { tensorParallelSize: 2 } }))).toBe(
      'tensor_parallel_size 2 × pipeline_parallel_size 1 = 2 does not match 2 GPUs × 2 nodes = 4',
    );
    // 0 means 1.
    await expect(engine.validate(shard({ gpuIndices: [0], profile: { tensorParallelSize: 0, pipelineParallelSize: 0 } }), context())).resolves.toBeUndefined();
  });

  it('compares compute capability numerically and refuses unknown or unhealthy GPUs', async () => {
    expect(await refusal(shard({ profile: { minComputeCapability: '10.0' } }))).toBe(
      "GPU 0 (NVIDIA H100 80GB HBM3) has compute capability 9.0, below the profile's min_compute_capability 10.0",
    );
    await expect(engine.validate(shard({ profile: { minComputeCapability: '8.0' } }), context())).resolves.toBeUndefined();
    const old = context();
    for (const g of old.inventory.gpus) g.computeCapability = '';
    expect(await refusal(shard({ profile: { minComputeCapability: '8.0' } }), old)).toBe(
      'GPU 0 compute capability is unknown (nvidia-smi too old to report it); the profile requires 8.0',
    );
    expect(await refusal(shard({ profile: { minComputeCapability: 'hopper' } }))).toBe(
      'profile llama-70b-tp2: min_compute_capability "hopper" is not major.minor, e.g. 8.0',
    );
    const sick = context();
    Object.assign(sick.inventory.gpus[1] as object, { healthy: false, error: 'GPU requires reset' });
    expect(await refusal(shard(), sick)).toBe('GPU 1 is unhealthy: GPU requires reset');
  });

  it('refuses an engine executable that does not resolve', async () => {
    const missing = new VllmEngine({ command: ['vllm-not-installed-here', 'serve'], env: {}, extraArgs: [] }, 'eth0');
    expect(await refusal(shard(), context(), missing)).toBe(
      `engine executable "vllm-not-installed-here" is not found on the agent's PATH; set engines.vllm.command`,
    );
    const notExec = join(tmp, 'vllm');
    writeFileSync(notExec, '#!/bin/sh\n', { mode: 0o644 });
    const plain = new VllmEngine({ command: [notExec], env: {}, extraArgs: [] }, 'eth0');
    expect(await refusal(shard(), context(), plain)).toBe(`engine executable "${notExec}" is not an executable file; set engines.vllm.command`);
    const onPath = new VllmEngine({ command: ['sh'], env: {}, extraArgs: [] }, 'eth0');
    await expect(onPath.validate(shard(), context())).resolves.toBeUndefined();
  });

  it('requires a leader address, a leader port and a rank in range for multi-node shards', async () => {
    const multi = { nnodes: 2, leaderAddr: '10.0.0.1', leaderPort: 29500, profile: { tensorParallelSize: 4 } };
    expect(await refusal(shard({ ...multi, leaderAddr: '' }))).toBe('shard s1: nnodes 2 requires leader_addr');
    expect(await refusal(shard({ ...multi, leaderPort: 0 }))).toBe('shard s1: leader_port 0 is not in 1..65535');
    expect(await refusal(shard({ ...multi, leaderPort: 70000 }))).toBe('shard s1: leader_port 70000 is not in 1..65535');
    expect(await refusal(shard({ ...multi, rank: 2 }))).toBe('shard s1: rank 2 is not in [0, 2)');
    expect(await refusal(shard({ rank: 1 }))).toBe('shard s1: rank 1 with nnodes 1; a single-node shard is rank 0');
  });

  it('checks the HTTP port only on a rank that serves HTTP', async () => {
    expect(await refusal(shard({ httpPort: 0 }))).toBe('shard s1: http_port 0 is not in 1..65535');
    expect(await refusal(shard(), context({ isPortFree: async () => false }))).toBe('http_port 8000 is already in use on this node');
    const worker = shard({ nnodes: 2, rank: 1, httpPort: 0, leaderAddr: '10.0.0.1', leaderPort: 29500, profile: { tensorParallelSize: 4 } });
    await expect(engine.validate(worker, context({ isPortFree: async () => false }))).resolves.toBeUndefined();
  });

  it('refuses a shard without replica, profile or model, and a profile that assigns its own GPUs', async () => {
    expect(await refusal(shard({ replicaId: '' }))).toBe('shard s1: replica_id is empty');
    expect(await refusal(shard({ profile: { model: '' } }))).toBe('shard s1: profile llama-70b-tp2 has no model');
    const bare = shard();
    bare.profile = undefined;
    expect(await refusal(bare)).toBe('shard s1 has no profile');
    expect(await refusal(shard({ profile: { env: { CUDA_VISIBLE_DEVICES: '0' } } }))).toBe(
      'shard s1: profile env sets CUDA_VISIBLE_DEVICES, which the agent owns (it assigns GPUs from gpu_indices)',
    );
  });

  it('refuses control characters in the replica id, profile name and model names, and takes any printable unicode (finding 11)', async () => {
    expect(await refusal(shard({ replicaId: 'r\u001b[2J' }))).toBe('shard s1: replica_id contains the control character \\x1b; use printable text');
    expect(await refusal(shard({ profile: { name: 'p\u0007' } }))).toBe('shard s1: profile.name contains the control character \\x07; use printable text');
    expect(await refusal(shard({ profile: { model: 'm\u009b8m' } }))).toBe('shard s1: profile.model contains the control character \\x9b; use printable text');
    expect(await refusal(shard({ profile: { servedModelName: 'x\u202e' } }))).toBe(
      'shard s1: profile.served_model_name contains the control character \\u202e; use printable text',
    );
    expect(await refusal(shard({ replicaId: 'two\nlines' }))).toBe('shard s1: replica_id contains the control character \\x0a; use printable text');
    await expect(engine.validate(shard({ replicaId: 'réplica-模型', profile: { model: 'Qwen/通义千问-7B', servedModelName: 'qwen-ü' } }), context())).resolves.toBeUndefined();
  });

  it('refuses every profile env name outside allowed_env, naming it, and accepts the default families', async () => {
    for (const name of ['NODE_OPTIONS', 'LD_PRELOAD', 'PATH', 'PYTHONWARNINGS', 'BROWSER', 'GCONV_PATH', 'PYTHONPATH']) {
      expect(await refusal(shard({ profile: { env: { HF_TOKEN: 'x', [name]: 'v' } } }))).toBe(
        `shard s1: profile env sets ${name}, which engines.vllm.allowed_env does not allow (allowed: HF_*, VLLM_*, SGLANG_*, NCCL_*, TORCH_*, OMP_NUM_THREADS, CUDA_LAUNCH_BLOCKING, TOKENIZERS_PARALLELISM)`,
      );
    }
    for (const name of ['CUDA_DEVICE_ORDER', 'NVIDIA_VISIBLE_DEVICES']) {
      expect(await refusal(shard({ profile: { env: { [name]: 'x' } } }))).toMatch(new RegExp(`^shard s1: profile env sets ${name}, which the agent owns`));
    }
    expect(await refusal(shard({ profile: { env: { NCCL_NET_PLUGIN: '/tmp/x.so' } } }))).toBe(
      'shard s1: profile env sets NCCL_NET_PLUGIN, which loads a shared library; only the operator may set it, in engines.vllm.env',
    );
    expect(await refusal(shard({ profile: { env: { 'HF_X=1': 'v' } } }))).toBe('shard s1: profile env name "HF_X=1" is not a valid variable name');
    expect(await refusal(shard({ profile: { env: { HF_X: 'a\0b' } } }))).toBe('shard s1: profile env HF_X contains a NUL byte');
    const ok = { HF_TOKEN: 't', VLLM_USE_V1: '1', SGLANG_X: '1', NCCL_DEBUG: 'INFO', TORCH_CUDA_ARCH_LIST: '9.0', OMP_NUM_THREADS: '8' };
    await expect(engine.validate(shard({ profile: { env: ok } }), context())).resolves.toBeUndefined();
  });

  it('takes engines.<name>.allowed_env as configured: exact names and NAME_* prefixes only', async () => {
    const strict = new VllmEngine({ command: [process.execPath], allowedEnv: ['HF_TOKEN', 'MY_*'] }, 'eth0');
    await expect(strict.validate(shard({ profile: { env: { HF_TOKEN: 't', MY_A: '1' } } }), context())).resolves.toBeUndefined();
    expect(await refusal(shard({ profile: { env: { HF_HOME: '/x' } } }), context(), strict)).toBe(
      'shard s1: profile env sets HF_HOME, which engines.vllm.allowed_env does not allow (allowed: HF_TOKEN, MY_*)',
    );
  });

  it('runs the executable it validated, by its absolute path, whatever PATH the profile would give', async () => {
    const onPath = new VllmEngine({ command: ['sh'] }, 'eth0');
    const spec = shard();
    await onPath.validate(spec, context());
    const argv0 = onPath.command(spec).argv[0] as string;
    expect(argv0.startsWith('/')).toBe(true);
    expect(argv0.endsWith('/sh')).toBe(true);
  });
});

describe('bounded control-plane fields (security review 2, finding N6)', () => {
  const withHcas = () => {
    const ctx = context();
    ctx.inventory.hcas = [create(HcaSchema, { name: 'mlx5_0', port: 1 }), create(HcaSchema, { name: 'mlx5_1', port: 1 })];
    return ctx;
  };
  it('refuses a pool, fabric or replica id past 256 bytes, naming the field and its size', async () => {
    expect(await refusal(shard({ pool: 'p'.repeat(12 * 1024 * 1024) }))).toBe('shard s1: pool is 12582912 bytes; at most 256 are accepted');
    expect(await refusal(shard({ fabric: 'f'.repeat(257) }))).toBe('shard s1: fabric is 257 bytes; at most 256 are accepted');
    expect(await refusal(shard({ replicaId: 'r'.repeat(300) }))).toBe('shard s1: replica_id is 300 bytes; at most 256 are accepted');
  });
  it('refuses control characters in pool, fabric and hcas', async () => {
    expect(await refusal(shard({ pool: '\u001b[2Jpool' }))).toBe('shard s1: pool contains the control character \\x1b; use printable text');
    expect(await refusal(shard({ hcas: ['mlx5_0\u001b[31m'] }), withHcas())).toBe('shard s1: hcas[0] contains the control character \\x1b; use printable text');
  });
  it("takes only this node's HCAs, never NCCL selector syntax", async () => {
    await expect(engine.validate(shard({ hcas: ['mlx5_0', 'mlx5_1:1'] }), withHcas())).resolves.toBeUndefined();
    expect(await refusal(shard({ hcas: ['x,^=mlx5_1'] }), withHcas())).toBe('shard s1: hcas names "x,^=mlx5_1", which is not an HCA of this node (HCAs: mlx5_0, mlx5_1)');
    expect(await refusal(shard({ hcas: ['mlx5_9'] }), withHcas())).toBe('shard s1: hcas names "mlx5_9", which is not an HCA of this node (HCAs: mlx5_0, mlx5_1)');
    expect(await refusal(shard({ hcas: ['mlx5_0', 'mlx5_0'] }), withHcas())).toBe('shard s1: hcas lists mlx5_0 twice');
  });
  it("takes no more HCAs than the node has ports, each port one of the node's (the list is echoed in every Register)", async () => {
    expect(await refusal(shard({ hcas: ['mlx5_0:7'] }), withHcas())).toBe('shard s1: hcas names "mlx5_0:7", which is not an HCA of this node (HCAs: mlx5_0, mlx5_1)');
    expect(await refusal(shard({ hcas: ['mlx5_0', 'mlx5_0:1', 'mlx5_1'] }), withHcas())).toBe('shard s1: hcas lists 3 entries; this node has 2 HCA ports');
  });
  it('takes an IP or a hostname as leader_addr, nothing else', async () => {
    const multi = (leaderAddr: string) => shard({ nnodes: 2, leaderAddr, leaderPort: 29500, profile: { tensorParallelSize: 4 } });
    await expect(engine.validate(multi('10.0.0.1'), context())).resolves.toBeUndefined();
    await expect(engine.validate(multi('fd00::1'), context())).resolves.toBeUndefined();
    await expect(engine.validate(multi('gpu-node-01.fleet.example'), context())).resolves.toBeUndefined();
    expect(await refusal(multi('a b'))).toBe('shard s1: leader_addr "a b" is neither an IP address nor a hostname');
    expect(await refusal(multi('--evil'))).toBe('shard s1: leader_addr "--evil" is neither an IP address nor a hostname');
  });
});
