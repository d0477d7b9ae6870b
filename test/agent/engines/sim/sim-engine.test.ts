import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { networkInterfaces } from 'node:os';
import { describe, expect, it } from 'vitest';
import { LLMGW_BIN, SimEngine } from '../../../../src/agent/engines/sim/sim-engine.js';
import { freePort, groupMembers, until } from '../../../helpers/engine-processes.js';
import { BIN } from '../../../helpers/run-cli.js';
import { context, shard } from '../engine-fixtures.js';

describe('SimEngine', () => {
  it('runs this package\'s binary as `sim engine` on all interfaces, as vLLM binds', () => {
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
      '0.0.0.0',
      '--port',
      '8000',
      '--model',
      'llama-70b',
      '--fail-after',
      '5s',
      '--load-time',
      '1s',
    ]);
    expect(plan.env).toEqual({ CUDA_VISIBLE_DEVICES: '0,1', CUDA_DEVICE_ORDER: 'PCI_BUS_ID', NCCL_SOCKET_IFNAME: '=lo', GLOO_SOCKET_IFNAME: 'lo', SIM: '1' });
  });

  it('runs non-zero ranks of a multi-node shard as --worker, every rank at the gang\'s rendezvous (rank 0 holds it)', () => {
    const engine = new SimEngine(undefined, 'lo');
    const spec = shard({ nnodes: 2, rank: 1, leaderAddr: '127.0.0.1', leaderPort: 29500, profile: { tensorParallelSize: 4 } });
    expect(engine.servesHttp(spec)).toBe(false);
    expect(engine.command(spec).argv.slice(2)).toEqual(['sim', 'engine', '--host', '0.0.0.0', '--port', '8000', '--model', 'llama-70b', '--worker', '--rendezvous', '127.0.0.1:29500']);
    const leader = shard({ nnodes: 2, rank: 0, leaderAddr: 'fd00::1', leaderPort: 29500, profile: { tensorParallelSize: 4 } });
    expect(engine.command(leader).argv.slice(-2)).toEqual(['--rendezvous', '[fd00::1]:29500']);
  });

  it('validates GPUs against the inventory like a real engine', async () => {
    await expect(new SimEngine(undefined, 'lo').validate(shard({ gpuIndices: [8, 9] }), context())).rejects.toThrow(
      'GPU 8 does not exist on this node (GPUs: 0, 1, 2, 3, 4, 5, 6, 7)',
    );
    await expect(new SimEngine(undefined, 'lo').validate(shard(), context())).resolves.toBeUndefined();
  });

  // The control plane publishes a replica as http://<mgmt_addr>:<port>.
  const mgmtAddr = Object.values(networkInterfaces())
    .flat()
    .find((a) => a && a.family === 'IPv4' && !a.internal)?.address;

  it.skipIf(mgmtAddr === undefined)('launched as the agent launches it, answers on this node\'s non-loopback address', async () => {
    const port = await freePort();
    const plan = new SimEngine(undefined, 'lo').command(shard({ httpPort: port, profile: { engine: 'sim', servedModelName: 'm' } }));
    const child = spawn(plan.argv[0] as string, plan.argv.slice(1), { detached: true, stdio: 'ignore', env: { ...process.env, ...plan.env } });
    try {
      await until(async () => (await fetch(`http://${mgmtAddr}:${port}/health`).catch(() => undefined))?.status === 200, `the sim on ${mgmtAddr}:${port}`);
      const models = (await (await fetch(`http://${mgmtAddr}:${port}/v1/models`)).json()) as { data: { id: string }[] };
      expect(models.data.map((m) => m.id)).toEqual(['m']);
    } finally {
      process.kill(-(child.pid as number), 'SIGKILL');
      await until(() => groupMembers(child.pid as number).length === 0, 'the sim to be gone', 10_000);
    }
  });
});
