import { describe, expect, it } from 'vitest';
import { describeGpuSource, fakeGpuSource, findGpuSource, knownFakeGpuDatasets } from '../../src/dev/find-gpu-source.js';

describe('findGpuSource', () => {
  it('uses the data set LLMGW_FAKE_GPUS names, without looking for real GPUs', async () => {
    // An nvidia-smi that would hang the probe if it were run.
    const gpus = await findGpuSource({ env: { LLMGW_FAKE_GPUS: 'fault' }, nvidiaSmi: '/nonexistent/nvidia-smi' });
    expect(gpus).toMatchObject({ kind: 'fake', gpuCount: 4, dataset: 'fault', env: { LLMGW_FAKE_GPUS: 'fault' } });
    expect(describeGpuSource(gpus)).toContain('LLMGW_FAKE_GPUS=fault');
  });

  it('takes the 8-GPU box when LLMGW_FAKE_GPUS is unset and there is no driver', async () => {
    const gpus = await findGpuSource({ env: {}, nvidiaSmi: '/nonexistent/nvidia-smi' });
    expect(gpus).toMatchObject({ kind: 'fake', gpuCount: 8, dataset: 'hgx-h100x8' });
  });

  it('refuses a data set that does not exist with exit 2, the nearest name and the known ones', () => {
    expect(knownFakeGpuDatasets()).toEqual(expect.arrayContaining(['fault', 'hgx-h100x8', 'pcie-l40sx4']));
    expect(() => fakeGpuSource('nosuch')).toThrow(
      expect.objectContaining({ exitCode: 2, message: expect.stringMatching(/^LLMGW_FAKE_GPUS=nosuch: no such fake GPU data set; the known ones are .*fault.*hgx-h100x8/) }),
    );
    expect(() => fakeGpuSource('faultt')).toThrow(expect.objectContaining({ message: expect.stringContaining('(did you mean fault?)') }));
  });
});
