import { describe, expect, it } from 'vitest';
import { parseTopoMatrix } from '../../../src/agent/discovery/parse-topo-matrix.js';
import { gpuFixture } from '../../helpers/fake-gpus.js';

describe('parseTopoMatrix', () => {
  it('reads an NVSwitch box with ANSI header, tabs and a NIC legend', () => {
    const m = parseTopoMatrix(gpuFixture('hgx-h100x8', 'topo-m.txt'));
    const pairs = m.links.filter((l) => l.b.startsWith('GPU'));
    expect(pairs).toHaveLength(28);
    expect(pairs.every((l) => l.connection === 'NV18' && l.nvlinks === 18)).toBe(true);
    expect(pairs[0]).toMatchObject({ a: 'GPU0', b: 'GPU1' });
    const toHca = m.links.filter((l) => !l.b.startsWith('GPU'));
    expect(toHca).toHaveLength(32);
    expect(toHca.filter((l) => l.a === 'GPU0').map((l) => [l.b, l.connection])).toEqual([
      ['mlx5_0', 'PXB'],
      ['mlx5_1', 'NODE'],
      ['mlx5_2', 'SYS'],
      ['mlx5_3', 'SYS'],
    ]);
    expect(toHca.every((l) => l.nvlinks === 0)).toBe(true);
    expect([...m.gpuNuma.entries()]).toEqual([0, 1, 2, 3, 4, 5, 6, 7].map((i) => [i, i < 4 ? 0 : 1]));
  });

  it('reads a tab-expanded PCIe-only matrix without a GPU NUMA ID column', () => {
    const m = parseTopoMatrix(gpuFixture('pcie-l40sx4', 'topo-m.txt'));
    expect(m.links.map((l) => `${l.a}-${l.b}:${l.connection}`)).toEqual([
      'GPU0-GPU1:NODE',
      'GPU0-GPU2:SYS',
      'GPU0-GPU3:SYS',
      'GPU1-GPU2:SYS',
      'GPU1-GPU3:SYS',
      'GPU2-GPU3:NODE',
    ]);
    expect(m.links.every((l) => l.nvlinks === 0)).toBe(true);
    expect(m.gpuNuma.get(3)).toBe(1);
  });

  it('gives a single-GPU matrix no links', () => {
    const m = parseTopoMatrix('\t\u001b[4mGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\u001b[0m\nGPU0\t X \t0-19\t0\t\tN/A\n');
    expect(m.links).toEqual([]);
    expect(m.gpuNuma.get(0)).toBe(0);
  });

  it('names NIC columns by device when there is no legend', () => {
    const m = parseTopoMatrix('\tGPU0\tGPU1\tmlx5_0\tCPU Affinity\nGPU0\t X \tPIX\tPHB\t0-7\nGPU1\tPIX\t X \tSYS\t0-7\nmlx5_0\tPHB\tSYS\t X \n');
    expect(m.links.map((l) => `${l.a}-${l.b}:${l.connection}`)).toEqual(['GPU0-GPU1:PIX', 'GPU0-mlx5_0:PHB', 'GPU1-mlx5_0:SYS']);
  });

  it('throws on output that holds no matrix, so the caller says topology unavailable', () => {
    expect(() => parseTopoMatrix('Failed to initialize NVML: Unknown Error\n')).toThrow(/no GPU matrix/);
  });
});
