import { describe, expect, it } from 'vitest';
import { readFileSync } from 'node:fs';
import { shardStatePath } from '../../src/lib/shard-layout.js';
import { isRunning } from '../helpers/engine-processes.js';
import { accepts, type GangCluster, type GangNode, gangTrouble, holdWhileWhole, RANK_SHARD, rankLogMatch, startGangCluster } from '../helpers/gang-cluster.js';
import { engineGangDeployment } from '../helpers/gang-deployment.js';

/*
 * Issue 47 (review engine-fidelity-3 E1), the port closed by design: a vLLM
 * data-parallel replica across two nodes, on two real agents and the
 * reference control plane, with gang_addr unset (the default). Rank 0's
 * double closes --data-parallel-rpc-port once every DP engine is up, as
 * vLLM does (V:vllm/v1/engine/utils.py:1202-1248; src/sim/sim-dp-handshake.ts),
 * so rank 1's agent must not read the closed port as rank 0 gone. On the
 * agent at 10e6215 rank 1 is broken about 2 s after rank 0 is READY
 * ("rendezvous …: connect ECONNREFUSED"), and the control plane fences it.
 *
 * The hold runs past rank 0's start-up deadline (the profile's
 * startup_timeout: a socket never seen open is evidence after it,
 * judge-peer.ts) by 10 gang rounds, and that is what the 2 minutes of the
 * issue's acceptance were: 2 m was the profile's startup_timeout. It is 25 s
 * here, and the hold 35 s from the launch, not 120 s: the doubles' gang is READY 3 to 6 s
 * after the start is sent (measured at load 3-4), so 25 s is still a margin
 * of 4 to 8 times, and a start slower than that fails the test (the shard
 * is FAILED at its startup_timeout), never passes it unseen.
 */

const STARTUP_TIMEOUT_MS = 25_000;
/**
 * From the ranks' launch, the moment rank 0's deadline counts from (each watching agent's own rank's
 * launch, gang-watch.ts rank0StartDeadlineMs): past that deadline by at least 10 rounds of 1 s. It was
 * counted from READY, 3 to 6 s after the launch, time the deadline does not wait for.
 */
const HOLD_MS = STARTUP_TIMEOUT_MS + 10_000;

/** When the agent on `node` launched its rank, by its state file's createdAtMs (launch-shard.ts): its gang watch's startedAtMs. */
function launchedAtMs(c: GangCluster, node: GangNode): number {
  const file = JSON.parse(readFileSync(shardStatePath(c.dirs[node].stateDir, RANK_SHARD[node]), 'utf8')) as { createdAtMs: number };
  expect(file.createdAtMs).toBeGreaterThan(0);
  return file.createdAtMs;
}

describe('a vLLM DP gang across two nodes, gang_addr unset (E1)', () => {
  it("stays READY past rank 0's start-up deadline with its rpc port closed: no gang_break, no fence", { timeout: HOLD_MS + 120_000 }, async () => {
    const c = await startGangCluster({ deployment: engineGangDeployment('vllm-dp', [], `${STARTUP_TIMEOUT_MS / 1000}s`), gangAddr: false, doubles: true });
    const closed = await rankLogMatch(c, 'node-a', /handshake socket on port (\d+) closed/);
    expect(await accepts(Number(closed[1]))).toBe(false);
    const launched = Math.max(launchedAtMs(c, 'node-a'), launchedAtMs(c, 'node-b'));
    await holdWhileWhole(c, launched + HOLD_MS - Date.now());
    expect(gangTrouble(c)).toEqual([]);
    expect(c.cp.cp.replicas().map((r) => [r.id, r.generation])).toEqual([['gang-0', 1]]);
    expect([isRunning(c.pids['node-a']), isRunning(c.pids['node-b'])]).toEqual([true, true]);
  });
});
