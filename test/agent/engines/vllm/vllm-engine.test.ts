import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { VllmEngine, dataParallelSize } from '../../../../src/agent/engines/vllm/vllm-engine.js';
import { context, type FakeExecutables, fakeExecutablesOnPath, shard } from '../engine-fixtures.js';

let fake: FakeExecutables;
beforeAll(() => {
  fake = fakeExecutablesOnPath(['vllm']);
});
afterAll(() => fake.restore());

describe('VllmEngine.command', () => {
  it('builds vllm serve with the shard GPUs, interfaces, profile then configured env and args', () => {
    const engine = new VllmEngine({ command: ['/opt/vllm/bin/vllm', 'serve'], env: { NCCL_DEBUG: 'WARN' }, extraArgs: ['--enable-log-requests'] }, 'bond0');
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
      '--shutdown-timeout',
      '25',
      '--max-model-len',
      '8192',
      '--enable-log-requests',
    ]);
    expect(plan.env).toEqual({
      CUDA_VISIBLE_DEVICES: '2,3',
      CUDA_DEVICE_ORDER: 'PCI_BUS_ID',
      // NCCL's lists exact (NCCL reads a plain entry as a prefix); Gloo's a plain name.
      NCCL_SOCKET_IFNAME: '=bond0',
      GLOO_SOCKET_IFNAME: 'bond0',
      NCCL_IB_HCA: '=mlx5_0,mlx5_1',
      VLLM_USE_V1: '1',
      NCCL_DEBUG: 'WARN',
    });
  });

  it('defaults to vllm serve (by its absolute path on the agent\'s PATH), pipeline size 1 and the model as served name, and sets no NCCL_IB_HCA without HCAs', () => {
    const plan = new VllmEngine(undefined, 'eth0').command(shard({ profile: { servedModelName: '', pipelineParallelSize: 0 } }));
    expect(plan.argv.slice(0, 3)).toEqual([fake.path('vllm'), 'serve', 'meta-llama/Llama-3.1-70B-Instruct']);
    expect(plan.argv.slice(7)).toEqual([
      '--served-model-name',
      'meta-llama/Llama-3.1-70B-Instruct',
      '--tensor-parallel-size',
      '2',
      '--pipeline-parallel-size',
      '1',
      '--shutdown-timeout',
      '25',
    ]);
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

  it('names its in-flight gauge and the series stall detection reads', () => {
    const engine = new VllmEngine(undefined, 'eth0');
    expect(engine.metrics).toEqual({
      runningGauges: ['vllm:num_requests_running'],
      inFlightGauges: ['vllm:num_requests_running', 'vllm:num_requests_waiting'],
      progressCounters: ['vllm:generation_tokens_total', 'vllm:prompt_tokens_total', 'vllm:request_success_total'],
    });
  });
});

describe('VllmEngine.watch and the node environment', () => {
  it('sends the key a profile gives with --api-key, --api-key= or VLLM_API_KEY, the command line winning', () => {
    const engine = new VllmEngine({ env: {} }, 'eth0');
    const keyOf = (profile: NonNullable<Parameters<typeof shard>[0]>['profile']) => {
      const spec = shard({ profile });
      return engine.watch(spec, engine.command(spec)).apiKey;
    };
    expect(keyOf({ args: ['--api-key', 'sk-a'] })).toBe('sk-a');
    expect(keyOf({ args: ['--api-key=sk-b'] })).toBe('sk-b');
    expect(keyOf({ env: { VLLM_API_KEY: 'sk-env' } })).toBe('sk-env');
    expect(keyOf({ args: ['--api-key', 'sk-arg'], env: { VLLM_API_KEY: 'sk-env' } })).toBe('sk-arg');
    expect(keyOf({})).toBe('');
    // The operator's own engines.vllm.env counts too.
    const keyed = new VllmEngine({ env: { VLLM_API_KEY: 'sk-op' } }, 'eth0');
    expect(keyed.watch(shard(), keyed.command(shard())).apiKey).toBe('sk-op');
  });

  it("sets VLLM_HOST_IP to the node's management address on every rank, which the operator may override", () => {
    const engine = new VllmEngine(undefined, 'eth0', { mgmtAddr: '10.1.2.3' });
    const leader = shard({ nnodes: 2, rank: 0, leaderAddr: '10.1.2.3', leaderPort: 5000, profile: { tensorParallelSize: 8 } });
    const follower = shard({ nnodes: 2, rank: 1, leaderAddr: '10.1.2.3', leaderPort: 5000, profile: { tensorParallelSize: 8 } });
    expect(engine.command(leader).env.VLLM_HOST_IP).toBe('10.1.2.3');
    expect(engine.command(follower).env.VLLM_HOST_IP).toBe('10.1.2.3');
    expect(new VllmEngine({ env: { VLLM_HOST_IP: '192.168.0.9' } }, 'eth0', { mgmtAddr: '10.1.2.3' }).command(leader).env.VLLM_HOST_IP).toBe('192.168.0.9');
    expect(new VllmEngine(undefined, 'eth0').command(leader).env.VLLM_HOST_IP).toBeUndefined();
  });
});

describe('VllmEngine drain on stop', () => {
  const timeoutOf = (stopGraceMs: number) => {
    const argv = new VllmEngine(undefined, 'eth0', { stopGraceMs }).command(shard()).argv;
    const i = argv.indexOf('--shutdown-timeout');
    return i === -1 ? undefined : Number(argv[i + 1]);
  };

  it('asks vLLM to drain for the stop grace less a margin, so SIGKILL never lands mid-drain', () => {
    expect(timeoutOf(30_000)).toBe(25);
    expect(timeoutOf(60_000)).toBe(55);
    expect(timeoutOf(10_000)).toBe(8);
    expect(timeoutOf(3000)).toBe(2);
    expect(timeoutOf(2000)).toBe(1);
  });

  it('emits no --shutdown-timeout when the grace leaves no room, rather than a drain the SIGKILL would cut', () => {
    expect(timeoutOf(1500)).toBeUndefined();
  });

  it('gives headless ranks the same timeout, which they wait for their workers', () => {
    const spec = shard({ nnodes: 2, rank: 1, httpPort: 0, leaderAddr: '10.0.0.1', leaderPort: 29500, profile: { tensorParallelSize: 4 } });
    const argv = new VllmEngine(undefined, 'eth0', { stopGraceMs: 20_000 }).command(spec).argv;
    expect(argv.slice(argv.indexOf('--shutdown-timeout'), argv.indexOf('--shutdown-timeout') + 2)).toEqual(['--shutdown-timeout', '16']);
  });
});

describe('VllmEngine data parallelism', () => {
  const engine = new VllmEngine({ command: [process.execPath], env: {}, extraArgs: [] }, 'eth0');
  const eight = [0, 1, 2, 3, 4, 5, 6, 7];

  it('reads the size from the profile args in every spelling argparse takes', () => {
    expect(dataParallelSize([])).toBe(1);
    expect(dataParallelSize(['--data-parallel-size', '4'])).toBe(4);
    expect(dataParallelSize(['-dp', '2', '--enforce-eager'])).toBe(2);
    expect(dataParallelSize(['--data-parallel-size=8'])).toBe(8);
    expect(dataParallelSize(['--data_parallel_size', '2', '-dp', '4'])).toBe(4);
    expect(() => dataParallelSize(['-dp', 'two'])).toThrow('profile args: --data-parallel-size "two" is not a positive integer');
    expect(() => dataParallelSize(['-dp'])).toThrow('is not a positive integer');
  });

  it('on one node passes the profile\'s flag through and counts tp × pp × dp GPUs', async () => {
    const spec = shard({ gpuIndices: eight, profile: { tensorParallelSize: 2, args: ['-dp', '4'] } });
    await expect(engine.validate(spec, context())).resolves.toBeUndefined();
    const argv = engine.command(spec).argv;
    expect(argv.slice(-2)).toEqual(['-dp', '4']);
    expect(argv).not.toContain('--data-parallel-size-local');
    await expect(engine.validate(shard({ gpuIndices: [0, 1], profile: { tensorParallelSize: 2, args: ['-dp', '4'] } }), context())).rejects.toThrow(
      'tensor_parallel_size 2 × pipeline_parallel_size 1 × data_parallel_size 4 = 8 does not match 2 GPUs × 1 node = 2',
    );
  });

  it('over two nodes runs half the DP ranks on each, rank 1 headless from its start rank, no --nnodes', () => {
    const on = (rank: number) =>
      engine.command(
        shard({
          nnodes: 2,
          rank,
          gpuIndices: eight,
          httpPort: rank === 0 ? 8000 : 0,
          leaderAddr: '10.0.0.1',
          leaderPort: 13345,
          profile: { tensorParallelSize: 2, args: ['--data-parallel-size', '8'] },
        }),
      ).argv;
    const rank0 = on(0);
    expect(rank0).not.toContain('--nnodes');
    expect(rank0.slice(rank0.indexOf('--data-parallel-size-local'), -2)).toEqual([
      '--data-parallel-size-local',
      '4',
      '--data-parallel-address',
      '10.0.0.1',
      '--data-parallel-rpc-port',
      '13345',
    ]);
    const rank1 = on(1);
    expect(rank1).not.toContain('--port');
    expect(rank1.slice(rank1.indexOf('--data-parallel-size-local'), -2)).toEqual([
      '--data-parallel-size-local',
      '4',
      '--data-parallel-start-rank',
      '4',
      '--data-parallel-address',
      '10.0.0.1',
      '--data-parallel-rpc-port',
      '13345',
      '--headless',
    ]);
  });

  it('refuses a DP size that does not divide over the nodes, before launch', async () => {
    const spec = shard({ nnodes: 2, rank: 0, gpuIndices: [0, 1, 2], leaderAddr: '10.0.0.1', leaderPort: 13345, profile: { tensorParallelSize: 2, args: ['-dp', '3'] } });
    await expect(engine.validate(spec, context())).rejects.toThrow('shard s1: --data-parallel-size 3 does not divide over 2 nodes; use a multiple of 2');
    await expect(engine.validate(shard({ profile: { args: ['-dp', '0'] } }), context())).rejects.toThrow('"0" is not a positive integer');
  });

  it('runs one API server under DP, where vLLM would run one per rank and cut every stream on a stop (review §3 N2); none on a headless rank', () => {
    const argv = (spec: ReturnType<typeof shard>) => engine.command(spec).argv;
    const single = argv(shard({ gpuIndices: [0, 1], profile: { tensorParallelSize: 1, args: ['-dp', '2'] } }));
    expect(single.slice(single.indexOf('--api-server-count'), single.indexOf('--api-server-count') + 2)).toEqual(['--api-server-count', '1']);
    expect(argv(shard({ gpuIndices: [0, 1], profile: { tensorParallelSize: 2 } }))).not.toContain('--api-server-count');
    const on = (rank: number) =>
      argv(shard({ nnodes: 2, rank, gpuIndices: [0, 1], httpPort: rank === 0 ? 8000 : 0, leaderAddr: '10.0.0.1', leaderPort: 13345, profile: { tensorParallelSize: 1, args: ['-dp', '4'] } }));
    expect(on(0)).toContain('--api-server-count');
    expect(on(1)).not.toContain('--api-server-count');
  });

  it('refuses the DP launch modes and an API-server count from a profile with one line, unless engines.vllm.allowed_args lists them (review §3 N12)', async () => {
    const dp2 = (args: string[]) => shard({ gpuIndices: [0, 1], profile: { tensorParallelSize: 1, args: ['-dp', '2', ...args] } });
    for (const [args, flag] of [
      [['-asc', '2'], '--api-server-count'],
      [['--api_server_count=2'], '--api-server-count'],
      [['-dpm'], '--data-parallel-multi-port-external-lb'],
      [['--data-parallel-supervisor-port', '9300'], '--data-parallel-supervisor-port'],
      [['-dph'], '--data-parallel-hybrid-lb'],
      [['--data-parallel-external-lb'], '--data-parallel-external-lb'],
    ] as const) {
      const refusal = engine.validate(dp2([...args]), context());
      await expect(refusal).rejects.toThrow(new RegExp(`^shard s1: profile args set .*${flag}.*; remove it, or list ${flag} in engines\\.vllm\\.allowed_args to allow it$`));
    }
    await expect(engine.validate(dp2([]), context())).resolves.toBeUndefined();
    const allowing = new VllmEngine({ command: [process.execPath], env: {}, extraArgs: [], allowedArgs: ['--api-server-count'] }, 'eth0');
    const spec = dp2(['-asc', '2']);
    await expect(allowing.validate(spec, context())).resolves.toBeUndefined();
    // The operator's choice comes after the agent's 1, and argparse takes the last.
    expect(allowing.command(spec).argv.slice(-2)).toEqual(['-asc', '2']);
  });
});
