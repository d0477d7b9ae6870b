import { readFileSync, statSync } from 'node:fs';
import { create } from '@bufbuild/protobuf';
import { describe, expect, it } from 'vitest';
import { inventoryCachePath, writeInventoryCache } from '../../src/agent/inventory-cache.js';
import { type AgentMessage, GpuSchema, InventorySchema, type Register } from '../../src/gen/llmgw/v1/agent_pb.js';
import { type AgentDirs, startAgentProcess, tempAgentDirs } from '../helpers/agent-process.js';
import { until } from '../helpers/engine-processes.js';
import { isRegister } from '../helpers/sim-shards.js';
import { startControlPlane } from '../helpers/start-control-plane.js';

function newDirs(): AgentDirs {
  return tempAgentDirs('llmgw-regscan-');
}

const isInventory = (m: AgentMessage) => m.msg.case === 'inventory';

/** Where a message stands in what the control plane received from node-a, or -1. */
const indexOf = (all: AgentMessage[], pred: (m: AgentMessage) => boolean) => all.findIndex(pred);

describe('the first Register and the hardware scan', () => {
  it('with a cached inventory and an nvidia-smi that takes 2 s a call, registers with the cache before the scan ends, then sends the scan', async () => {
    const { cp, url } = await startControlPlane();
    const dirs = newDirs();
    // The cache says 7 GPUs, the (fake) hardware 8: which one a message
    // carries says whether it was sent before or after the scan ended.
    await writeInventoryCache(dirs.stateDir, create(InventorySchema, { driverVersion: 'cached', gpus: Array.from({ length: 7 }, (_, index) => create(GpuSchema, { index, uuid: `GPU-cached-${index}` })) }));
    const registered = cp.waitFor('node-a', isRegister, 30_000);
    const scanned = cp.waitFor('node-a', isInventory, 60_000);
    startAgentProcess({ server: url, dirs, env: { LLMGW_FAKE_NVIDIA_SMI_SLEEP: '2' } });
    const reg = (await registered).msg.value as Register;
    expect(reg.inventory?.gpus).toHaveLength(7);
    expect(reg.inventory?.driverVersion).toBe('cached');
    // The scan had not ended when Register went: its result came after, on the same stream.
    expect(indexOf(cp.messages('node-a'), isInventory)).toBe(-1);
    const inv = (await scanned).msg.value as { gpus: unknown[] };
    expect(inv.gpus).toHaveLength(8);
    const all = cp.messages('node-a');
    expect(indexOf(all, isRegister)).toBeLessThan(indexOf(all, isInventory));
    await until(() => JSON.parse(readFileSync(inventoryCachePath(dirs.stateDir), 'utf8')).gpus.length === 8, 'the cache updated to the scan');
  });

  it('on a first boot behind an nvidia-smi slower than the bound, registers without GPUs and a warning, then sends them; the state directory is created 0700 with the cache in it', async () => {
    const { cp, url } = await startControlPlane();
    const dirs = newDirs();
    const registered = cp.waitFor('node-a', isRegister, 30_000);
    const scanned = cp.waitFor('node-a', isInventory, 60_000);
    // 3 s a call, within the 5 s discovery timeout; the GPU and topology
    // probes run one after the other, so the scan cannot end within the 5 s bound.
    startAgentProcess({ server: url, dirs, env: { LLMGW_FAKE_NVIDIA_SMI_SLEEP: '3' } });
    const reg = (await registered).msg.value as Register;
    expect(reg.inventory?.gpus).toEqual([]);
    expect(reg.inventory?.warnings).toEqual(['the first hardware scan is still running after 5s; the inventory follows when it ends']);
    expect(statSync(dirs.stateDir).mode & 0o777).toBe(0o700);
    const inv = (await scanned).msg.value as { gpus: unknown[]; warnings: string[] };
    expect(inv.gpus).toHaveLength(8);
    expect(inv.warnings).not.toContain(reg.inventory?.warnings[0]);
    await until(() => {
      try {
        return JSON.parse(readFileSync(inventoryCachePath(dirs.stateDir), 'utf8')).gpus.length === 8;
      } catch {
        return false;
      }
    }, 'the first cache');
  });
});
