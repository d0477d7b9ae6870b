import { create } from '@bufbuild/protobuf';
import { describe, expect, it } from 'vitest';
import { parseDeployment } from '../../src/control/load-deployment.js';
import { meetsCapability, placeReplica, type PlacementNode } from '../../src/control/place-replica.js';
import { GpuProcessSchema, GpuSchema, ModelWarmthSchema, TimeToReadySchema } from '../../src/gen/llmgw/v1/agent_pb.js';

const replica = (extra = '', profileExtra = '') =>
  parseDeployment(`profiles:\n  p:\n    engine: sim\n    model: m\n    tensor_parallel_size: 2\n${profileExtra}replicas:\n  - name: r\n    profile: p\n${extra}`, 'p.yaml').replicas[0]!;

const node = (id: string, gpus: { cc?: string; healthy?: boolean }[], used: number[] = [], labels: Record<string, string> = {}): PlacementNode => ({
  id,
  labels,
  gpus: gpus.map((g, index) => create(GpuSchema, { index, computeCapability: g.cc ?? '9.0', healthy: g.healthy ?? true })),
  usedGpus: new Set(used),
});

describe('placeReplica', () => {
  it('skips unhealthy and used GPUs and takes the lowest free indices', () => {
    const r = placeReplica(replica(), [node('a', [{ healthy: false }, {}, {}, {}], [2])]);
    expect(r).toEqual({ ok: true, shards: [{ nodeId: 'a', gpuIndices: [1, 3] }] });
  });

  it('skips a GPU whose memory is used by no listed process, and takes one whose memory a listed process explains', () => {
    const gpu = (index: number, memoryUsedMb: number) =>
      create(GpuSchema, { index, uuid: `GPU-${index}`, computeCapability: '9.0', healthy: true, memoryTotalMb: 81559, memoryUsedMb });
    const n: PlacementNode = {
      id: 'a',
      labels: {},
      gpus: [gpu(0, 71480), gpu(1, 71480), gpu(2, 3), gpu(3, 71480)],
      usedGpus: new Set(),
      processes: [create(GpuProcessSchema, { pid: 7, gpuUuid: 'GPU-1', usedMemoryMb: 71400 })],
    };
    expect(placeReplica(replica(), [n])).toEqual({ ok: true, shards: [{ nodeId: 'a', gpuIndices: [1, 2] }] });
    expect(placeReplica(replica(), [{ ...n, gpus: n.gpus.filter((g) => g.index !== 2) }])).toEqual({
      ok: false,
      reason: 'needs 1 node(s) with 2 free healthy GPU(s); 0 of the connected nodes have that (left out, their memory used by no process the node lists: a GPU 0, 3)',
    });
  });

  it('prefers the fullest node that fits, so whole nodes stay free', () => {
    const r = placeReplica(replica(), [node('a', [{}, {}, {}, {}]), node('b', [{}, {}, {}, {}], [0, 1])]);
    expect(r).toMatchObject({ ok: true, shards: [{ nodeId: 'b', gpuIndices: [2, 3] }] });
  });

  it('prefers the node whose agent measured the soonest time to READY from what it offers now, then as before (issue 41)', () => {
    const warmth = (rung: string, from: string, medianSeconds: number) => [
      create(ModelWarmthSchema, { model: 'm', engine: 'sim', profile: 'p', rung, learned: [create(TimeToReadySchema, { from, medianSeconds, samples: 2 })] }),
    ];
    // b is fuller (best fit) and would go first; a measured 6 s from its store, b 95 s from the hub.
    const a = { ...node('a', [{}, {}, {}, {}]), warmth: warmth('store', 'store', 6) };
    const b = { ...node('b', [{}, {}, {}, {}], [0, 1]), warmth: warmth('absent', 'hub', 95) };
    expect(placeReplica(replica(), [a, b])).toEqual({ ok: true, shards: [{ nodeId: 'a', gpuIndices: [0, 1], expected: { seconds: 6, from: 'store' } }], considered: ['a: 6.0s from store', 'b: 95s from hub'] });
    // A node that measured nothing comes after one that did, whatever else it has for it.
    const unmeasured = node('c', [{}, {}, {}, {}], [0, 1]);
    expect(placeReplica(replica(), [unmeasured, b])).toMatchObject({ shards: [{ nodeId: 'b' }], considered: ['b: 95s from hub', 'c: not measured'] });
    // Another profile's measurement is not this one's: best fit decides, as before.
    const other = { ...node('a', [{}, {}, {}, {}]), warmth: [create(ModelWarmthSchema, { model: 'm', engine: 'sim', profile: 'other', rung: 'store', learned: [create(TimeToReadySchema, { from: 'store', medianSeconds: 1, samples: 1 })] })] };
    expect(placeReplica(replica(), [other, node('b', [{}, {}, {}, {}], [0, 1])])).toEqual({ ok: true, shards: [{ nodeId: 'b', gpuIndices: [2, 3] }] });
  });

  it('takes a node with a compile cache at its own measured time, and one that lost it at its slower one (never flattered)', () => {
    const both = (rung: string) => [
      create(ModelWarmthSchema, {
        model: 'm',
        engine: 'sim',
        profile: 'p',
        rung,
        learned: [create(TimeToReadySchema, { from: 'store+compile', medianSeconds: 4, samples: 2 }), create(TimeToReadySchema, { from: 'store', medianSeconds: 20, samples: 2 })],
      }),
    ];
    const compiled = { ...node('a', [{}, {}, {}, {}]), warmth: both('store+compile') };
    const lost = { ...node('b', [{}, {}, {}, {}], [0, 1]), warmth: both('store') };
    expect(placeReplica(replica(), [lost, compiled])).toMatchObject({ shards: [{ nodeId: 'a', expected: { seconds: 4, from: 'store+compile' } }], considered: ['a: 4.0s from store+compile', 'b: 20s from store'] });
  });

  it('honours the pool label and the minimum compute capability, and says why nothing fits', () => {
    const r = replica('    pool: h100\n', '    min_compute_capability: "9.0"\n');
    expect(placeReplica(r, [node('a', [{}, {}], [], { pool: 'a100' }), node('b', [{ cc: '8.0' }, { cc: '8.0' }], [], { pool: 'h100' })])).toEqual({
      ok: false,
      reason: 'needs 1 node(s) with 2 free healthy GPU(s) of compute capability 9.0 or more; 0 of the connected nodes of pool h100 have that',
    });
    expect(placeReplica(r, [node('c', [{}, {}], [], { pool: 'h100' })])).toMatchObject({ ok: true });
  });

  it('compares compute capabilities by major, then minor', () => {
    expect(meetsCapability('8.6', '8.0')).toBe(true);
    expect(meetsCapability('10.0', '9.0')).toBe(true);
    expect(meetsCapability('7.5', '8.0')).toBe(false);
  });
});
