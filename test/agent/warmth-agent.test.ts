import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { create } from '@bufbuild/protobuf';
import { describe, expect, it, onTestFinished } from 'vitest';
import { type AgentMessage, type Inventory, ShardState, StopShardSchema } from '../../src/gen/llmgw/v1/agent_pb.js';
import { agentDirs, cleanUpEnginesAfterTest, startAgentProcess } from '../helpers/agent-process.js';
import { freePort } from '../helpers/engine-processes.js';
import { runCli } from '../helpers/run-cli.js';
import { isRegister, shardIs, simStart } from '../helpers/sim-shards.js';
import { startControlPlane } from '../helpers/start-control-plane.js';

/*
 * Issue 41, the learned time to READY, through the real agent: each launch
 * of a model is timed to READY, reported in Inventory.warmth with the rung
 * the node offers now, and kept across an agent restart (kill -9).
 */

const inventoryOf = (m: AgentMessage): Inventory | undefined => (m.msg.case === 'inventory' ? m.msg.value : m.msg.case === 'register' ? m.msg.value.inventory : undefined);
const warmthOf = (m: AgentMessage) => inventoryOf(m)?.warmth.find((w) => w.model === 'sim/m');

describe('the time to READY the agent learns', () => {
  it('is measured at every launch, reported with the rung the node offers now, and kept across a restart', async () => {
    const { cp, url } = await startControlPlane();
    onTestFinished(() => cp.close());
    const dirs = agentDirs(mkdtempSync(join(tmpdir(), 'llmgw-warmth-agent-')));
    onTestFinished(() => rmSync(dirs.root, { recursive: true, force: true }));
    cleanUpEnginesAfterTest(dirs);
    const first = startAgentProcess({ server: url, dirs });
    await cp.waitFor('node-a', isRegister, 20_000);

    for (const id of ['w-1', 'w-2']) {
      const ready = cp.waitFor('node-a', shardIs(id, ShardState.READY, ShardState.FAILED), 30_000);
      const learned = cp.waitFor('node-a', (m) => (warmthOf(m)?.learned[0]?.samples ?? 0) >= (id === 'w-1' ? 1 : 2), 30_000);
      cp.send('node-a', { case: 'start', value: simStart(id, await freePort(), { args: ['--load-time', '300ms'] }) });
      expect(((await ready).msg.value as { state: ShardState }).state).toBe(ShardState.READY);
      const w = warmthOf(await learned);
      // Serving while its shard is READY; the sim's 300 ms load is the floor of what was measured.
      expect(w).toMatchObject({ engine: 'sim', profile: 'sim-small', rung: 'serving', learned: [{ from: 'unmanaged' }] });
      expect(w?.learned[0]?.medianSeconds).toBeGreaterThanOrEqual(0.3);
      const stopped = cp.waitFor('node-a', shardIs(id, ShardState.STOPPED), 30_000);
      cp.send('node-a', { case: 'stop', value: create(StopShardSchema, { shardId: id }) });
      await stopped;
    }
    // ctl status --json carries it with the inventory.
    const status = await runCli(['ctl', 'status', '--json', '--socket', dirs.socket]);
    expect(JSON.stringify(JSON.parse(status.stdout).inventory?.warmth ?? [])).toContain('"from":"unmanaged"');

    first.kill('SIGKILL');
    await first.exited;
    const registered = cp.waitFor('node-a', isRegister, 20_000);
    startAgentProcess({ server: url, dirs });
    const w = warmthOf(await registered);
    // Nothing serves it now, and the agent has no model store.
    expect(w).toMatchObject({ model: 'sim/m', engine: 'sim', rung: 'unmanaged', learned: [{ from: 'unmanaged', samples: 2 }] });
  }, 120_000);
});
