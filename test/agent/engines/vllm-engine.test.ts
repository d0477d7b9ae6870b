import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { VllmEngine } from '../../../src/agent/engines/vllm-engine.js';
import { type FakeExecutables, fakeExecutablesOnPath, shard } from './engine-fixtures.js';

let fake: FakeExecutables;
beforeAll(() => {
  fake = fakeExecutablesOnPath(['vllm']);
});
afterAll(() => fake.restore());

describe('VllmEngine.command', () => {
  it('builds vllm serve with the shard GPUs, interfaces, profile then configured env and args', () => {
    const engine = new VllmEngine({ command: ['/opt/vllm/bin/vllm', 'serve'], env: { NCCL_DEBUG: 'WARN' }, extraArgs: ['--disable-log-requests'] }, 'bond0');
    const plan = engine.command(
      shard({ gpuIndices: [2, 3], hcas: ['mlx5_0', 'mlx5_1'], profile: { args: ['--max-model-len', '8192'], env: { VLLM_USE_V1: '1' } } }),
    );
    expect(plan.argv).toEqual([
      '/opt/vllm/bin/vllm',
      'serve',
      'meta-llama/Llama-3.1-70B-Instruct',
      '--host',
      '0.0.0.0',
      '--port',
      '8000',
      '--served-model-name',
      'llama-70b',
      '--tensor-parallel-size',
      '2',
      '--pipeline-parallel-size',
      '1',
      '--max-model-len',
      '8192',
      '--disable-log-requests',
    ]);
    expect(plan.env).toEqual({
      CUDA_VISIBLE_DEVICES: '2,3',
      CUDA_DEVICE_ORDER: 'PCI_BUS_ID',
      NCCL_SOCKET_IFNAME: 'bond0',
      GLOO_SOCKET_IFNAME: 'bond0',
      NCCL_IB_HCA: 'mlx5_0,mlx5_1',
      VLLM_USE_V1: '1',
      NCCL_DEBUG: 'WARN',
    });
  });

  it('defaults to vllm serve (by its absolute path on the agent\'s PATH), pipeline size 1 and the model as served name, and sets no NCCL_IB_HCA without HCAs', () => {
    const plan = new VllmEngine(undefined, 'eth0').command(shard({ profile: { servedModelName: '', pipelineParallelSize: 0 } }));
    expect(plan.argv.slice(0, 3)).toEqual([fake.path('vllm'), 'serve', 'meta-llama/Llama-3.1-70B-Instruct']);
    expect(plan.argv.slice(7)).toEqual(['--served-model-name', 'meta-llama/Llama-3.1-70B-Instruct', '--tensor-parallel-size', '2', '--pipeline-parallel-size', '1']);
    expect(plan.env.NCCL_IB_HCA).toBeUndefined();
  });

  it('runs rank 0 of a multi-node shard as the API server with the master address', () => {
    const engine = new VllmEngine(undefined, 'eth0');
    const spec = shard({ nnodes: 2, rank: 0, leaderAddr: '10.0.0.1', leaderPort: 29500, profile: { tensorParallelSize: 4 } });
    expect(engine.servesHttp(spec)).toBe(true);
    expect(engine.command(spec).argv.slice(-8)).toEqual(['--nnodes', '2', '--node-rank', '0', '--master-addr', '10.0.0.1', '--master-port', '29500']);
  });

  it('runs other ranks headless, without an HTTP port', () => {
    const engine = new VllmEngine(undefined, 'eth0');
    const spec = shard({ nnodes: 2, rank: 1, httpPort: 0, leaderAddr: '10.0.0.1', leaderPort: 29500, profile: { tensorParallelSize: 4 } });
    expect(engine.servesHttp(spec)).toBe(false);
    const argv = engine.command(spec).argv;
    expect(argv).not.toContain('--port');
    expect(argv.slice(-9)).toEqual(['--nnodes', '2', '--node-rank', '1', '--master-addr', '10.0.0.1', '--master-port', '29500', '--headless']);
  });

  it('passes shell metacharacters through as literal argv elements', () => {
    const hostile = ['; rm -rf /', '$(x)', '`id`', "a'b\"c", '&& reboot'];
    const plan = new VllmEngine({ command: [], env: {}, extraArgs: ['|cat /etc/shadow'] }, 'eth0').command(
      shard({ profile: { model: '$(curl evil)', args: hostile } }),
    );
    expect(plan.argv[2]).toBe('$(curl evil)');
    expect(plan.argv.slice(-6)).toEqual([...hostile, '|cat /etc/shadow']);
  });

  it('keeps CUDA_VISIBLE_DEVICES the shard GPUs even when configured env sets it', () => {
    const plan = new VllmEngine({ command: [], env: { CUDA_VISIBLE_DEVICES: '0,1,2,3,4,5,6,7' }, extraArgs: [] }, 'eth0').command(shard({ gpuIndices: [5] }));
    expect(plan.env.CUDA_VISIBLE_DEVICES).toBe('5');
  });

  it('sets CUDA_DEVICE_ORDER=PCI_BUS_ID over configured env, so CUDA numbers GPUs as nvidia-smi does', () => {
    const plan = new VllmEngine({ env: { CUDA_DEVICE_ORDER: 'FASTEST_FIRST' } }, 'eth0').command(shard({ gpuIndices: [5] }));
    expect(plan.env.CUDA_DEVICE_ORDER).toBe('PCI_BUS_ID');
  });

  it('leaves out profile env a skipped validation would have refused', () => {
    const plan = new VllmEngine(undefined, 'eth0').command(shard({ profile: { env: { LD_PRELOAD: '/tmp/x.so', HF_TOKEN: 't' } } }));
    expect(plan.env.LD_PRELOAD).toBeUndefined();
    expect(plan.env.HF_TOKEN).toBe('t');
  });

  it('carries engines.vllm.user in the plan for the launcher', () => {
    const plan = new VllmEngine({ user: { name: 'nobody', uid: 65534, gid: 65534, home: '/nonexistent' } }, 'eth0').command(shard());
    expect(plan.user).toEqual({ name: 'nobody', uid: 65534, gid: 65534, home: '/nonexistent' });
    expect(new VllmEngine(undefined, 'eth0').command(shard()).user).toBeUndefined();
  });

  it('names its in-flight gauge', () => {
    expect(new VllmEngine(undefined, 'eth0').inFlightMetric).toBe('vllm:num_requests_running');
  });
});
