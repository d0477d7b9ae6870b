/**
 * Figures 2 and 4: the agent's restart. 2: agent start → every adopted
 * shard READY again after a SIGKILL of the agent (1 and 8 shards), beside
 * the engine's own /health latency. 4: SIGTERM → agent exit with 8 engines
 * running.
 */
import { ShardState } from '../src/gen/llmgw/v1/agent_pb.js';
import { isRegister } from '../test/helpers/sim-shards.js';
import { controlPlane, median, newRoot, sleep, spawnAgent, startShards } from './bench-support.js';
import { ms } from './command-timing.js';
import type { BenchRow } from './fleet-figure.js';

async function adoptedReady(n: number, rounds: number): Promise<number[]> {
  const { cp, url } = await controlPlane();
  const dirs = newRoot(`f2-${n}`);
  let agent = spawnAgent(url, dirs);
  await cp.waitFor('node-a', isRegister, 30_000);
  const { ids } = await startShards(cp, 'node-a', n);
  const results: number[] = [];
  for (let r = 0; r < rounds; r++) {
    agent.kill('SIGKILL');
    await agent.exited;
    const pending = new Set(ids);
    let doneAt = 0;
    const done = new Promise<void>((resolve) => {
      const onMessage = (nodeId: string, m: import('../src/gen/llmgw/v1/agent_pb.js').AgentMessage) => {
        if (nodeId !== 'node-a') return;
        if (m.msg.case === 'register') {
          for (const s of m.msg.value.runningShards) if (s.state === ShardState.READY) pending.delete(s.shardId);
        } else if (m.msg.case === 'shard' && m.msg.value.state === ShardState.READY) {
          pending.delete(m.msg.value.shardId);
        }
        if (pending.size === 0) {
          doneAt = Date.now();
          cp.off('message', onMessage);
          resolve();
        }
      };
      cp.on('message', onMessage);
    });
    agent = spawnAgent(url, dirs);
    await done;
    results.push(doneAt - agent.spawnedAtMs);
  }
  return results;
}

export async function adoptedReadyFigure(rows: BenchRow[]): Promise<void> {
  // Reference: the engine's own /health latency.
  const { cp, url } = await controlPlane();
  const dirs = newRoot('f2ref');
  spawnAgent(url, dirs);
  await cp.waitFor('node-a', isRegister, 30_000);
  const { ports } = await startShards(cp, 'node-a', 1);
  const lat: number[] = [];
  for (let i = 0; i < 20; i++) {
    const t0 = performance.now();
    await fetch(`http://127.0.0.1:${ports[0]}/health`);
    lat.push(performance.now() - t0);
  }
  const ref = `sim /health: ${median(lat).toFixed(1)} ms`;
  const one = median(await adoptedReady(1, 3));
  rows.push({ figure: '2a agent start → READY, 1 adopted shard', measured: ms(one), reference: ref, target: '<= 1.0 s', met: one <= 1000 });
  const eight = median(await adoptedReady(8, 3));
  rows.push({ figure: '2b agent start → READY, 8 adopted shards', measured: ms(eight), reference: ref, target: '<= 1.5 s', met: eight <= 1500 });
}

export async function sigtermExitFigure(rows: BenchRow[]): Promise<void> {
  const { cp, url } = await controlPlane();
  const dirs = newRoot('f4');
  let agent = spawnAgent(url, dirs);
  await cp.waitFor('node-a', isRegister, 30_000);
  await startShards(cp, 'node-a', 8);
  const times: number[] = [];
  for (let r = 0; r < 5; r++) {
    const t0 = Date.now();
    agent.kill('SIGTERM');
    times.push((await agent.exited) - t0);
    const reg = cp.waitFor('node-a', isRegister, 30_000);
    agent = spawnAgent(url, dirs);
    await reg;
    await sleep(500);
  }
  const m = median(times);
  rows.push({ figure: '4 SIGTERM → agent exit, 8 engines running', measured: ms(m), reference: '-', target: '<= 300 ms', met: m <= 300 });
}
