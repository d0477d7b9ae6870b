import { describe, expect, it } from 'vitest';
import { buildSystemdRunArgv } from '../../../src/agent/supervisor/systemd-run-argv.js';

describe('buildSystemdRunArgv', () => {
  it('runs the engine argv as a transient unit in llmgw.slice, without a shell', () => {
    const argv = buildSystemdRunArgv(
      'r1-s0',
      { argv: ['/opt/vllm/bin/vllm', 'serve', 'm; rm -rf /'], env: { CUDA_VISIBLE_DEVICES: '0,1', A: 'x y' } },
      '/var/log/llmgw/shards/r1-s0.log',
    );
    expect(argv).toEqual([
      'systemd-run',
      '--unit',
      'llmgw-shard-r1-s0',
      '--slice',
      'llmgw.slice',
      '--collect',
      '--property=KillMode=control-group',
      '--property=StandardOutput=append:/var/log/llmgw/shards/r1-s0.log',
      '--property=StandardError=append:/var/log/llmgw/shards/r1-s0.log',
      '--setenv=CUDA_VISIBLE_DEVICES=0,1',
      '--setenv=A=x y',
      '--',
      '/opt/vllm/bin/vllm',
      'serve',
      'm; rm -rf /',
    ]);
  });
});
