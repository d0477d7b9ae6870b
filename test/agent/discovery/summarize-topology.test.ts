import { create } from '@bufbuild/protobuf';
import { describe, expect, it } from 'vitest';
import { parseTopoMatrix } from '../../../src/agent/discovery/parse-topo-matrix.js';
import { summarizeTopology } from '../../../src/agent/discovery/summarize-topology.js';
import { GpuSchema, InventorySchema } from '../../../src/gen/llmgw/v1/agent_pb.js';
import { gpuFixture } from '../../helpers/fake-gpus.js';

const inv = (n: number, topo?: string) =>
  create(InventorySchema, {
    gpus: Array.from({ length: n }, (_, i) => create(GpuSchema, { index: i })),
    links: topo ? parseTopoMatrix(topo).links : [],
  });

describe('summarizeTopology', () => {
  it('says all pairs share one link type and which HCA each GPU pair is nearest to', () => {
    expect(summarizeTopology(inv(8, gpuFixture('hgx-h100x8', 'topo-m.txt')))).toBe(
      '8 GPUs, all pairs NV18; GPU0-1 nearest HCA mlx5_0 (PXB), GPU2-3 nearest HCA mlx5_1 (PXB), GPU4-5 nearest HCA mlx5_2 (PXB), GPU6-7 nearest HCA mlx5_3 (PXB)',
    );
  });

  it('counts mixed PCIe connections', () => {
    expect(summarizeTopology(inv(4, gpuFixture('pcie-l40sx4', 'topo-m.txt')))).toBe('4 GPUs, NODE ×2, SYS ×4');
  });

  it('says when topology is unknown', () => {
    expect(summarizeTopology(inv(2))).toBe('2 GPUs, topology unknown');
    expect(summarizeTopology(inv(0))).toBe('no GPUs');
  });
});
