import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { probeHcas } from '../../../src/agent/discovery/probe-hcas.js';
import { SYSFS_FIXTURE } from '../../helpers/fake-gpus.js';

const empty = mkdtempSync(join(tmpdir(), 'llmgw-sysfs-'));
afterAll(() => rmSync(empty, { recursive: true, force: true }));

describe('probeHcas', () => {
  it('reads IB, RoCE and down ports, with and without trailing newlines and missing files', async () => {
    const { hcas, warnings } = await probeHcas({ sysfsRoot: SYSFS_FIXTURE, fabrics: [{ hca: 'mlx5_2', fabric: 'roce-a' }] });
    expect(warnings).toEqual([]);
    expect(hcas.map((h) => [h.name, h.port, h.state, h.physState, h.rateGbps, h.linkLayer, h.numaNode, h.fabric, h.netdev])).toEqual([
      ['mlx5_0', 1, 'ACTIVE', 'LinkUp', 400, 'InfiniBand', 0, '', 'ib0'],
      ['mlx5_1', 1, 'ACTIVE', 'LinkUp', 400, 'InfiniBand', 0, '', ''],
      ['mlx5_2', 1, 'ACTIVE', 'LinkUp', 200, 'Ethernet', 1, 'roce-a', 'ens21np0'],
      ['mlx5_3', 1, 'DOWN', 'Disabled', 10, 'InfiniBand', -1, '', ''],
    ]);
  });

  it('finds no HCAs, and warns of nothing, on a node without /sys/class/infiniband', async () => {
    expect(await probeHcas({ sysfsRoot: empty, fabrics: [] })).toEqual({ hcas: [], warnings: [] });
  });
});
