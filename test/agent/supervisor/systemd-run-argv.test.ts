import { describe, expect, it } from 'vitest';
import { buildSystemdRunArgv, systemdUnitName } from '../../../src/agent/supervisor/systemd-run-argv.js';

describe('buildSystemdRunArgv', () => {
  it('runs the engine argv as a transient unit in llmgw.slice, without a shell, keeping its status after it ends', () => {
    const argv = buildSystemdRunArgv(
      'r1-s0',
      { argv: ['/opt/vllm/bin/vllm', 'serve', 'm; rm -rf /'], env: { CUDA_VISIBLE_DEVICES: '0,1', A: 'x y' } },
      '/var/log/llmgw/shards/r1-s0.log',
      { properties: { MemoryMax: '400G', CPUWeight: '200' }, stopGraceMs: 30_000 },
    );
    expect(argv).toEqual([
      'systemd-run',
      '--unit',
      'llmgw-shard-r1-s0.service',
      '--slice',
      'llmgw.slice',
      '--property=KillMode=control-group',
      '--property=RemainAfterExit=yes',
      '--property=TimeoutStopSec=30000ms',
      '--property=StandardOutput=append:/var/log/llmgw/shards/r1-s0.log',
      '--property=StandardError=append:/var/log/llmgw/shards/r1-s0.log',
      '--property=MemoryMax=400G',
      '--property=CPUWeight=200',
      '--setenv=CUDA_VISIBLE_DEVICES=0,1',
      '--setenv=A=x y',
      '--',
      '/opt/vllm/bin/vllm',
      'serve',
      'm; rm -rf /',
    ]);
  });

  it('always names a service, even for a shard id that ends like another unit type', () => {
    expect(systemdUnitName('x.socket')).toBe('llmgw-shard-x.socket.service');
  });
});
