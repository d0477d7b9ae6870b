import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { resolveDiscoverSettings } from '../../../src/agent/discovery/resolve-discover-settings.js';
import { LlmgwError } from '../../../src/lib/errors.js';

/** Every LLMGW_* variable, cleared for each test and put back after: discover honours them. */
let saved: Record<string, string | undefined> = {};
let dir = '';

beforeEach(() => {
  saved = {};
  for (const name of Object.keys(process.env)) {
    if (name.startsWith('LLMGW_')) {
      saved[name] = process.env[name];
      delete process.env[name];
    }
  }
  dir = mkdtempSync(join(tmpdir(), 'llmgw-discover-settings-'));
});

afterEach(() => {
  for (const name of Object.keys(process.env)) if (name.startsWith('LLMGW_')) delete process.env[name];
  for (const [name, v] of Object.entries(saved)) if (v !== undefined) process.env[name] = v;
  rmSync(dir, { recursive: true, force: true });
});

function errorOf(f: () => unknown): LlmgwError {
  try {
    f();
  } catch (err) {
    expect(err).toBeInstanceOf(LlmgwError);
    return err as LlmgwError;
  }
  throw new Error('not refused');
}

describe('resolveDiscoverSettings without --config', () => {
  it("is the agent's defaults, reading no file", () => {
    expect(resolveDiscoverSettings({})).toEqual({
      nvidiaSmi: 'nvidia-smi',
      sysfsRoot: '/',
      timeoutMs: 10_000,
      foreignMemoryShare: 0.05,
      fabrics: [],
      mgmtInterface: 'eth0',
      preferNvml: true,
      nvmlLibrary: 'libnvidia-ml.so.1',
      fromConfig: false,
      // Where discover reads the agent's measured rates (Inventory.rates).
      stateDir: '/var/lib/llmgw',
    });
  });

  it('lets flags win', () => {
    const s = resolveDiscoverSettings({ nvidiaSmi: '/opt/bin/nvidia-smi', sysfsRoot: '/tmp/sys', timeout: '2s' });
    expect(s.nvidiaSmi).toBe('/opt/bin/nvidia-smi');
    expect(s.sysfsRoot).toBe('/tmp/sys');
    expect(s.timeoutMs).toBe(2000);
  });

  it("honours the agent's LLMGW_ variables for NVML, as the agent does", () => {
    process.env.LLMGW_DISCOVERY_PREFER_NVML = 'no';
    process.env.LLMGW_DISCOVERY_NVML_LIBRARY = '/opt/nvml/libnvidia-ml.so';
    const s = resolveDiscoverSettings({});
    expect(s.preferNvml).toBe(false);
    expect(s.nvmlLibrary).toBe('/opt/nvml/libnvidia-ml.so');
    process.env.LLMGW_DISCOVERY_PREFER_NVML = 'TRUE';
    expect(resolveDiscoverSettings({}).preferNvml).toBe(true);
  });

  it('treats an empty variable as unset', () => {
    process.env.LLMGW_DISCOVERY_PREFER_NVML = '';
    process.env.LLMGW_DISCOVERY_NVML_LIBRARY = '';
    const s = resolveDiscoverSettings({});
    expect(s.preferNvml).toBe(true);
    expect(s.nvmlLibrary).toBe('libnvidia-ml.so.1');
  });

  it('refuses a prefer_nvml variable that is not a bool, naming the variable', () => {
    process.env.LLMGW_DISCOVERY_PREFER_NVML = 'sometimes';
    const err = errorOf(() => resolveDiscoverSettings({}));
    expect(err.kind).toBe('config');
    expect(err.message).toBe('LLMGW_DISCOVERY_PREFER_NVML="sometimes" must be true or false');
  });
});

describe('resolveDiscoverSettings --timeout', () => {
  it.each(['soon', '0s', '0', '10'])('refuses %j as a usage error', (timeout) => {
    const err = errorOf(() => resolveDiscoverSettings({ timeout }));
    expect(err.kind).toBe('usage');
    expect(err.message).toBe(`--timeout ${JSON.stringify(timeout)} is not a duration; write it like 500ms, 5s or 2m`);
  });

  it('is checked before any config file is read', () => {
    const err = errorOf(() => resolveDiscoverSettings({ timeout: 'x', config: join(dir, 'missing.yaml') }));
    expect(err.kind).toBe('usage');
  });
});

describe('resolveDiscoverSettings with --config', () => {
  it("is what the agent's config says, with flags winning", () => {
    const path = join(dir, 'agent.yaml');
    writeFileSync(
      path,
      [
        'node_id: n1',
        'server: http://127.0.0.1:7000',
        'mgmt_interface: bond0',
        'fabrics:',
        '  - {hca: mlx5_0, fabric: fabA}',
        'discovery:',
        '  nvidia_smi: /usr/local/bin/nvidia-smi',
        '  timeout: 30s',
        '  foreign_memory_share: 10%',
        '  prefer_nvml: false',
        '',
      ].join('\n'),
    );
    const s = resolveDiscoverSettings({ config: path, sysfsRoot: '/tmp/sys' });
    expect(s.fromConfig).toBe(true);
    expect(s.nvidiaSmi).toBe('/usr/local/bin/nvidia-smi');
    expect(s.sysfsRoot).toBe('/tmp/sys');
    expect(s.timeoutMs).toBe(30_000);
    expect(s.foreignMemoryShare).toBeCloseTo(0.1);
    expect(s.fabrics).toEqual([{ hca: 'mlx5_0', fabric: 'fabA' }]);
    expect(s.mgmtInterface).toBe('bond0');
    expect(s.preferNvml).toBe(false);
    expect(s.engines).toBeDefined();
    expect(resolveDiscoverSettings({ config: path, timeout: '3s' }).timeoutMs).toBe(3000);
  });
});
