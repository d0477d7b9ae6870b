import { describe, expect, it } from 'vitest';
import { parseGpuList } from '../../../src/agent/discovery/parse-gpu-list.js';
import { gpuFixture } from '../../helpers/fake-gpus.js';

describe('parseGpuList', () => {
  it('attaches MIG devices to the GPU listed above them', () => {
    const gpus = parseGpuList(gpuFixture('a100-mig', 'list-L.txt'));
    expect(gpus.map((g) => [g.index, g.name, g.migDevices.map((m) => `${m.index}:${m.profile}`)])).toEqual([
      [0, 'NVIDIA A100-SXM4-80GB', ['0:3g.40gb', '1:2g.20gb', '2:1g.10gb']],
      [1, 'NVIDIA A100-SXM4-80GB', []],
    ]);
    expect(gpus[0]?.migDevices[2]?.uuid).toBe('MIG-7a0f2d41-55e3-5b9c-9d2a-000000000002');
  });

  it('reads compute-instance profiles such as 1c.3g.71gb', () => {
    const [g] = parseGpuList('GPU 0: NVIDIA H200 (UUID: GPU-1)\n  MIG 1c.3g.71gb  Device  0: (UUID: MIG-1)\n');
    expect(g?.migDevices).toEqual([{ index: 0, profile: '1c.3g.71gb', uuid: 'MIG-1' }]);
  });
});
