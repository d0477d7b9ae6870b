import { describe, expect, it } from 'vitest';
import { renderGpuStatus } from '../../src/ctl/render-gpu-status.js';
import type { StatusResponseJson } from '../../src/gen/llmgw/v1/admin_pb.js';

const NOW = Date.parse('2026-01-02T10:00:00Z');
const H100 = { name: 'NVIDIA H100 80GB HBM3', memoryTotalMb: 81559 };

describe('renderGpuStatus', () => {
  it('shows each GPU with its fresh memory, its health and its last event, and the whole reason of an unhealthy one below', () => {
    const s: StatusResponseJson = {
      inventory: {
        gpus: [
          { index: 0, ...H100, memoryUsedMb: 0, healthy: true },
          { index: 1, ...H100, memoryUsedMb: 10, healthy: true },
        ],
      },
      gpus: [
        { index: 0, memoryUsedMb: 512, healthy: true, recentEvents: [] },
        {
          index: 1,
          memoryUsedMb: 20480,
          healthy: false,
          fault: 'Xid 79: GPU has fallen off the bus',
          recentEvents: [{ gpuIndex: 1, message: 'Xid 79: GPU has fallen off the bus', source: 'kmsg', at: '2026-01-02T09:58:00Z' }],
        },
      ],
    };
    expect(renderGpuStatus(s, NOW)).toEqual([
      [
        'GPU  NAME                   MEMORY             HEALTH     LAST EVENT',
        '0    NVIDIA H100 80GB HBM3  512 / 81559 MiB    ok         -',
        '1    NVIDIA H100 80GB HBM3  20480 / 81559 MiB  UNHEALTHY  Xid 79: GPU has fallen off the bus (kmsg, 2m ago)',
      ].join('\n'),
      'GPU 1: Xid 79: GPU has fallen off the bus',
    ]);
  });

  it('says a faulted GPU whose memory the scan could not read is unreadable, not a stale reading over 0 (walkthrough 4, O14)', () => {
    const s: StatusResponseJson = {
      inventory: { gpus: [{ index: 1, name: 'NVIDIA H100 80GB HBM3', memoryUsedMb: 1, healthy: false, error: 'GPU requires reset' }] },
      gpus: [{ index: 1, memoryUsedMb: 1, healthy: false, fault: 'GPU requires reset', recentEvents: [] }],
    };
    expect(renderGpuStatus(s, NOW)[0]?.split('\n')[1]?.split(/\s{2,}/)).toEqual(['1', 'NVIDIA H100 80GB HBM3', 'unreadable', 'UNHEALTHY', '-']);
  });

  it('shows foreign memory in HEALTH, not ok, for a healthy GPU the agent refuses starts on, with the whole reason below', () => {
    const fault = 'foreign memory 88% (no shard starts on it): GPU 3: 71480 of 81559 MiB used and no process listed on it, so …';
    const s: StatusResponseJson = {
      inventory: { gpus: [{ index: 3, ...H100, memoryUsedMb: 71480, healthy: true }] },
      gpus: [{ index: 3, memoryUsedMb: 71480, healthy: true, fault, recentEvents: [] }],
    };
    expect(renderGpuStatus(s, NOW)).toEqual([
      ['GPU  NAME                   MEMORY             HEALTH              LAST EVENT', '3    NVIDIA H100 80GB HBM3  71480 / 81559 MiB  foreign memory 88%  -'].join('\n'),
      `GPU 3: ${fault}`,
    ]);
  });

  it('falls back to the inventory for an agent that sends no GPU health, and says nothing for a node without GPUs', () => {
    const s: StatusResponseJson = { inventory: { gpus: [{ index: 0, ...H100, memoryUsedMb: 7, healthy: false, error: 'GPU requires reset' }] } };
    expect(renderGpuStatus(s, NOW)).toEqual([
      ['GPU  NAME                   MEMORY         HEALTH     LAST EVENT', '0    NVIDIA H100 80GB HBM3  7 / 81559 MiB  UNHEALTHY  -'].join('\n'),
      'GPU 0: GPU requires reset',
    ]);
    expect(renderGpuStatus({ inventory: {} }, NOW)).toEqual([]);
  });
});
