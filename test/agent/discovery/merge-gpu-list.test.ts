import { create } from '@bufbuild/protobuf';
import { describe, expect, it } from 'vitest';
import { mergeGpuList } from '../../../src/agent/discovery/merge-gpu-list.js';
import { parseGpuList } from '../../../src/agent/discovery/parse-gpu-list.js';
import { GpuSchema } from '../../../src/gen/llmgw/v1/agent_pb.js';

const LIST = [
  'GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-aaa)',
  '  MIG 3g.40gb     Device  0: (UUID: MIG-a0)',
  'GPU 1: NVIDIA A100-SXM4-80GB (UUID: GPU-bbb)',
  '  MIG 1g.10gb     Device  0: (UUID: MIG-b0)',
  '',
].join('\n');

describe('mergeGpuList', () => {
  it('gives each GPU the MIG devices listed under its UUID, whatever its index says', () => {
    // Enumerated in another order than nvidia-smi's: the UUID decides.
    const gpus = [create(GpuSchema, { index: 0, uuid: 'GPU-bbb', name: 'A100' }), create(GpuSchema, { index: 1, uuid: 'GPU-aaa', name: 'A100' })];
    mergeGpuList(gpus, parseGpuList(LIST));
    expect(gpus.map((g) => g.migDevices.map((m) => m.uuid))).toEqual([['MIG-b0'], ['MIG-a0']]);
    expect(gpus.map((g) => g.name)).toEqual(['A100', 'A100']);
  });

  it('matches by index only a GPU whose UUID is unknown, and fills in its name', () => {
    const gpus = [create(GpuSchema, { index: 1, uuid: '', name: '' })];
    mergeGpuList(gpus, parseGpuList(LIST));
    expect(gpus[0]?.name).toBe('NVIDIA A100-SXM4-80GB');
    expect(gpus[0]?.migDevices.map((m) => `${m.index}:${m.profile}:${m.uuid}`)).toEqual(['0:1g.10gb:MIG-b0']);
  });

  it('leaves a GPU nvidia-smi does not list as it was', () => {
    const gpus = [create(GpuSchema, { index: 0, uuid: 'GPU-zzz', name: 'H100' })];
    mergeGpuList(gpus, parseGpuList(LIST));
    expect(gpus[0]).toMatchObject({ name: 'H100', migDevices: [] });
  });
});
