import { describe, it } from 'vitest';
import { ShardState } from '../../src/gen/llmgw/v1/agent_pb.js';
import { isRunning } from '../helpers/engine-processes.js';
import { accepts, gangTrouble, holdWhileWhole, rankLogMatch, shardOf, startGangCluster } from '../helpers/gang-cluster.js';
import { engineGangDeployment } from '../helpers/gang-deployment.js';

/*
 * Issue 47 (review engine-fidelity-3 E1), the slow rank 0 that is no broken
 * gang, on two real agents, the reference control plane and the vLLM double:
 * - rank 0's agent silent for 6 s (an upgrade, a restart), within the
 *   documented 10 s grace, while its engine serves and has closed its DP rpc
 *   port by design (src/sim/sim-dp-handshake.ts). At 10e6215 the closed port
 *   "agrees" that rank 0 is gone and the gang breaks after about 2 s.
 * - a TP rank 0 that binds its TCPStore late, as vLLM's does once its
 *   workers have imported vLLM (V:vllm/distributed/parallel_state.py:1620-1626,
 *   1685-1691; tens of seconds). At 10e6215 rank 1 is READY at its settle
 *   (10 s by default) and then broken by the still-closed port, with rank 0
 *   still starting. Here the settle is 1 s (the tests' worker_settle), so a
 *   store bound 12 s after launch leaves rank 1 READY for 10 rounds of the
 *   gang watch before it; the agent at 10e6215 broke it in under 3.
 *
 * The two run side by side (it.concurrent), each on a cluster of its own
 * (its own control plane, agents, doubles and port range): most of each is
 * waiting (the 6 s stop, the 12 s bind, the holds), which they now wait out
 * together. Each cluster ends with its own test (its context's
 * onTestFinished), and each takes expect from its context: vitest tracks no
 * concurrent test in its globals.
 */

const AFTER_MS = 8_000;
/** When rank 0 binds its store, after its launch: well after rank 1's 1 s settle. */
const STORE_BIND_MS = 12_000;

describe('a slow rank 0 is not a broken gang (E1)', () => {
  it.concurrent("vLLM DP, gang_addr set: rank 0's agent stopped for 6 s does not break the gang", { timeout: 150_000 }, async ({ expect, onTestFinished }) => {
    const c = await startGangCluster({ deployment: engineGangDeployment('vllm-dp'), gangAddr: true, doubles: true, onEnd: onTestFinished });
    const closed = await rankLogMatch(c, 'node-a', /handshake socket on port (\d+) closed/);
    expect(await accepts(Number(closed[1]))).toBe(false);
    const agentA = c.agents['node-a'];
    process.kill(agentA.pid, 'SIGSTOP');
    try {
      await new Promise((r) => setTimeout(r, 6_000));
    } finally {
      process.kill(agentA.pid, 'SIGCONT');
    }
    // Several gang rounds after it answers again: nothing broke meanwhile or since.
    await holdWhileWhole(c, AFTER_MS);
    expect(gangTrouble(c)).toEqual([]);
    expect(c.cp.cp.replicas().map((r) => [r.id, r.generation])).toEqual([['gang-0', 1]]);
    expect([isRunning(c.pids['node-a']), isRunning(c.pids['node-b'])]).toEqual([true, true]);
  });

  it.concurrent('vLLM TP, gang_addr unset: a rank 0 that binds its store 12 s after launch starts without a break', { timeout: 150_000 }, async ({ expect, onTestFinished }) => {
    const started = Date.now();
    const c = await startGangCluster({ deployment: engineGangDeployment('vllm-tp', ['--sim-store-bind-after', `${STORE_BIND_MS / 1000}s`]), gangAddr: false, doubles: true, readyTimeoutMs: 90_000, onEnd: onTestFinished });
    // The store came late, and rank 1 was READY (its settle) before it: the window the watch must not judge in.
    await rankLogMatch(c, 'node-a', /rendezvous listening on port/);
    expect(Date.now() - started).toBeGreaterThanOrEqual(STORE_BIND_MS);
    const readyAt = (node: 'node-a' | 'node-b', id: string) =>
      c.cp.cp.messages(node).findIndex((m) => shardOf(m)?.shardId === id && shardOf(m)?.state === ShardState.READY);
    expect(readyAt('node-a', 'gang-0-g1-r0')).toBeGreaterThanOrEqual(0);
    expect(readyAt('node-b', 'gang-0-g1-r1')).toBeGreaterThanOrEqual(0);
    await holdWhileWhole(c, AFTER_MS);
    expect(gangTrouble(c)).toEqual([]);
    expect(c.cp.cp.replicas().map((r) => [r.id, r.generation])).toEqual([['gang-0', 1]]);
    expect([isRunning(c.pids['node-a']), isRunning(c.pids['node-b'])]).toEqual([true, true]);
  });
});
