import { describe, expect, it } from 'vitest';
import { resolveExecutableSync } from '../../../src/agent/engines/resolve-executable.js';
import { SglangEngine } from '../../../src/agent/engines/sglang-engine.js';
import { shard } from './engine-fixtures.js';

describe('SglangEngine.command', () => {
  it('builds sglang.launch_server with --model-path, --tp-size and --pp-size', () => {
    const plan = new SglangEngine({ command: [], env: { SGLANG_X: '1' }, extraArgs: ['--mem-fraction-static', '0.85'] }, 'eth0').command(
      shard({ gpuIndices: [0, 1], profile: { args: ['--trust-remote-code'] } }),
    );
    expect(plan.argv).toEqual([
      resolveExecutableSync('python3'),
      '-m',
      'sglang.launch_server',
      '--model-path',
      'meta-llama/Llama-3.1-70B-Instruct',
      '--host',
      '0.0.0.0',
      '--port',
      '8000',
      '--served-model-name',
      'llama-70b',
      '--tp-size',
      '2',
      '--pp-size',
      '1',
      '--enable-metrics',
      '--trust-remote-code',
      '--mem-fraction-static',
      '0.85',
    ]);
    expect(plan.env).toEqual({ CUDA_VISIBLE_DEVICES: '0,1', CUDA_DEVICE_ORDER: 'PCI_BUS_ID', NCCL_SOCKET_IFNAME: 'eth0', GLOO_SOCKET_IFNAME: 'eth0', SGLANG_X: '1' });
  });

  it('joins a multi-node shard through --dist-init-addr, bracketing IPv6 leaders', () => {
    const engine = new SglangEngine(undefined, 'eth0');
    const v4 = engine.command(shard({ nnodes: 2, rank: 1, leaderAddr: '10.0.0.1', leaderPort: 5000, profile: { tensorParallelSize: 4 } }));
    expect(v4.argv.slice(-6)).toEqual(['--nnodes', '2', '--node-rank', '1', '--dist-init-addr', '10.0.0.1:5000']);
    expect(v4.argv).not.toContain('--port');
    const v6 = engine.command(shard({ nnodes: 2, rank: 0, leaderAddr: 'fd00::1', leaderPort: 5000, profile: { tensorParallelSize: 4 } }));
    expect(v6.argv.at(-1)).toBe('[fd00::1]:5000');
    expect(v6.argv).toContain('--port');
  });

  it('names its in-flight gauge and the series stall detection reads', () => {
    const engine = new SglangEngine(undefined, 'eth0');
    expect(engine.metrics.requestsRunning).toBe('sglang:num_running_reqs');
    expect(engine.metrics).toEqual({ requestsRunning: 'sglang:num_running_reqs', generationTokens: 'sglang:generation_tokens_total' });
  });

  it('turns metrics on for every rank and never skips the warmup that installs its SIGTERM drain', () => {
    const engine = new SglangEngine(undefined, 'eth0');
    for (const rank of [0, 1]) {
      const argv = engine.command(shard({ nnodes: 2, rank, leaderAddr: '10.0.0.1', leaderPort: 5000, profile: { tensorParallelSize: 4 } })).argv;
      expect(argv).toContain('--enable-metrics');
      expect(argv).not.toContain('--skip-server-warmup');
    }
  });
});
