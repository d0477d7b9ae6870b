import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { create } from '@bufbuild/protobuf';
import { describe, expect, it, onTestFinished } from 'vitest';
import { writeInventoryCache } from '../../src/agent/inventory-cache.js';
import { type AgentMessage, GpuSchema, InventorySchema } from '../../src/gen/llmgw/v1/agent_pb.js';
import { type AgentDirs, agentDirs, cleanUpEnginesAfterTest, FAKE_NVIDIA_SMI, startAgentProcess } from '../helpers/agent-process.js';
import { until } from '../helpers/engine-processes.js';
import { startControlPlane } from '../helpers/start-control-plane.js';

function newDirs(): AgentDirs {
  const dirs = agentDirs(mkdtempSync(join(tmpdir(), 'llmgw-hwreg-')));
  // Registered first, so it runs last: after the agent and its engines are gone.
  onTestFinished(() => rmSync(dirs.root, { recursive: true, force: true }));
  cleanUpEnginesAfterTest(dirs);
  return dirs;
}

describe('hardware reads of a restarted agent', () => {
  it('with a cached inventory, run no nvidia-smi until the control plane has its Register (the rescan and the memory loop start after it)', async () => {
    const { cp, url } = await startControlPlane();
    const dirs = newDirs();
    // 7 cached GPUs, 8 on the (fake) box: the rescan then sends an inventory, which says it ran.
    await writeInventoryCache(dirs.stateDir, create(InventorySchema, { gpus: Array.from({ length: 7 }, (_, index) => create(GpuSchema, { index, uuid: `GPU-cached-${index}` })) }));
    const registered = join(dirs.root, 'registered');
    const calls = join(dirs.root, 'nvidia-smi-calls');
    // nvidia-smi as the agent runs it, noting whether the control plane had the Register by then.
    const wrapper = join(dirs.root, 'nvidia-smi');
    writeFileSync(wrapper, `#!/bin/sh\nif [ -e '${registered}' ]; then echo after >> '${calls}'; else echo before >> '${calls}'; fi\nexec '${FAKE_NVIDIA_SMI}' "$@"\n`);
    chmodSync(wrapper, 0o755);
    // Synchronously, before the control plane's answer to it can reach the agent.
    cp.on('message', (node: string, m: AgentMessage) => {
      if (node === 'node-a' && m.msg.case === 'register' && !existsSync(registered)) writeFileSync(registered, '');
    });
    const scanned = cp.waitFor('node-a', (m) => m.msg.case === 'inventory', 30_000);
    startAgentProcess({ server: url, dirs, env: { LLMGW_DISCOVERY_NVIDIA_SMI: wrapper } });
    const inv = (await scanned).msg.value as { gpus: unknown[] };
    expect(inv.gpus).toHaveLength(8);
    // The rescan's calls and the memory loop's.
    const lines = () => (existsSync(calls) ? readFileSync(calls, 'utf8').trim().split('\n') : []);
    await until(() => lines().length >= 3, 'the rescan and the memory loop to run nvidia-smi');
    expect(lines().every((l) => l === 'after')).toBe(true);
  });
});
