import { describe, expect, it } from 'vitest';
import { ShardState } from '../../src/gen/llmgw/v1/agent_pb.js';
import { isRunning, until } from '../helpers/engine-processes.js';
import { fillListenQueue, RANK_SHARD, rankLogMatch, shardHistory, shardOf, startGangCluster } from '../helpers/gang-cluster.js';
import { engineGangDeployment, gangDeployment } from '../helpers/gang-deployment.js';

/*
 * Issue 47 items 2 and 3 on two real agents and the reference control plane:
 * - a node that goes silent without a TCP reset (power lost, cut off): its
 *   agent and its engine SIGSTOPped and the engine's listen queue full, so
 *   every connect times out rather than being refused. Rank 1's agent must
 *   report the gang broken; the time it takes is printed (bench 15's "silent
 *   node" row holds the figure: ≤ 5 s is the target), the bound here is a
 *   safety net.
 * - the peer that died first: SGLang's ranks die within a second of a peer's
 *   death (src/sim/fake-sglang.ts; S:python/sglang/srt/managers/scheduler.py:5066-5069),
 *   usually before the 1 s gang poll. Rank 0's agent must name rank 1, whose
 *   engine was SIGKILLed, as the first to go, not report its own engine's end
 *   alone (or, when the gang watch's round sees rank 1's end first, report the gang
 *   broken by rank 1 while its own engine still runs). Rank 1's node has lost its control-plane link (held quiet), so no
 *   fence overtakes rank 0's own report: that is when the naming matters. At 10e6215 it reports FAILED "killed by SIGKILL" with no gang_break.
 */

const SAFETY_NET_MS = 30_000;

describe('the gang watch on a silent node and on the peer that died first', () => {
  it("a silent rank 0 (agent and engine stopped, listen queue full) is reported by rank 1's agent", { timeout: 150_000 }, async () => {
    const c = await startGangCluster({ deployment: gangDeployment(), gangAddr: true });
    const store = Number((await rankLogMatch(c, 'node-a', /rendezvous listening on port (\d+)/))[1]);
    const stopped = [c.pids['node-a'], c.agents['node-a'].pid];
    try {
      process.kill(c.pids['node-a'], 'SIGSTOP');
      process.kill(c.agents['node-a'].pid, 'SIGSTOP');
      await fillListenQueue(store);
      const t0 = performance.now();
      const broken = await c.cp.cp.waitFor('node-b', (m) => shardOf(m)?.shardId === RANK_SHARD['node-b'] && shardOf(m)?.gangBreak !== undefined, SAFETY_NET_MS);
      const tookMs = performance.now() - t0;
      console.log(`silent node: rank 1's agent reported the gang broken ${(tookMs / 1000).toFixed(2)} s after rank 0's node went silent`);
      expect(shardOf(broken)?.gangBreak).toMatchObject({ rank: 0, nodeId: 'node-a', stalled: false });
    } finally {
      for (const pid of stopped) if (isRunning(pid)) process.kill(pid, 'SIGCONT');
    }
  });

  it("an SGLang rank 1 engine SIGKILLed: rank 0's agent names rank 1 as the first to go", { timeout: 150_000 }, async () => {
    const c = await startGangCluster({ deployment: engineGangDeployment('sglang-tp', ['--skip-server-warmup']), gangAddr: true, doubles: true, heldLink: 'node-b' });
    const r0 = RANK_SHARD['node-a'];
    // Rank 0's first report after READY. Node-b's link to the control plane is held (quiet, not closed), so
    // the control plane hears of rank 1's end only from rank 0's agent and cannot fence rank 0 first: a
    // fence arriving within the second rank 0's engine takes to follow is a stop (STOPPING), correctly, and
    // says nothing of this judgement. Rank 0's agent still reaches rank 1's agent directly; so a STOPPING
    // here is a failure.
    const after = [ShardState.FAILED, ShardState.UNHEALTHY, ShardState.EXITED, ShardState.STOPPING, ShardState.STOPPED];
    const ended = c.cp.cp.waitFor('node-a', (m) => shardOf(m)?.shardId === r0 && after.includes(shardOf(m)?.state ?? ShardState.UNSPECIFIED), SAFETY_NET_MS);
    c.link?.hold();
    process.kill(c.pids['node-b'], 'SIGKILL');
    // Rank 0's engine goes too, as SGLang's does when its gloo peer closes.
    await until(() => !isRunning(c.pids['node-a']), "rank 0's engine to end", SAFETY_NET_MS);
    const first = shardOf(await ended.catch((e: Error) => Promise.reject(new Error(`${e.message}; node-a said: ${shardHistory(c, 'node-a')}`))));
    // The relay held: the control plane had nothing from rank 1's agent about its end when rank 0's report came.
    expect(c.cp.cp.messages('node-b').filter((m) => shardOf(m)?.shardId === RANK_SHARD['node-b'] && shardOf(m)?.state === ShardState.FAILED)).toEqual([]);
    c.link?.release();
    // And, released, what it held arrives: the link was node-b's path to the control plane, quiet, not lost.
    await c.cp.cp.waitFor('node-b', (m) => shardOf(m)?.shardId === RANK_SHARD['node-b'] && shardOf(m)?.state === ShardState.FAILED, SAFETY_NET_MS);
    // Two orders are right, and which comes depends on when rank 0's engine follows within the watch's 1 s poll:
    // - its engine ended first: the death report names rank 1 as the first to go (first-to-go.ts);
    // - the gang watch's round saw rank 1 FAILED while rank 0's engine still ran: UNHEALTHY names rank 1
    //   (not the first to go of an end that had not come; the control plane fences the gang on it).
    // Wrong either way: rank 0 reporting its own end alone, or naming anyone else. A CI run at 53351c3 got the second.
    const ownEnd = first?.state === ShardState.FAILED || first?.state === ShardState.EXITED;
    console.log(`rank 0 named rank 1 in its ${first ? ShardState[first.state] : '?'} report (${ownEnd ? 'its engine ended first' : 'the gang watch saw rank 1 first'})`);
    expect(first?.gangBreak, `rank 0 reported ${first ? ShardState[first.state] : '?'} "${first?.error}" without naming its peer`).toMatchObject({ rank: 1, nodeId: 'node-b', shardId: RANK_SHARD['node-b'], stalled: false, firstToGo: ownEnd });
    if (!ownEnd) expect(first?.state).toBe(ShardState.UNHEALTHY);
    expect(first?.gangBreak?.reason).toMatch(/^rank 1 on node-b /);
    // What the control plane and `ctl status` show as the shard's error (the shard is soon fenced and gone from the node).
    expect(first?.error).toMatch(/gang broken: rank 1 on node-b /);
  });
});
