import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { create } from '@bufbuild/protobuf';
import { DrainShardSchema, ShardState, type ShardStatus, type StartShard } from '../../../src/gen/llmgw/v1/agent_pb.js';
import { simStart } from '../../helpers/sim-shards.js';
import {
  type FaultHarness,
  type Scenario,
  type ScenarioOutcome,
  freePort,
  health,
  isRunning,
  processesWritingUnder,
  sleep,
  startTraffic,
} from './fault-harness.js';

/**
 * SIGKILL of the agent at every phase of a shard's life, then a restart.
 * Whatever the phase, the restarted agent must end with one engine per
 * shard, READY (adopted, same pid, when the engine was already serving) or
 * reported FAILED with a reason, and nothing left behind.
 */

const S = ShardState;

function stateFileOf(h: FaultHarness, id: string): string {
  return join(h.dirs.stateDir, 'shards', `${id}.json`);
}

/**
 * Restarts the agent and plays the control plane's part: a shard listed in
 * Register is waited for; one that is not is started again, as a control
 * plane does for a shard it placed and no longer sees.
 */
async function restartAndConverge(h: FaultHarness, spec: StartShard): Promise<{ pid: number; adopted: boolean }> {
  const id = spec.shardId;
  const registered = h.waitRegister();
  h.startAgent();
  const reg = await registered;
  const listed = reg.runningShards.find((r) => r.shardId === id);
  if (listed) {
    if (listed.state === S.READY) return { pid: listed.pid, adopted: true };
    const st = await h.waitShard(id, [S.READY, S.FAILED, S.EXITED]);
    assert.equal(S[st.state], 'READY', `adopted shard ${id} did not become READY: ${st.error}`);
    return { pid: st.pid, adopted: true };
  }
  // A FAILED about the engine recovery ended (sent right after Register) is
  // about the old engine, not the start below.
  const ready = h.cp.waitFor(
    'node-a',
    (m) => m.msg.case === 'shard' && m.msg.value.shardId === id && (m.msg.value.state === S.READY || (m.msg.value.state === S.FAILED && !/after an agent restart|while the agent was down/.test(m.msg.value.error))),
    30_000,
  ).then((m) => m.msg.value as ShardStatus);
  h.start(spec);
  const st = await ready;
  assert.equal(S[st.state], 'READY', `shard ${id} started again after the restart did not become READY: ${st.error}`);
  return { pid: st.pid, adopted: false };
}

async function bootWithShard(h: FaultHarness, args?: string[]): Promise<{ spec: StartShard; pid: number; port: number }> {
  await h.boot();
  const port = await freePort();
  const spec = simStart('s1', port, { args });
  const ready = h.waitShard('s1', [S.READY, S.FAILED]);
  h.start(spec);
  const st = await ready;
  assert.equal(S[st.state], 'READY', st.error);
  return { spec, pid: st.pid, port };
}

export const agentKilledDuringValidate: Scenario = {
  name: 'agent-killed-validate',
  title: 'an agent SIGKILLed while validating a start comes back with one engine for the shard, READY',
  timeoutMs: 60_000,
  async run(h) {
    await h.boot();
    const port = await freePort();
    const spec = simStart('s1', port);
    h.start(spec);
    // The command is on its way or being validated: nothing launched yet, most runs.
    await sleep(Math.floor(Math.random() * 8));
    const launched = processesWritingUnder(h.dirs.logDir).length > 0;
    await h.killAgent();
    const { pid } = await restartAndConverge(h, spec);
    h.keepsServing('s1', pid, port);
    return { dataLost: 0, hit: launched ? 'launch' : 'validate' };
  },
};

export const agentKilledDuringLaunch: Scenario = {
  name: 'agent-killed-launch',
  title: 'an agent SIGKILLed the moment its engine process appears leaves no engine nobody can find',
  timeoutMs: 60_000,
  async run(h) {
    await h.boot();
    const port = await freePort();
    const spec = simStart('s1', port, { args: ['--load-time', '1s'] });
    h.start(spec);
    // As soon as the engine exists: the state file may or may not be written yet.
    const deadline = Date.now() + 20_000;
    while (processesWritingUnder(h.dirs.logDir).length === 0) {
      assert.ok(Date.now() < deadline, 'the engine never appeared');
      await new Promise((r) => setImmediate(r));
    }
    const hadStateFile = existsSync(stateFileOf(h, 's1'));
    await h.killAgent();
    const { pid } = await restartAndConverge(h, spec);
    h.keepsServing('s1', pid, port);
    return { dataLost: 0, hit: hadStateFile ? 'launch, state file written' : 'launch, before the state file' };
  },
};

export const agentKilledWhileLoading: Scenario = {
  name: 'agent-killed-loading',
  title: 'an agent SIGKILLed while its engine loads adopts the same engine and brings it to READY',
  timeoutMs: 60_000,
  async run(h) {
    await h.boot();
    const port = await freePort();
    const spec = simStart('s1', port, { args: ['--load-time', '2s'] });
    const starting = h.waitShard('s1', [S.STARTING]);
    h.start(spec);
    const { pid } = await starting;
    assert.equal(await health(port), 0, 'still loading: the port must be closed');
    await h.killAgent();
    assert.ok(isRunning(pid), 'the engine died with the agent');
    const after = await restartAndConverge(h, spec);
    assert.deepEqual(after, { pid, adopted: true }, 'the loading engine was replaced instead of adopted');
    h.keepsServing('s1', pid, port);
    return { dataLost: 0 };
  },
};

export const agentKilledWhileReady: Scenario = {
  name: 'agent-killed-ready',
  title: 'an agent SIGKILLed while its engine serves adopts it with the same pid and no request fails',
  timeoutMs: 60_000,
  async run(h) {
    const { spec, pid, port } = await bootWithShard(h);
    const traffic = startTraffic(port);
    await sleep(200);
    await h.killAgent();
    const after = await restartAndConverge(h, spec);
    await sleep(200);
    const t = await traffic.stop();
    assert.deepEqual(after, { pid, adopted: true });
    assert.ok(t.ok > 0, 'no request got through');
    h.keepsServing('s1', pid, port);
    return { dataLost: t.failed };
  },
};

export const agentKilledWhileDraining: Scenario = {
  name: 'agent-killed-draining',
  title: 'an agent SIGKILLed while draining a shard adopts the engine instead of losing or doubling it',
  timeoutMs: 60_000,
  async run(h) {
    const { spec, pid, port } = await bootWithShard(h);
    const draining = h.waitShard('s1', [S.DRAINING]);
    h.send({ case: 'drain', value: create(DrainShardSchema, { shardId: 's1' }) });
    await draining;
    await h.killAgent();
    const after = await restartAndConverge(h, spec);
    assert.deepEqual(after, { pid, adopted: true });
    h.keepsServing('s1', pid, port);
    return { dataLost: 0 };
  },
};

export const agentKilledWhileStopping: Scenario = {
  name: 'agent-killed-stopping',
  title: 'an agent SIGKILLed in the middle of stopping an engine finishes the stop when told again, leaving nothing',
  timeoutMs: 60_000,
  async run(h) {
    // The engine ignores SIGTERM, so the agent dies inside the grace period.
    const { pid } = await bootWithShard(h, ['--load-time', '200ms', '--ignore-sigterm', '--spawn-child']);
    const stopping = h.waitShard('s1', [S.STOPPING]);
    h.stop('s1', 10_000);
    await stopping;
    await sleep(100);
    await h.killAgent();
    assert.ok(isRunning(pid), 'the engine ignoring SIGTERM is gone already');
    const registered = h.waitRegister();
    h.startAgent();
    const reg = await registered;
    assert.deepEqual(
      reg.runningShards.map((r) => [r.shardId, r.pid]),
      [['s1', pid]],
      'the half-stopped engine must be listed: it still holds its GPUs',
    );
    // The control plane still wants it stopped and says so again.
    const stopped = h.waitShard('s1', [S.STOPPED, S.FAILED]);
    h.stop('s1', 500);
    const st = await stopped;
    assert.equal(S[st.state], 'STOPPED', st.error);
    assert.deepEqual(processesWritingUnder(h.dirs.logDir), []);
    return { dataLost: 0 } satisfies ScenarioOutcome;
  },
};

/** The window hit depends on timing: validate and launch run twice in `npm test`. */
agentKilledDuringValidate.testRuns = 2;
agentKilledDuringLaunch.testRuns = 2;

export const agentKilledScenarios: Scenario[] = [
  agentKilledDuringValidate,
  agentKilledDuringLaunch,
  agentKilledWhileLoading,
  agentKilledWhileReady,
  agentKilledWhileDraining,
  agentKilledWhileStopping,
].map((s) => Object.assign(s, { soakWeight: 2.5 }));
