import { describe, expect, it } from 'vitest';
import { buildSystemdRunArgv, environmentFileText, literalForSystemd } from '../../../../src/agent/supervisor/launch/systemd-run-argv.js';

// biome-ignore lint/suspicious/noTemplateCurlyInString: systemd's ${VAR}, the very text under test
const BRACED = '${HF_TOKEN}';

describe('buildSystemdRunArgv', () => {
  it('runs the engine argv as a transient unit in llmgw.slice, without a shell, keeping its status after it ends, its environment in a file', () => {
    const argv = buildSystemdRunArgv(
      'r1-s0',
      { argv: ['/opt/vllm/bin/vllm', 'serve', 'm; rm -rf /'] },
      '/var/log/llmgw/shards/r1-s0.log',
      '/var/lib/llmgw/shards/r1-s0.env',
      { properties: { MemoryMax: '400G', CPUWeight: '200' }, stopGraceMs: 30_000 },
    );
    expect(argv).toEqual([
      'systemd-run',
      '--unit',
      'llmgw-shard-r1-s0.service',
      '--slice',
      'llmgw.slice',
      '--property=KillMode=mixed',
      '--property=RemainAfterExit=yes',
      '--property=TimeoutStopSec=30000ms',
      '--property=StandardOutput=append:/var/log/llmgw/shards/r1-s0.log',
      '--property=StandardError=append:/var/log/llmgw/shards/r1-s0.log',
      '--property=MemoryMax=400G',
      '--property=CPUWeight=200',
      '--property=EnvironmentFile=/var/lib/llmgw/shards/r1-s0.env',
      '--',
      '/opt/vllm/bin/vllm',
      'serve',
      'm; rm -rf /',
    ]);
  });

  it('doubles every $ in the engine arguments, which systemd would expand, and leaves % and the executable as they are (security review 2, N4)', () => {
    const argv = buildSystemdRunArgv('r1-s0', { argv: ['/opt/a$b/vllm', '--api-key', BRACED, 'a$HF_TOKEN', '$HF_TOKEN', '{"x":"$$"}', '%n%%', '$'] }, '/l', '/e');
    expect(argv.slice(argv.indexOf('--') + 1)).toEqual(['/opt/a$b/vllm', '--api-key', `$${BRACED}`, 'a$$HF_TOKEN', '$$HF_TOKEN', '{"x":"$$$$"}', '%n%%', '$$']);
  });
});

describe('literalForSystemd', () => {
  it('gives systemd an argument it turns back into the same bytes: $ as $$, nothing else touched', () => {
    expect(literalForSystemd(`${BRACED}$B$$C $`)).toBe(`$${BRACED}$$B$$$$C $$`);
    expect(literalForSystemd('no dollar; %h "q" \\')).toBe('no dollar; %h "q" \\');
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
