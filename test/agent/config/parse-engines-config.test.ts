import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { loadAgentConfig } from '../../../src/agent/config/load-agent-config.js';
import { LlmgwError } from '../../../src/lib/errors.js';
import { runCli } from '../../helpers/run-cli.js';

const dir = mkdtempSync(join(tmpdir(), 'llmgw-engines-config-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

let n = 0;
function file(engines: string): string {
  const p = join(dir, `agent-${n++}.yaml`);
  writeFileSync(p, `node_id: gpu-01\nserver: http://127.0.0.1:8443\nengines:\n${engines}`);
  return p;
}

function configError(path: string): string {
  try {
    loadAgentConfig({ configPath: path, env: {} });
  } catch (err) {
    expect(err).toBeInstanceOf(LlmgwError);
    expect((err as LlmgwError).exitCode).toBe(78);
    return (err as LlmgwError).message;
  }
  throw new Error(`${path} loaded`);
}

describe('engines.<name>.allowed_args, model_roots and allow_root (security review 2, N1)', () => {
  it('reads them, with the defaults that refuse: no flags, no roots, not as root', () => {
    const { config } = loadAgentConfig({
      configPath: file('  vllm:\n    allowed_args: [--trust-remote-code, --chat-template]\n    model_roots: [/models/, /srv/hf]\n    allow_root: true\n  sglang: {}\n'),
      env: {},
    });
    expect(config.engines.vllm).toMatchObject({ allowedArgs: ['--trust-remote-code', '--chat-template'], modelRoots: ['/models', '/srv/hf'], allowRoot: true });
    expect(config.engines.sglang).toMatchObject({ allowedArgs: [], modelRoots: [], allowRoot: false });
  });

  it('refuses, with exit 78 and one line naming the key, what is not a flag, not an absolute directory, not a boolean', () => {
    const value = file('  vllm:\n    allowed_args: [--trust-remote-code=1]\n');
    expect(configError(value)).toBe(
      `engines: vllm.allowed_args: "--trust-remote-code=1" is not a flag; list each option by its long name, e.g. --trust-remote-code (no value, no =) (${value}:3)`,
    );
    expect(configError(file('  vllm:\n    allowed_args: [trust-remote-code]\n'))).toMatch(/^engines: vllm\.allowed_args: "trust-remote-code" is not a flag/);
    expect(configError(file('  vllm:\n    allowed_args: --trust-remote-code\n'))).toMatch(/^engines: vllm\.allowed_args must be a list of flags such as --trust-remote-code, got /);
    expect(configError(file('  sglang:\n    model_roots: [models]\n'))).toMatch(/^engines: sglang\.model_roots: "models" is not an absolute directory below \/;/);
    expect(configError(file('  sglang:\n    model_roots: [/]\n'))).toMatch(/^engines: sglang\.model_roots: "\/" is not an absolute directory below \//);
    expect(configError(file('  sim:\n    allow_root: "yes"\n'))).toMatch(/^engines: sim\.allow_root must be true or false, got /);
  });

  it('makes llmgw agent run exit 78 with that line', async () => {
    const path = file('  vllm:\n    allowed_args: ["-sc"]\n');
    const r = await runCli(['agent', 'run', '--config', path, '--print-config']);
    expect(r.exitCode).toBe(78);
    expect(r.stderr.trim().split('\n')).toEqual([`error: engines: vllm.allowed_args: "-sc" is not a flag; list each option by its long name, e.g. --trust-remote-code (no value, no =) (${path}:3)`]);
  });
});

describe('engines.vllm.allow_sleep_mode (security review 3, S6)', () => {
  it('is false unless the operator sets it, and only vLLM has it', () => {
    expect(loadAgentConfig({ configPath: file('  vllm: {}\n'), env: {} }).config.engines.vllm?.allowSleepMode).toBeUndefined();
    expect(loadAgentConfig({ configPath: file('  vllm:\n    allow_sleep_mode: true\n'), env: {} }).config.engines.vllm?.allowSleepMode).toBe(true);
    expect(configError(file('  vllm:\n    allow_sleep_mode: 1\n'))).toMatch(/^engines: vllm\.allow_sleep_mode must be true or false, got /);
    expect(configError(file('  sglang:\n    allow_sleep_mode: true\n'))).toMatch(/^engines: sglang\.allow_sleep_mode: only vLLM's sleep mode opens endpoints without a key; remove the key/);
  });
});
