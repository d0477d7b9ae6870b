import assert from 'node:assert/strict';
import { create } from '@bufbuild/protobuf';
import { DurationSchema } from '@bufbuild/protobuf/wkt';
import { ShardState } from '../../../src/gen/llmgw/v1/agent_pb.js';
import { VLLM_FIXTURE_YAML } from './control-messages.js';
import { simStart } from '../../helpers/sim-shards.js';
import { type Scenario, freePort, health, isRunning, processesWritingUnder, sleep, until } from './fault-harness.js';

/**
 * Engines that misbehave: crash over and over, daemonize, or never open
 * their port. The agent reports each with a reason, never restarts one on
 * its own (the control plane decides), and leaves no process behind.
 */

const S = ShardState;

export const crashLoop: Scenario = {
  name: 'engine-crash-loop',
  title: 'an engine that crashes on every start is reported FAILED with its exit code each time and never restarted by the agent',
  timeoutMs: 60_000,
  async run(h) {
    await h.boot();
    const port = await freePort();
    const spec = simStart('loop', port, { args: ['--load-time', '10s', '--fail-after', '300ms', '--exit-code', '3'] });
    const pids = new Set<number>();
    for (let round = 0; round < 3; round++) {
      const failed = h.waitShard('loop', [S.FAILED, S.READY]);
      h.start(spec);
      const st = await failed;
      assert.equal(S[st.state], 'FAILED');
      assert.equal(st.exitCode, 3);
      assert.match(st.error, /engine exited with code 3 while starting/);
      assert.match(st.lastOutput.join('\n'), /CUDA error/);
      pids.add(st.pid);
      // Left alone, the agent does nothing more: no relaunch, no process.
      await sleep(round === 0 ? 1500 : 300);
      assert.deepEqual(processesWritingUnder(h.dirs.logDir), [], 'the agent restarted the engine on its own');
    }
    const starts = h.cp.messages('node-a').filter((m) => m.msg.case === 'shard' && m.msg.value.shardId === 'loop' && m.msg.value.state === S.STARTING);
    assert.equal(starts.length, 3, 'one launch per StartShard, no more');
    assert.equal(pids.size, 3);
    return { dataLost: 0 };
  },
};

export const forkAndExit: Scenario = {
  name: 'engine-fork-and-exit',
  title: 'an engine that forks and exits its parent is reported FAILED and its surviving process group is stopped',
  timeoutMs: 60_000,
  async run(h) {
    await h.boot({ extraYaml: VLLM_FIXTURE_YAML });
    const port = await freePort();
    const failed = h.waitShard('forky', [S.FAILED, S.READY]);
    const forky = simStart('forky', port, { args: ['--fork-and-exit'] });
    if (forky.profile) forky.profile.engine = 'vllm';
    h.start(forky);
    const st = await failed;
    assert.equal(S[st.state], 'FAILED');
    assert.match(st.error, /engine exited with code 0 while starting/);
    // FAILED means gone: the forked server must not keep the GPU and port.
    await until(() => processesWritingUnder(h.dirs.logDir).length === 0, 'the forked server to be stopped with its group', 10_000);
    assert.equal(await health(port), 0, 'the forked server still serves');
    // A repeat start works: nothing holds the port.
    const again = h.waitShard('forky', [S.FAILED, S.READY]);
    h.start(simStart('forky', port));
    const st2 = await again;
    assert.equal(S[st2.state], 'READY', st2.error);
    h.keepsServing('forky', st2.pid, port);
    return { dataLost: 0 };
  },
};

export const neverOpensPort: Scenario = {
  name: 'engine-never-ready',
  title: 'an engine that never opens its port is reported FAILED after its startup timeout, keeps its GPU until stopped, and a stop leaves nothing',
  timeoutMs: 60_000,
  async run(h) {
    await h.boot();
    const port = await freePort();
    const failed = h.waitShard('mute', [S.FAILED, S.READY]);
    const mute = simStart('mute', port, { args: ['--never-ready'] });
    if (mute.profile) mute.profile.startupTimeout = create(DurationSchema, { seconds: 2n });
    h.start(mute);
    const st = await failed;
    assert.equal(S[st.state], 'FAILED');
    assert.match(st.error, /not ready after 2s/);
    // Left running for the control plane to decide; while it runs, its GPU is not handed out again.
    if (isRunning(st.pid)) {
      const other = h.waitShard('other', [S.FAILED, S.STARTING, S.READY]);
      h.expectFailed.add('other');
      h.start(simStart('other', await freePort()));
      const o = await other;
      assert.equal(S[o.state], 'FAILED', 'a second engine was launched on the GPU the first still holds');
      assert.match(o.error, /GPU 0 is held by shard mute/);
    }
    const stopped = h.waitShard('mute', [S.STOPPED]);
    h.stop('mute', 1000);
    await stopped;
    assert.deepEqual(processesWritingUnder(h.dirs.logDir), []);
    return { dataLost: 0 };
  },
};

export const engineScenarios: Scenario[] = [crashLoop, forkAndExit, neverOpensPort];
