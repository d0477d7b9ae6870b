import { create } from '@bufbuild/protobuf';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import { AdminServer } from '../../../src/agent/admin/admin-server.js';
import { callUnaryJson } from '../../../src/ctl/call-unary-json.js';
import type { StatusResponseJson } from '../../../src/gen/llmgw/v1/admin_pb.js';
import { silentLogger } from '../../../src/lib/logger.js';
import type { AdminBackend } from '../../../src/agent/admin/admin-backend.js';
import { buildStatusResponse, shardInfoOf } from '../../../src/agent/admin/build-status-response.js';
import type { ShardSnapshot } from '../../../src/agent/supervisor/shard/shard-snapshot.js';
import { shardSnapshot } from '../../helpers/shard-snapshot.js';
import type { GpuHealthView } from '../../../src/agent/admin/admin-backend.js';
import { runPreflight } from '../../../src/agent/discovery/preflight.js';
import { GpuProcessSchema, GpuSchema, InventorySchema } from '../../../src/gen/llmgw/v1/agent_pb.js';

const H100 = { name: 'NVIDIA H100 80GB HBM3', memoryTotalMb: 81559, healthy: true };

/** GPU 3 as the fake 8-GPU box has it: 71480 MiB used and no process listed; GPU 1 held by a listed process. */
const inventory = create(InventorySchema, {
  gpus: [
    create(GpuSchema, { index: 0, uuid: 'GPU-0', ...H100, memoryUsedMb: 4 }),
    create(GpuSchema, { index: 1, uuid: 'GPU-1', ...H100, memoryUsedMb: 40000 }),
    create(GpuSchema, { index: 3, uuid: 'GPU-3', ...H100, memoryUsedMb: 71480 }),
    create(GpuSchema, { index: 7, uuid: 'GPU-7', ...H100, healthy: false, error: 'Xid 79: GPU has fallen off the bus', memoryUsedMb: 0 }),
  ],
  processes: [create(GpuProcessSchema, { pid: 4242, gpuUuid: 'GPU-1', usedMemoryMb: 39990, processName: 'python' })],
});

function backend(): AdminBackend {
  const health: GpuHealthView[] = inventory.gpus.map((g) => ({ index: g.index, memoryUsedMb: g.memoryUsedMb, healthy: g.healthy, error: g.error, recentEvents: [] }));
  return {
    nodeId: 'n1',
    version: '0.0.0',
    startedAtMs: 0,
    connectionStatus: () => ({ phase: 'connected', server: 'http://cp:1', protocol: 'connect', connectedSinceMs: 1, attempt: 0, nextAttemptAtMs: 0, lastError: '' }),
    currentInventory: () => inventory,
    gpuHealth: () => health,
    engineAccounts: () => [],
    shards: () => [],
  } as unknown as AdminBackend;
}

describe('buildStatusResponse', () => {
  it('says of a healthy GPU whose memory nothing visible uses what discover says, foreign memory and its share, and leaves the rest alone', () => {
    const byIndex = new Map(buildStatusResponse(backend()).gpus.map((g) => [g.index, g]));
    expect(byIndex.get(3)).toMatchObject({ healthy: true, fault: expect.stringMatching(/^foreign memory 88% \(no shard starts on it\): GPU 3: 71480 of 81559 MiB used and no process listed on it/) });
    // The same sentence discover's foreign-memory check fails with: one rule.
    const check = runPreflight(inventory, { fabrics: [], mgmtInterface: '' }).find((c) => c.name === 'foreign-memory');
    expect(check?.detail).toContain((byIndex.get(3)?.fault ?? '').replace(/^foreign memory 88% \(no shard starts on it\): /, ''));
    // Memory a listed process holds is that process's, not foreign memory.
    expect(byIndex.get(1)).toMatchObject({ healthy: true, fault: '' });
    expect(byIndex.get(0)).toMatchObject({ healthy: true, fault: '' });
    // A fault stays the fault.
    expect(byIndex.get(7)).toMatchObject({ healthy: false, fault: 'Xid 79: GPU has fallen off the bus' });
  });

  it("judges at the agent's discovery.foreign_memory_share when given it", () => {
    const loose = buildStatusResponse(backend(), { foreignMemoryShare: 0.9 });
    expect(loose.gpus.find((g) => g.index === 3)?.fault).toBe('');
  });

  it("gives each shard's in flight and tokens per second as the agent last read them, and -1 for what it does not know", () => {
    const snapshot = (load: ShardSnapshot['load']): ShardSnapshot => shardSnapshot('s1', { load });
    expect(shardInfoOf(snapshot({ inFlight: 3, tokensPerSecond: 412.5 }))).toMatchObject({ inFlight: 3, tokensPerSecond: 412.5 });
    expect(shardInfoOf(snapshot({ inFlight: 0, tokensPerSecond: undefined }))).toMatchObject({ inFlight: 0, tokensPerSecond: -1 });
    expect(shardInfoOf(snapshot(undefined))).toMatchObject({ inFlight: -1, tokensPerSecond: -1 });
  });

  it('is given the agent\'s discovery.foreign_memory_share by the admin socket\'s Status call', async () => {
    const root = mkdtempSync(join(tmpdir(), 'llmgw-status-share-'));
    onTestFinished(() => rmSync(root, { recursive: true, force: true }));
    const socketPath = join(root, 'admin.sock');
    const status = async (share: number) => {
      const admin = await AdminServer.listen({ socketPath, group: '', backend: { ...backend(), foreignMemoryShare: share } as AdminBackend, logger: silentLogger });
      try {
        const res = await callUnaryJson<StatusResponseJson>(socketPath, 'Status', {});
        return res.gpus?.find((g) => g.index === 3)?.fault ?? '';
      } finally {
        await admin.close();
      }
    };
    // GPU 3 has 88% foreign memory: refused at a share of 0.05, served at 0.95, and ctl status says the same.
    expect(await status(0.05)).toMatch(/^foreign memory 88%/);
    expect(await status(0.95)).toBe('');
  });
});
