import { describe, expect, it } from 'vitest';
import { resolveExecutableSync } from '../../../../src/agent/engines/resolve-executable.js';
import { engineAdminApiKey } from '../../../../src/agent/engines/engine-api-key.js';
import { SglangEngine } from '../../../../src/agent/engines/sglang/sglang-engine.js';
import { shard } from '../engine-fixtures.js';

describe('SglangEngine.watch', () => {
  it('probes the API rank with /health_generate under a limit past its 1 s sleep, and a worker rank on its own /health', () => {
    const engine = new SglangEngine(undefined, 'eth0');
    const api = shard({ profile: { args: ['--api-key', 'sk-1'] } });
    expect(engine.watch(api, engine.command(api))).toMatchObject({
      healthPort: 8000,
      healthPath: '/health_generate',
      probeTimeoutMs: 5000,
      readiness: 'model-listed',
      apiKey: 'sk-1',
      adminApiKey: '',
    });
    const worker = shard({ nnodes: 2, rank: 1, leaderAddr: '10.0.0.1', leaderPort: 5000, httpPort: 31001, profile: { tensorParallelSize: 4 } });
    expect(engine.watch(worker, engine.command(worker))).toEqual({
      healthPort: 31001,
      healthPath: '/health',
      probeTimeoutMs: 5000,
      readiness: 'health',
      runningGauges: [],
      inFlightGauges: [],
      progressCounters: [],
      apiKey: '',
      adminApiKey: '',
    });
  });

  it("carries --admin-api-key from the profile args or the operator's extra_args, beside --api-key, for the pause and memory routes", () => {
    const engine = new SglangEngine(undefined, 'eth0');
    const both = shard({ profile: { args: ['--api-key', 'sk-1', '--admin-api-key', 'adm-1'] } });
    expect(engine.watch(both, engine.command(both))).toMatchObject({ apiKey: 'sk-1', adminApiKey: 'adm-1' });
    const operator = new SglangEngine({ extraArgs: ['--admin-api-key=adm-2'] }, 'eth0');
    const plain = shard();
    expect(operator.watch(plain, operator.command(plain))).toMatchObject({ apiKey: '', adminApiKey: 'adm-2' });
    // A worker rank serves no admin route.
    const worker = shard({ nnodes: 2, rank: 1, leaderAddr: '10.0.0.1', leaderPort: 5000, httpPort: 31001, profile: { tensorParallelSize: 4, args: ['--admin-api-key', 'adm-1'] } });
    expect(operator.watch(worker, operator.command(worker)).adminApiKey).toBe('');
  });
});

describe('engineAdminApiKey', () => {
  it('reads --admin-api-key K and --admin-api-key=K, the last one winning as in argparse; none is empty', () => {
    expect(engineAdminApiKey(['--model-path', 'm', '--admin-api-key', 'a'])).toBe('a');
    expect(engineAdminApiKey(['--admin-api-key=a', '--admin-api-key', 'b'])).toBe('b');
    expect(engineAdminApiKey(['--admin-api-key', 'a', '--admin-api-key=c'])).toBe('c');
    expect(engineAdminApiKey(['--api-key', 'k'])).toBe('');
    expect(engineAdminApiKey([])).toBe('');
    // Not the API key's flag, nor a flag of the same prefix.
    expect(engineAdminApiKey(['--admin-api-keys', 'x', '--api-key=k'])).toBe('');
  });
});

describe('SglangEngine.command', () => {
  it("sets SGLANG_HOST_IP to the node's management address, under the operator's own", () => {
    const spec = shard({ nnodes: 2, rank: 1, leaderAddr: '10.0.0.1', leaderPort: 5000, profile: { tensorParallelSize: 4 } });
    expect(new SglangEngine(undefined, 'eth0', { mgmtAddr: '10.0.0.7' }).command(spec).env.SGLANG_HOST_IP).toBe('10.0.0.7');
    expect(new SglangEngine({ env: { SGLANG_HOST_IP: '10.9.9.9' } }, 'eth0', { mgmtAddr: '10.0.0.7' }).command(spec).env.SGLANG_HOST_IP).toBe('10.9.9.9');
    expect(new SglangEngine(undefined, 'eth0').command(spec).env.SGLANG_HOST_IP).toBeUndefined();
  });

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
    expect(plan.env).toEqual({ CUDA_VISIBLE_DEVICES: '0,1', CUDA_DEVICE_ORDER: 'PCI_BUS_ID', NCCL_SOCKET_IFNAME: '=eth0', GLOO_SOCKET_IFNAME: 'eth0', SGLANG_X: '1' });
  });

  it('joins a multi-node shard through --dist-init-addr, bracketing IPv6 leaders', () => {
    const engine = new SglangEngine(undefined, 'eth0');
    const v4 = engine.command(shard({ nnodes: 2, rank: 1, leaderAddr: '10.0.0.1', leaderPort: 5000, profile: { tensorParallelSize: 4 } }));
    expect(v4.argv.slice(-6)).toEqual(['--nnodes', '2', '--node-rank', '1', '--dist-init-addr', '10.0.0.1:5000']);
    // A worker rank serves /health on its own port, on loopback: given none, it took 127.0.0.1:30000 and two worker ranks collided (review §0 #3).
    const at = v4.argv.indexOf('--host');
    expect(v4.argv.slice(at, at + 4)).toEqual(['--host', '127.0.0.1', '--port', '8000']);
    const v6 = engine.command(shard({ nnodes: 2, rank: 0, leaderAddr: 'fd00::1', leaderPort: 5000, profile: { tensorParallelSize: 4 } }));
    expect(v6.argv.at(-1)).toBe('[fd00::1]:5000');
    expect(v6.argv).toContain('--port');
  });

  it('names its in-flight gauge and the series stall detection reads', () => {
    const engine = new SglangEngine(undefined, 'eth0');
    // Not generation_tokens_total: it moves once per finished request (review §0 #1).
    expect(engine.metrics).toEqual({
      runningGauges: ['sglang:num_running_reqs'],
      inFlightGauges: ['sglang:num_running_reqs', 'sglang:num_queue_reqs', 'sglang:num_grammar_queue_reqs'],
      // The first is the reported token rate: decode alone (N7); progress counts every mode.
      progressCounters: ['sglang:realtime_tokens_total{mode="decode"}', 'sglang:realtime_tokens_total', 'sglang:num_requests_total'],
    });
  });

  it('starts a sleep profile with the memory saver and the weights backed up to host RAM, and owns the backup flag', () => {
    const engine = new SglangEngine(undefined, 'eth0');
    const asleep = shard();
    if (asleep.profile) asleep.profile.sleepMode = true;
    expect(engine.command(asleep).argv).toEqual(expect.arrayContaining(['--enable-memory-saver', '--enable-weights-cpu-backup']));
    const awake = engine.command(shard()).argv;
    expect(awake).not.toContain('--enable-memory-saver');
    expect(awake).not.toContain('--enable-weights-cpu-backup');
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
