import { existsSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { LLMGW_BIN, SimEngine } from '../../../src/agent/engines/sim-engine.js';
import { BIN } from '../../helpers/run-cli.js';
import { context, shard } from './engine-fixtures.js';

describe('SimEngine', () => {
  it('runs this package\'s binary as `sim engine` on 127.0.0.1', () => {
    expect(LLMGW_BIN).toBe(BIN);
    expect(existsSync(LLMGW_BIN)).toBe(true);
    const plan = new SimEngine({ command: [], env: { SIM: '1' }, extraArgs: ['--load-time', '1s'] }, 'lo').command(
      shard({ profile: { engine: 'sim', args: ['--fail-after', '5s'] } }),
    );
    expect(plan.argv).toEqual([
      process.execPath,
      BIN,
      'sim',
      'engine',
      '--host',
      '127.0.0.1',
      '--port',
      '8000',
      '--model',
      'llama-70b',
      '--fail-after',
      '5s',
      '--load-time',
      '1s',
    ]);
    expect(plan.env).toEqual({ CUDA_VISIBLE_DEVICES: '0,1', CUDA_DEVICE_ORDER: 'PCI_BUS_ID', NCCL_SOCKET_IFNAME: 'lo', GLOO_SOCKET_IFNAME: 'lo', SIM: '1' });
  });

  it('runs non-zero ranks of a multi-node shard as --worker', () => {
    const engine = new SimEngine(undefined, 'lo');
    const spec = shard({ nnodes: 2, rank: 1, leaderAddr: '127.0.0.1', leaderPort: 29500, profile: { tensorParallelSize: 4 } });
    expect(engine.servesHttp(spec)).toBe(false);
    expect(engine.command(spec).argv.slice(2)).toEqual(['sim', 'engine', '--host', '127.0.0.1', '--port', '8000', '--model', 'llama-70b', '--worker']);
  });

  it('validates GPUs against the inventory like a real engine', async () => {
    await expect(new SimEngine(undefined, 'lo').validate(shard({ gpuIndices: [8, 9] }), context())).rejects.toThrow(
      'GPU 8 does not exist on this node (GPUs: 0, 1, 2, 3, 4, 5, 6, 7)',
    );
    await expect(new SimEngine(undefined, 'lo').validate(shard(), context())).resolves.toBeUndefined();
  });
});
