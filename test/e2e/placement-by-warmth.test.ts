import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import { ShardState } from '../../src/gen/llmgw/v1/agent_pb.js';
import { agentDirs, cleanUpEnginesAfterTest, startAgentProcess } from '../helpers/agent-process.js';
import { captureLogger } from '../helpers/capture-logger.js';
import { isRegister } from '../helpers/sim-shards.js';
import { startControlPlane } from '../helpers/start-control-plane.js';
import { TINY_DEPLOYMENT } from '../helpers/tiny-deployment.js';

/*
 * Issue 41, item 4: the reference control plane places a replica where its
 * expected time to READY is lowest, by what each real agent measured and
 * reports (Inventory.warmth, read from its own <state_dir>/warmth.json at
 * start). Three agents on this machine: node-c takes the replica first (the
 * only node then); its engine is killed, and the replica is placed again
 * once node-a (30 s measured) and node-b (0.05 s measured) are registered,
 * so the choice is made among all three, by no race.
 */


/** A warmth file as an agent writes it, with `ms` measured twice from `unmanaged` (no model store). */
function seedWarmth(stateDir: string, ms: number): void {
  mkdirSync(stateDir, { recursive: true, mode: 0o700 });
  const entry = { model: 'sim/tiny', engine: 'sim', profile: 'tiny', updatedAtMs: Date.now(), samples: { unmanaged: [ms, ms] } };
  writeFileSync(join(stateDir, 'warmth.json'), JSON.stringify({ version: 1, entries: [entry] }), { mode: 0o600 });
}

describe('placement by expected time to READY', () => {
  it('places the replica on the node whose agent measured the soonest READY, and says why', async () => {
    const cpLog = captureLogger('info');
    const first = 23_000 + Math.floor(Math.random() * 300) * 20;
    const { cp, url } = await startControlPlane({ deployment: TINY_DEPLOYMENT, retryBackoffMs: 20, maxRetryBackoffMs: 40, portRange: [first, first + 19], logger: cpLog.logger });
    const root = mkdtempSync(join(tmpdir(), 'llmgw-warm-place-'));
    onTestFinished(() => rmSync(root, { recursive: true, force: true }));
    const dirs = Object.fromEntries(['node-a', 'node-b', 'node-c'].map((n) => [n, agentDirs(join(root, n))]));
    for (const d of Object.values(dirs)) cleanUpEnginesAfterTest(d);

    // node-c alone: the replica goes there.
    const startedOnC = cp.waitFor('node-c', (m) => m.msg.case === 'shard' && m.msg.value.state === ShardState.READY, 30_000);
    startAgentProcess({ server: url, dirs: dirs['node-c']!, nodeId: 'node-c' });
    const onC = (await startedOnC).msg.value as { pid: number; shardId: string };

    seedWarmth(dirs['node-a']!.stateDir, 30_000);
    seedWarmth(dirs['node-b']!.stateDir, 50);
    const registered = ['node-a', 'node-b'].map((n) => cp.waitFor(n, isRegister, 30_000));
    startAgentProcess({ server: url, dirs: dirs['node-a']!, nodeId: 'node-a' });
    startAgentProcess({ server: url, dirs: dirs['node-b']!, nodeId: 'node-b' });
    const regs = await Promise.all(registered);
    // Each agent reports what it measured, from its own file.
    for (const r of regs) expect(r.msg.case === 'register' && r.msg.value.inventory?.warmth[0]?.learned[0]?.samples).toBe(2);

    // The engine on node-c dies: the replica is placed again, with all three nodes registered.
    const startedOnB = cp.waitFor('node-b', (m) => m.msg.case === 'shard' && m.msg.value.state === ShardState.READY, 30_000);
    process.kill(onC.pid, 'SIGKILL');
    const ready = (await startedOnB).msg.value as { shardId: string };
    expect(ready.shardId).toMatch(/^tiny-0-g2-r0$/);
    // Nothing else was started for it on node-a.
    expect(cp.messages('node-a').filter((m) => m.msg.case === 'shard')).toEqual([]);
    const placed = cpLog.records.find((r) => String(r.msg).startsWith('placed by expected time to READY'));
    // node-c measured its own start (its 200 ms load at least), so it comes between the two seeded nodes.
    expect(String(placed?.msg)).toMatch(/^placed by expected time to READY: node-b: 50ms from unmanaged, node-c: \S+ from unmanaged, node-a: 30s from unmanaged$/);
  }, 120_000);
});
