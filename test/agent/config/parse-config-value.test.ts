import { describe, expect, it } from 'vitest';
import { parseConfigValue } from '../../../src/agent/config/parse-config-value.js';
import type { KeySpec, KeyType } from '../../../src/agent/config/config-keys.js';
import type { RawValue, ValueSource } from '../../../src/agent/config/value-source.js';
import { LlmgwError } from '../../../src/lib/errors.js';

const FILE: ValueSource = { kind: 'file', path: '/etc/llmgw/agent.yaml', line: 7 };
const ENV: ValueSource = { kind: 'env', name: 'LLMGW_X' };

function key(type: KeyType, over: Partial<KeySpec> = {}): KeySpec {
  return { key: 'section.thing', type, doc: '', ...over };
}

const parse = (spec: KeySpec, value: unknown, source: ValueSource = FILE) => parseConfigValue(spec, { value, source } as RawValue);

/** The one-line config error parsing gives, checked to be one (kind config, exit 78). */
function errorOf(spec: KeySpec, value: unknown, source: ValueSource = FILE): string {
  try {
    parse(spec, value, source);
  } catch (err) {
    expect(err).toBeInstanceOf(LlmgwError);
    expect((err as LlmgwError).kind).toBe('config');
    expect((err as LlmgwError).exitCode).toBe(78);
    const message = (err as Error).message;
    expect(message).not.toContain('\n');
    return message;
  }
  throw new Error(`${JSON.stringify(value)} was accepted as ${spec.type}`);
}

describe('parseConfigValue: errors', () => {
  it('name the key first and the source last, for each kind of source', () => {
    expect(errorOf(key('duration'), 'soon')).toBe(
      'section.thing: "soon" is not a duration; write it like 500ms, 5s, 2m or 1h (/etc/llmgw/agent.yaml:7)',
    );
    expect(errorOf(key('bool'), 'maybe', ENV)).toBe('section.thing: must be true or false, got string "maybe" (env LLMGW_X)');
    expect(errorOf(key('count'), 'x', { kind: 'flag', name: 'keep' })).toMatch(/^section\.thing: .* \(flag --keep\)$/);
    expect(errorOf(key('count'), 'x', { kind: 'default' })).toMatch(/ \(default\)$/);
  });
});

describe('parseConfigValue: string', () => {
  it('takes text, a number as its text, and empty as ""', () => {
    expect(parse(key('string'), 'eth0')).toBe('eth0');
    expect(parse(key('string'), 8080)).toBe('8080');
    expect(parse(key('string'), null)).toBe('');
  });

  it('refuses a list or map', () => {
    expect(errorOf(key('string'), ['a'])).toBe('section.thing: must be a string, got a list (/etc/llmgw/agent.yaml:7)');
    expect(errorOf(key('string'), { a: 1 })).toContain('must be a string, got a map');
  });
});

describe('parseConfigValue: enum', () => {
  const spec = key('enum', { values: ['connect', 'grpc'] });
  it('takes one of its values and refuses others, listing them', () => {
    expect(parse(spec, 'grpc')).toBe('grpc');
    expect(errorOf(spec, 'http')).toBe('section.thing: must be one of connect, grpc, got string "http" (/etc/llmgw/agent.yaml:7)');
    expect(errorOf(spec, 1)).toContain('got number 1');
  });
});

describe('parseConfigValue: duration', () => {
  it.each([
    ['500ms', 500],
    ['5s', 5000],
    ['2m', 120_000],
    ['1h30m', 5_400_000],
    ['0s', 0],
    ['0', 0],
  ])('reads %s as %d ms', (text, ms) => {
    expect(parse(key('duration'), text)).toBe(ms);
  });

  it('refuses a bare number in YAML, suggesting seconds', () => {
    expect(errorOf(key('duration'), 30)).toBe(
      'section.thing: must be a duration string such as 500ms, 5s or 2m, got number 30 (write 30s?) (/etc/llmgw/agent.yaml:7)',
    );
  });

  it('refuses a list without the seconds hint', () => {
    const m = errorOf(key('duration'), ['5s']);
    expect(m).toContain('got a list');
    expect(m).not.toContain('write');
  });

  it.each(['5', '5 days', '-1s', ''])('refuses %j as text', (text) => {
    expect(errorOf(key('duration'), text)).toContain(`${JSON.stringify(text)} is not a duration`);
  });
});

describe('parseConfigValue: bytes', () => {
  it('reads numbers and binary and decimal units', () => {
    expect(parse(key('bytes'), 67108864)).toBe(67108864);
    expect(parse(key('bytes'), '64MiB')).toBe(64 * 1024 * 1024);
    expect(parse(key('bytes'), '1GiB')).toBe(1024 ** 3);
    expect(parse(key('bytes'), '2GB')).toBe(2e9);
  });

  it('leaves an optional size (default "") unset when empty', () => {
    const optional = key('bytes', { default: '' });
    expect(parse(optional, '')).toBeUndefined();
    expect(parse(optional, null)).toBeUndefined();
    expect(parse(optional, '500GiB')).toBe(500 * 1024 ** 3);
  });

  it('refuses empty for a size that has a default, and zero, and junk', () => {
    const required = key('bytes', { default: '64MiB' });
    expect(errorOf(required, '')).toBe('section.thing: string "" is not a size; write it like 67108864, 64MiB or 1GiB (/etc/llmgw/agent.yaml:7)');
    expect(errorOf(required, 0)).toContain('number 0 is not a size');
    expect(errorOf(required, '0MiB')).toContain('is not a size');
    expect(errorOf(required, '64 parsecs')).toContain('is not a size');
    expect(errorOf(required, -5)).toContain('is not a size');
    expect(errorOf(required, true)).toContain('boolean true is not a size');
  });
});

describe('parseConfigValue: count', () => {
  it('takes whole numbers of 0 or more, as numbers or digit text', () => {
    expect(parse(key('count'), 0)).toBe(0);
    expect(parse(key('count'), 16)).toBe(16);
    expect(parse(key('count'), '3')).toBe(3);
    expect(parse(key('count'), ' 4 ')).toBe(4);
  });

  it.each([-1, 1.5, '1.5', '-2', 'three', '', 2 ** 53])('refuses %j', (v) => {
    expect(errorOf(key('count'), v)).toContain('must be a whole number of 0 or more');
  });
});

describe('parseConfigValue: share', () => {
  it('reads a percentage or a fraction between 0 and 1', () => {
    expect(parse(key('share'), '5%')).toBeCloseTo(0.05);
    expect(parse(key('share'), ' 12.5 % ')).toBeCloseTo(0.125);
    expect(parse(key('share'), '0%')).toBe(0);
    expect(parse(key('share'), '100%')).toBe(1);
    expect(parse(key('share'), 0.05)).toBe(0.05);
    expect(parse(key('share'), '0.05', ENV)).toBe(0.05);
  });

  it('refuses a bare 5 rather than read it as 500%', () => {
    expect(errorOf(key('share'), 5)).toBe('section.thing: number 5 is not a share; write it like 5% or 0.05 (between 0 and 1) (/etc/llmgw/agent.yaml:7)');
    expect(errorOf(key('share'), '5', ENV)).toContain('is not a share');
    expect(errorOf(key('share'), '101%')).toContain('is not a share');
  });

  it('refuses a fraction written as a YAML string, which only text sources may spell', () => {
    expect(errorOf(key('share'), '0.05')).toContain('string "0.05" is not a share');
  });
});

describe('parseConfigValue: bool', () => {
  it('takes YAML booleans from a file but not their spellings as text', () => {
    expect(parse(key('bool'), true)).toBe(true);
    expect(parse(key('bool'), false)).toBe(false);
    expect(errorOf(key('bool'), 'true')).toContain('must be true or false, got string "true"');
  });

  it.each([
    ['true', true],
    ['YES', true],
    ['1', true],
    ['false', false],
    ['No', false],
    ['0', false],
  ])('reads %j from the environment as %s', (text, b) => {
    expect(parse(key('bool'), text, ENV)).toBe(b);
  });

  it('refuses anything else from the environment', () => {
    expect(errorOf(key('bool'), 'on', ENV)).toBe('section.thing: must be true or false, got string "on" (env LLMGW_X)');
  });
});

describe('parseConfigValue: labels', () => {
  it('reads a YAML map, turning scalar values into text', () => {
    expect(parse(key('labels'), { rack: 'r12', slot: 3, gpu: true })).toEqual({ rack: 'r12', slot: '3', gpu: 'true' });
    expect(parse(key('labels'), null)).toEqual({});
    expect(parse(key('labels'), '')).toEqual({});
  });

  it('reads k=v,k2=v2 from the environment, trimming and skipping empty parts', () => {
    expect(parse(key('labels'), ' rack = r12 ,, zone=a=b ', ENV)).toEqual({ rack: 'r12', zone: 'a=b' });
  });

  it('refuses a pair without a key, quoting it', () => {
    expect(errorOf(key('labels'), 'rack=r12,oops', ENV)).toBe('section.thing: "oops" is not key=value (env LLMGW_X)');
    expect(errorOf(key('labels'), '=v', ENV)).toContain('"=v" is not key=value');
  });

  it('refuses pairs as text in YAML, a list, and a nested value naming its label', () => {
    expect(errorOf(key('labels'), 'rack=r12')).toContain('must be a map of strings, got string "rack=r12"');
    expect(errorOf(key('labels'), ['a'])).toContain('must be a map of strings, got a list');
    expect(errorOf(key('labels'), { rack: { row: 1 } })).toBe('section.thing: label rack must be a string, got a map (/etc/llmgw/agent.yaml:7)');
  });
});

describe('parseConfigValue: fabrics', () => {
  it('reads a YAML list of {hca, fabric}', () => {
    expect(
      parse(key('fabrics'), [
        { hca: 'mlx5_0', fabric: 'fabA' },
        { hca: 'mlx5_1', fabric: 'fabB' },
      ]),
    ).toEqual([
      { hca: 'mlx5_0', fabric: 'fabA' },
      { hca: 'mlx5_1', fabric: 'fabB' },
    ]);
    expect(parse(key('fabrics'), null)).toEqual([]);
  });

  it('reads hca=fabric pairs from the environment', () => {
    expect(parse(key('fabrics'), 'mlx5_0=fabA,mlx5_1=fabB', ENV)).toEqual([
      { hca: 'mlx5_0', fabric: 'fabA' },
      { hca: 'mlx5_1', fabric: 'fabB' },
    ]);
  });

  it('refuses a map, an incomplete item naming its index, and an unknown key', () => {
    expect(errorOf(key('fabrics'), { mlx5_0: 'fabA' })).toContain('must be a list of {hca, fabric}, got a map');
    expect(errorOf(key('fabrics'), [{ hca: 'mlx5_0', fabric: 'a' }, { hca: 'mlx5_1' }])).toBe(
      'section.thing: item 1 must be {hca: <name>, fabric: <name>}, got {"hca":"mlx5_1"} (/etc/llmgw/agent.yaml:7)',
    );
    expect(errorOf(key('fabrics'), [{ hca: '', fabric: 'a' }])).toContain('item 0 must be');
    expect(errorOf(key('fabrics'), [{ hca: 'mlx5_0', fabric: 'a', port: 1 }])).toBe(
      'section.thing: item 0 has unknown key port; only hca and fabric are allowed (/etc/llmgw/agent.yaml:7)',
    );
  });
});

describe('parseConfigValue: engines', () => {
  it('is empty when empty, and refuses a non-map naming the engines', () => {
    expect(parse(key('engines'), null)).toEqual({});
    expect(parse(key('engines'), '')).toEqual({});
    expect(errorOf(key('engines'), ['vllm'])).toMatch(/^section\.thing: must be a map from engine name \(vllm, sglang, sim\) to settings, got a list/);
  });

  it('hands a map to the engines parser, whose errors name the key and source too', () => {
    const parsed = parse(key('engines'), { sim: { enabled: true } }) as Record<string, { enabled?: boolean }>;
    expect(Object.keys(parsed)).toEqual(['sim']);
    expect(parsed.sim?.enabled).toBe(true);
    expect(errorOf(key('engines'), { vlm: {} })).toBe('section.thing: unknown engine vlm; did you mean vllm? (/etc/llmgw/agent.yaml:7)');
  });
});
