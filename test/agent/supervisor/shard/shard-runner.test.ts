import { existsSync } from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';
import { launchShard } from '../../../../src/agent/supervisor/launch/launch-shard.js';
import { ShardRunner } from '../../../../src/agent/supervisor/shard/shard-runner.js';
import type { ShardTransition } from '../../../../src/agent/supervisor/shard/shard-snapshot.js';
import { ShardState } from '../../../../src/gen/llmgw/v1/agent_pb.js';
import { silentLogger } from '../../../../src/lib/logger.js';
import {
  simWatch,
  freePort,
  groupMembers,
  isRunning,
  killEverything,
  removeDir,
  shardSpec,
  simPlan,
  tempDirs,
  testConfig,
} from '../../../helpers/engine-processes.js';

let dirs: ReturnType<typeof tempDirs> | undefined;
const runners: ShardRunner[] = [];
afterEach(async () => {
  for (const r of runners.splice(0)) r.detach('agent-closing');
  if (!dirs) return;
  await killEverything(dirs.root);
  removeDir(dirs.root);
  dirs = undefined;
});

/** A runner with no supervisor around it: its own context, transitions recorded by name. */
async function launchAlone(id: string, args: string[], servesHttp: boolean) {
  dirs = tempDirs();
  const seen: string[] = [];
  const ctx = {
    config: testConfig(dirs),
    log: silentLogger,
    onTransition: (t: ShardTransition) => seen.push(ShardState[t.to]),
    onStatus: () => {},
  };
  const port = servesHttp ? await freePort() : 0;
  const plan = simPlan(servesHttp ? ['--port', String(port), ...args] : ['--worker', ...args]);
  const runner = new ShardRunner(ctx, await launchShard(ctx, shardSpec(id, port), { plan, servesHttp, watch: servesHttp ? simWatch(port) : undefined }, undefined, new AbortController().signal));
  runners.push(runner);
  runner.begin('launched');
  return { runner, seen, port };
}

describe('ShardRunner, alone with a real sim engine', () => {
  it('launches, becomes READY by its own probes, and stops: STARTING → READY → STOPPING → STOPPED, group gone, state file gone', async () => {
    const { runner, seen, port } = await launchAlone('alone', ['--load-time', '300ms'], true);
    expect(runner.currentState).toBe(ShardState.STARTING);
    expect(existsSync(runner.statePath)).toBe(true);
    await runner.settle({ timeoutMs: 30_000 });
    expect(runner.currentState).toBe(ShardState.READY);
    // It serves where the runner derived it would, and reads the engine's own gauge.
    expect((await fetch(`http://127.0.0.1:${port}/health`)).status).toBe(200);
    expect(await runner.inFlight()).toBe(0);
    const after = await runner.stop({ graceMs: 5000 });
    expect(after).toMatchObject({ state: ShardState.STOPPED, running: false });
    expect(seen).toEqual(['STARTING', 'READY', 'STOPPING', 'STOPPED']);
    expect(groupMembers(runner.pgid)).toEqual([]);
    expect(existsSync(runner.statePath)).toBe(false);
  });

  it('makes a worker rank READY by staying alive, and detach() leaves its engine running', async () => {
    const { runner, seen } = await launchAlone('worker', [], false);
    await runner.settle({ settleMs: 200 });
    expect(seen).toEqual(['STARTING', 'READY']);
    runner.detach('agent-closing');
    // Watching stopped, engine untouched: an agent restart must not interrupt served traffic.
    await new Promise((r) => setTimeout(r, 300));
    expect(isRunning(runner.pid)).toBe(true);
    expect(runner.currentState).toBe(ShardState.READY);
  });
});
