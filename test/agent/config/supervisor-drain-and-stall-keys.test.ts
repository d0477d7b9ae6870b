import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { loadAgentConfig } from '../../../src/agent/config/load-agent-config.js';
import { LlmgwError } from '../../../src/lib/errors.js';

const dir = mkdtempSync(join(tmpdir(), 'llmgw-config-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

let n = 0;
function file(supervisor: string): string {
  const p = join(dir, `agent-${n++}.yaml`);
  writeFileSync(p, `node_id: gpu-01\nserver: http://127.0.0.1:8443\nsupervisor:\n${supervisor}`);
  return p;
}

function configError(fn: () => unknown): LlmgwError {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(LlmgwError);
    expect((err as LlmgwError).exitCode).toBe(78);
    expect((err as LlmgwError).message).not.toContain('\n');
    return err as LlmgwError;
  }
  throw new Error('expected a configuration error');
}

describe('supervisor.stall_timeout', () => {
  it('defaults to 60s, takes a duration, and 0s turns it off', () => {
    expect(loadAgentConfig({ configPath: file('  health_interval: 5s\n'), env: {} }).config.supervisor.stallTimeoutMs).toBe(60_000);
    expect(loadAgentConfig({ configPath: file('  stall_timeout: 90s\n'), env: {} }).config.supervisor.stallTimeoutMs).toBe(90_000);
    expect(loadAgentConfig({ configPath: file('  stall_timeout: 0s\n'), env: {} }).config.supervisor.stallTimeoutMs).toBe(0);
    expect(loadAgentConfig({ configPath: file(''), env: { LLMGW_SUPERVISOR_STALL_TIMEOUT: '2m' } }).config.supervisor.stallTimeoutMs).toBe(120_000);
  });

  it('refuses a value that is not a duration, naming the key and the line', () => {
    const path = file('  stall_timeout: soon\n');
    expect(configError(() => loadAgentConfig({ configPath: path, env: {} })).message).toMatch(
      new RegExp(`^supervisor\\.stall_timeout: .*${path.replaceAll('.', '\\.')}:4\\)$`),
    );
  });
});

describe('supervisor.stop_grace', () => {
  it('refuses a grace that leaves vLLM no drain, naming the minimum', () => {
    const path = file('  stop_grace: 1500ms\n');
    expect(configError(() => loadAgentConfig({ configPath: path, env: {} })).message).toBe(
      `supervisor.stop_grace 1.5s leaves an engine no time to drain; set it to at least 2s (${path}:4)`,
    );
  });

  it('accepts 2s and more', () => {
    expect(loadAgentConfig({ configPath: file('  stop_grace: 2s\n'), env: {} }).config.supervisor.stopGraceMs).toBe(2000);
  });
});
