import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, describe, expect, it, onTestFinished, vi } from 'vitest';
import { isUnsupported, NVML_ERROR_GPU_IS_LOST, NvmlLibrary } from '../../../../src/agent/discovery/nvml/nvml-library.js';
import { probeGpusNvml } from '../../../../src/agent/discovery/nvml/probe-gpus-nvml.js';
import { buildFakeNvml, type FakeNvmlVariant, fakeNvmlUnavailable } from '../fake-nvml.js';

const tmp = mkdtempSync(join(tmpdir(), 'llmgw-nvml-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));
afterEach(() => {
  vi.unstubAllEnvs();
});

function open(variant: FakeNvmlVariant = 'current', control = ''): NvmlLibrary {
  vi.stubEnv('LLMGW_FAKE_NVML_CONTROL', control);
  const r = NvmlLibrary.open(buildFakeNvml(variant));
  if (!r.ok) throw new Error(r.reason);
  onTestFinished(() => r.value.close());
  return r.value;
}

describe('NvmlLibrary', () => {
  it('says why when the library cannot be loaded', () => {
    const r = NvmlLibrary.open(join(tmp, 'libnvidia-ml.so.1'));
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.reason).toMatch(/^cannot load .*libnvidia-ml\.so\.1: /);
  });

  it('says why when a library is no NVML at all (an essential entry point missing)', () => {
    const r = NvmlLibrary.open('libc.so.6');
    expect(r).toMatchObject({ ok: false, reason: 'libc.so.6 lacks nvmlInit_v2, nvmlShutdown, nvmlErrorString, nvmlDeviceGetCount_v2, nvmlDeviceGetHandleByIndex_v2, nvmlDeviceGetUUID, nvmlDeviceGetPciInfo_v3' });
  });
});

describe.skipIf(fakeNvmlUnavailable() !== undefined)('NvmlLibrary on the fake libnvidia-ml.so', () => {
  it('reads memory through _v2: used leaves out the reservation the v1 call would count', () => {
    vi.stubEnv('LLMGW_FAKE_GPUS', 'hgx-h100x8');
    const nvml = open();
    // hgx-h100x8 GPU 0: 81559 MiB total, 0 MiB used (nvidia-smi's figures).
    expect(nvml.memory(0)).toEqual({ ok: true, value: { total: 81559 * 2 ** 20, used: 0 } });
    expect(nvml.memory(3)).toEqual({ ok: true, value: { total: 81559 * 2 ** 20, used: 71480 * 2 ** 20 } });
  });

  it('answers GPU_IS_LOST for a lost GPU, and the init failure code from nvmlInit_v2', () => {
    const control = join(tmp, 'control');
    writeFileSync(control, 'lost 1\n');
    const nvml = open('current', control);
    expect(nvml.memory(1)).toMatchObject({ ok: false, code: NVML_ERROR_GPU_IS_LOST, reason: 'GPU is lost (NVML 15)' });
    expect(nvml.memory(0).ok).toBe(true);
    writeFileSync(control, 'init 9\n');
    expect(NvmlLibrary.open(buildFakeNvml())).toEqual({ ok: false, code: 9, reason: 'nvmlInit_v2 failed: Driver Not Loaded (NVML 9)' });
  });

  it('treats the entry points an old driver lacks as not supported, and still names every GPU', async () => {
    vi.stubEnv('LLMGW_FAKE_GPUS', 'old-driver');
    const nvml = open('old');
    for (const fn of ['nvmlDeviceGetMemoryInfo_v2', 'nvmlDeviceGetRemappedRows', 'nvmlEventSetWait_v2', 'nvmlSystemGetCudaDriverVersion_v2']) {
      expect(nvml.has(fn)).toBe(false);
    }
    const mem = nvml.memory(0);
    expect(mem.ok === false && isUnsupported(mem)).toBe(true);
    const probe = await probeGpusNvml(nvml);
    expect(probe.gpus.gpus.map((g) => [g.index, g.name, g.healthy])).toEqual([
      [0, 'Tesla V100-SXM2-32GB', true],
      [1, 'Tesla V100-SXM2-32GB', true],
    ]);
    expect(probe.gpus.warnings).toEqual(
      expect.arrayContaining([
        'NVML does not report compute capability: profiles with min_compute_capability will refuse these GPUs (update the driver)',
        'NVML does not report memory here (not supported by this driver)',
        'GPU processes unknown, so a GPU held by a leaked process would not show: not supported by this driver',
        'CUDA version unknown: NVML did not report it (not supported by this driver)',
      ]),
    );
  });
});
