import { describe, expect, it } from 'vitest';
import { GPU_QUERY_FIELDS, parseQueryGpu } from '../../../src/agent/discovery/parse-query-gpu.js';
import { gpuFixture } from '../../helpers/fake-gpus.js';

describe('parseQueryGpu', () => {
  it('reads every GPU of the 8-GPU box from csv with header and units', () => {
    const r = parseQueryGpu(gpuFixture('hgx-h100x8', 'query-gpu.csv'));
    expect(r.driverVersion).toBe('550.54.15');
    expect(r.gpus.map((g) => g.index)).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
    expect(r.gpus.map((g) => g.memoryUsedMb)).toEqual([0, 1, 52, 71480, 71480, 3, 0, 17]);
    const g3 = r.gpus[3];
    expect(g3).toMatchObject({
      uuid: 'GPU-3f1c0a5e-8b2d-4c7a-9e61-000000000003',
      name: 'NVIDIA H100 80GB HBM3',
      computeCapability: '9.0',
      memoryTotalMb: 81559,
      pciBusId: '00000000:5D:00.0',
      numaNode: -1,
      healthy: true,
      error: '',
      migMode: 'Disabled',
    });
  });

  it('reads noheader,nounits output by the queried field list', () => {
    const text = '0, GPU-a, NVIDIA L40S, 00000000:01:00.0, 46068, 412, 550.90.07, 8.9, [N/A]\n';
    const [g] = parseQueryGpu(text, GPU_QUERY_FIELDS).gpus;
    expect(g).toMatchObject({ index: 0, memoryTotalMb: 46068, memoryUsedMb: 412, computeCapability: '8.9', migMode: '', healthy: true });
  });

  it('keeps a GPU that requires a reset, unhealthy with the reason', () => {
    const { gpus } = parseQueryGpu(gpuFixture('fault', 'query-gpu.csv'));
    expect(gpus).toHaveLength(4);
    expect(gpus[2]).toMatchObject({ index: 2, healthy: false, error: 'GPU requires reset', memoryTotalMb: 0 });
    expect(gpus[3]).toMatchObject({ index: 3, healthy: false, error: 'Unknown Error', memoryTotalMb: 81559 });
    expect(gpus[0]?.healthy).toBe(true);
  });

  it('marks a GPU with an empty essential cell unhealthy instead of dropping it', () => {
    const { gpus } = parseQueryGpu('index, uuid, memory.total [MiB]\n0, , 81559 MiB\n1, [N/A], 81559 MiB\n');
    expect(gpus.map((g) => [g.healthy, g.error])).toEqual([
      [false, 'nvidia-smi reported no uuid'],
      [false, 'nvidia-smi reported no uuid ([N/A])'],
    ]);
  });

  it('treats [N/A] and [Not Supported] in optional fields as absent values, not faults', () => {
    const { gpus } = parseQueryGpu('index, uuid, memory.total, mig.mode.current, compute_cap\n0, GPU-x, 100, [Not Supported], [N/A]\n');
    expect(gpus[0]).toMatchObject({ healthy: true, migMode: '', computeCapability: '' });
  });

  it('lists a GPU the driver lost, from a line that is not CSV', () => {
    const text = '0, GPU-a, 81559, 1\nUnable to determine the device handle for GPU 0000:5D:00.0: Unknown Error\n';
    const { gpus } = parseQueryGpu(text, ['index', 'uuid', 'memory.total', 'memory.used']);
    expect(gpus).toHaveLength(2);
    expect(gpus[1]).toMatchObject({ index: -1, pciBusId: '0000:5D:00.0', healthy: false });
    expect(gpus[1]?.error).toContain('Unknown Error');
  });

  it('converts units left in values', () => {
    const { gpus } = parseQueryGpu('index, uuid, memory.total, memory.used\n0, GPU-a, 80 GiB, 512 MiB\n');
    expect(gpus[0]).toMatchObject({ memoryTotalMb: 81920, memoryUsedMb: 512 });
  });
});
