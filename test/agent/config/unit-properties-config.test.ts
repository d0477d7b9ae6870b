import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { loadAgentConfig } from '../../../src/agent/config/load-agent-config.js';
import { LlmgwError } from '../../../src/lib/errors.js';

const dir = mkdtempSync(join(tmpdir(), 'llmgw-unitprops-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

let n = 0;
function load(yaml: string, env: Record<string, string> = {}) {
  const p = join(dir, `agent-${n++}.yaml`);
  writeFileSync(p, `node_id: gpu-01\nserver: http://127.0.0.1:8443\n${yaml}`);
  return loadAgentConfig({ configPath: p, env }).config;
}

function configError(yaml: string): LlmgwError {
  try {
    load(yaml);
  } catch (err) {
    expect(err).toBeInstanceOf(LlmgwError);
    expect((err as LlmgwError).exitCode).toBe(78);
    expect((err as LlmgwError).message).not.toContain('\n');
    return err as LlmgwError;
  }
  throw new Error('expected a configuration error');
}

describe('supervisor.launcher and supervisor.unit_properties', () => {
  it('defaults to auto with no unit properties', () => {
    const c = load('');
    expect(c.supervisor.launcher).toBe('auto');
    expect(c.supervisor.unitProperties).toEqual({});
  });

  it('takes resource properties from the file, and from the environment as k=v pairs', () => {
    expect(load('supervisor:\n  unit_properties:\n    MemoryMax: 400G\n    CPUWeight: 200\n').supervisor.unitProperties).toEqual({ MemoryMax: '400G', CPUWeight: '200' });
    expect(load('', { LLMGW_SUPERVISOR_UNIT_PROPERTIES: 'TasksMax=4096' }).supervisor.unitProperties).toEqual({ TasksMax: '4096' });
  });

  it('refuses a property that is not a resource limit, naming it, the allowed ones and the file', () => {
    const e = configError('supervisor:\n  unit_properties:\n    ExecStartPre: /bin/sh\n');
    expect(e.message).toMatch(/^supervisor\.unit_properties: "ExecStartPre" is not a property engine units may set/);
    expect(e.message).toContain('MemoryMax');
    expect(e.message).toContain('agent-');
  });

  it('suggests the property a misspelt one meant', () => {
    expect(configError('supervisor:\n  unit_properties:\n    MemroyMax: 1G\n').message).toContain('did you mean MemoryMax?');
  });

  it('refuses a value with a newline, which systemd would read as a second assignment', () => {
    expect(configError('supervisor:\n  unit_properties:\n    MemoryMax: "1G\\nUser=root"\n').message).toContain('without control characters');
  });

  it('refuses an unknown launcher, listing auto among the choices', () => {
    expect(configError('supervisor:\n  launcher: systemd\n').message).toContain('auto, direct, systemd-run');
  });
});
