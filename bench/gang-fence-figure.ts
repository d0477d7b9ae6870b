/**
 * `--only 15` (issue 40): how long a two-node gang lives on after its first
 * rank dies, from that death to the last rank's engine gone, beside what
 * the engines would do alone (a rank blocked in NCCL waits for the
 * watchdog: 300 s in SGLang, 600 s in PyTorch's, or, as vLLM issue 32136
 * shows, for ever). Two real agents and the reference control plane; the
 * sim ranks never exit when a peer goes (sim-rendezvous.ts). Two cases:
 * the leader's engine SIGKILLed (its own agent reports it, the control plane
 * fences the worker) and the leader's whole node gone (agent and engine: the
 * worker's agent sees it through the gang watch). Runs of each: 5, quick 3.
 * A third, the leader's node silent (issue 47 item 2): its agent and engine
 * SIGSTOPped and the engine's listen queue full, so every connect times out
 * with no reset, as after a power loss or a partition; the figure is the
 * time to the worker's agent reporting the gang broken (the fence follows).
 */
import { readFileSync } from 'node:fs';
import type { Socket } from 'node:net';
import { join } from 'node:path';
import { ControlPlane } from '../src/control/control-plane.js';
import { type AgentMessage, ShardState } from '../src/gen/llmgw/v1/agent_pb.js';
import { isRunning, until } from '../test/helpers/engine-processes.js';
import { gangDeployment } from '../test/helpers/gang-deployment.js';
import { fillListenQueue } from '../test/helpers/listen-queue.js';
import { newRoot, spawnAgent } from './bench-support.js';
import type { BenchRow } from './fleet-figure.js';

const TARGET_MS = 5_000;

const DEPLOYMENT = gangDeployment();

const shard = (m: AgentMessage) => (m.msg.case === 'shard' ? m.msg.value : undefined);

type How = 'leader engine' | 'leader node' | 'leader node silent';

/** One gang up, one way of breaking it, the time from the break to the worker's engine gone (silent: to the worker's report). */
async function oneBreak(how: How): Promise<number> {
  const cp = new ControlPlane({ placementDelayMs: 0, deployment: DEPLOYMENT, retryBackoffMs: 600_000 });
  const held: Socket[] = [];
  const stopped: number[] = [];
  try {
    const { url } = await cp.listen({ host: '127.0.0.1', port: 0 });
    const ready = (node: string, id: string) => cp.waitFor(node, (m) => shard(m)?.shardId === id && shard(m)?.state === ShardState.READY, 60_000);
    const r0 = ready('node-a', 'gang-0-g1-r0');
    const r1 = ready('node-b', 'gang-0-g1-r1');
    const rootA = newRoot('f15a');
    const a = spawnAgent(url, rootA, { nodeId: 'node-a', heartbeat: '500ms', extraYaml: 'gang_addr: 127.0.0.1:0\n' });
    spawnAgent(url, newRoot('f15b'), { nodeId: 'node-b', heartbeat: '500ms', extraYaml: 'gang_addr: 127.0.0.1:0\n' });
    const leaderPid = (shard(await r0) as { pid: number }).pid;
    const workerPid = (shard(await r1) as { pid: number }).pid;
    if (how === 'leader node silent') {
      const log = readFileSync(join(rootA.logDir, 'shards', 'gang-0-g1-r0.log'), 'utf8');
      const store = Number(/rendezvous listening on port (\d+)/.exec(log)?.[1]);
      stopped.push(leaderPid, a.pid);
      for (const pid of stopped) process.kill(pid, 'SIGSTOP');
      await fillListenQueue(store, held);
      const reported = cp.waitFor('node-b', (m) => shard(m)?.shardId === 'gang-0-g1-r1' && shard(m)?.gangBreak !== undefined, 60_000);
      const t0 = performance.now();
      await reported;
      return performance.now() - t0;
    }
    const t0 = performance.now();
    if (how === 'leader node') {
      a.kill('SIGKILL');
      await a.exited;
    }
    process.kill(leaderPid, 'SIGKILL');
    const from = how === 'leader node' ? performance.now() : t0;
    await until(() => !isRunning(workerPid), 'the worker engine to be gone', 60_000);
    return performance.now() - from;
  } finally {
    for (const pid of stopped) if (isRunning(pid)) process.kill(pid, 'SIGCONT');
    for (const s of held) s.destroy();
    await cp.close();
  }
}

export async function gangFenceFigure(rows: BenchRow[], notes: string[], quick: boolean): Promise<void> {
  const runs = quick ? 3 : 5;
  for (const how of ['leader engine', 'leader node', 'leader node silent'] as const) {
    const took: number[] = [];
    for (let i = 0; i < runs; i++) took.push(await oneBreak(how));
    took.sort((x, y) => x - y);
    const median = took[Math.floor(took.length / 2)] as number;
    const max = took.at(-1) as number;
    const silent = how === 'leader node silent';
    rows.push({
      figure: silent
        ? `15 gang of 2, silent node (leader's agent and engine SIGSTOPped, listen queue full) → the other rank's agent reports the gang broken (${runs} runs)`
        : `15 gang of 2, ${how} SIGKILLed → the other rank's engine gone (${runs} runs)`,
      measured: `median ${(median / 1000).toFixed(2)} s, max ${(max / 1000).toFixed(2)} s`,
      reference: 'engines alone: SGLang --watchdog-timeout 300 s; PyTorch NCCL watchdog 600 s; vLLM headless never (issue 32136)',
      target: `≤ ${TARGET_MS / 1000} s`,
      met: max <= TARGET_MS,
    });
  }
  notes.push('15: two real agents and the reference control plane on one machine; the sim ranks hold a TCP rendezvous and never exit when a peer goes (sim-rendezvous.ts). "leader node": the agent is SIGKILLed first, then its engine; the time counts from the engine kill. "silent node": the leader\'s agent and engine are SIGSTOPped and the engine\'s accept queue filled, so connects time out with no reset; the time counts from the queue full to the worker\'s gang_break at the control plane.');
}
