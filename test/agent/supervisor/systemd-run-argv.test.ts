import { describe, expect, it } from 'vitest';
import { buildSystemdRunArgv, environmentFileText, systemdUnitName } from '../../../src/agent/supervisor/systemd-run-argv.js';

describe('buildSystemdRunArgv', () => {
  it('runs the engine argv as a transient unit in llmgw.slice, without a shell, its environment in a file', () => {
    const argv = buildSystemdRunArgv(
      'r1-s0',
      { argv: ['/opt/vllm/bin/vllm', 'serve', 'm; rm -rf /'] },
      '/var/log/llmgw/shards/r1-s0.log',
      '/var/lib/llmgw/shards/r1-s0.env',
    );
    expect(argv).toEqual([
      'systemd-run',
      '--unit',
      'llmgw-shard-r1-s0.service',
      '--slice',
      'llmgw.slice',
      '--collect',
      '--property=KillMode=control-group',
      '--property=StandardOutput=append:/var/log/llmgw/shards/r1-s0.log',
      '--property=StandardError=append:/var/log/llmgw/shards/r1-s0.log',
      '--property=EnvironmentFile=/var/lib/llmgw/shards/r1-s0.env',
      '--',
      '/opt/vllm/bin/vllm',
      'serve',
      'm; rm -rf /',
    ]);
  });
});

describe('systemdUnitName', () => {
  it('always carries the .service suffix, so an id ending in .service names the same unit everywhere (security review, finding 15)', () => {
    expect(systemdUnitName('x.service')).toBe('llmgw-shard-x.service.service');
    expect(systemdUnitName('a-b_c.1')).toBe('llmgw-shard-a-b_c.1.service');
  });

  it('escapes what a unit name cannot hold as systemd-escape does', () => {
    expect(systemdUnitName('a b/é')).toBe('llmgw-shard-a\\x20b\\x2f\\xc3\\xa9.service');
  });
});

describe('environmentFileText', () => {
  it('quotes every value, escaping what systemd unescapes inside double quotes', () => {
    expect(environmentFileText({ A: 'x y', B: 'a"b\\c$d`e', C: '' })).toBe('A="x y"\nB="a\\"b\\\\c\\$d\\`e"\nC=""\n');
  });

  it('refuses a value with a line break naming the variable, never showing the value', () => {
    expect(() => environmentFileText({ HF_TOKEN: 'hf_secret\nEVIL=1' })).toThrow(
      'environment variable HF_TOKEN holds a line break or NUL, which a systemd unit cannot be given; refused',
    );
    expect(() => environmentFileText({ 'A=B': 'x' })).toThrow(/not a valid name/);
  });
});
