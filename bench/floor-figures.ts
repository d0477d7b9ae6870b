/**
 * `--only floor`: the agent's start-up beside the floor (bench/floor.mjs, the
 * least a program must do before the control plane knows the node), timed
 * round by round in the same run so that load on a shared machine falls on
 * both alike; each figure is given as a ratio to the floor.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type { ControlPlane } from '../src/control/control-plane.js';
import { type AgentMessage, ShardState } from '../src/gen/llmgw/v1/agent_pb.js';
import { isRegister } from '../test/helpers/sim-shards.js';
import type { AgentDirs } from '../test/helpers/agent-config-yaml.js';
import { controlPlane, median, newRoot, sleep, spawnAgent, spawnFloor, startShards } from './bench-support.js';
import type { BenchRow } from './fleet-figure.js';

/** The nvidia-smi of a busy 8-GPU node: 2 s a call. */
const SLOW_NVIDIA_SMI = { LLMGW_FAKE_NVIDIA_SMI_SLEEP: '2' };

/** Resolves when every shard in `ids` is known READY from `nodeId`, in a Register or a ShardStatus; the time then. */
function allReady(cp: ControlPlane, nodeId: string, ids: readonly string[], timeoutMs = 60_000): Promise<number> {
  const pending = new Set(ids);
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      cp.off('message', onMessage);
      reject(new Error(`${[...pending].join(', ')} not READY from ${nodeId} within ${timeoutMs} ms`));
    }, timeoutMs);
    const onMessage = (from: string, m: AgentMessage) => {
      if (from !== nodeId) return;
      if (m.msg.case === 'register') {
        for (const s of m.msg.value.runningShards) if (s.state === ShardState.READY) pending.delete(s.shardId);
      } else if (m.msg.case === 'shard' && m.msg.value.state === ShardState.READY) {
        pending.delete(m.msg.value.shardId);
      }
      if (pending.size === 0) {
        clearTimeout(timer);
        cp.off('message', onMessage);
        resolve(Date.now());
      }
    };
    cp.on('message', onMessage);
  });
}

/** bench/floor.mjs from spawn to its Register received (ids empty) or its shards READY. */
async function timeFloor(cp: ControlPlane, url: string, stateDir: string, ids: readonly string[]): Promise<number> {
  const done = ids.length > 0 ? allReady(cp, 'floor', ids) : cp.waitFor('floor', isRegister, 30_000).then(() => Date.now());
  const floor = spawnFloor(url, 'floor', stateDir);
  const at = await done;
  floor.kill('SIGKILL');
  await floor.exited;
  return at - floor.spawnedAtMs;
}

/** A fresh agent from spawn to its Register received (ids empty) or its adopted shards READY; it is killed after. */
async function timeAgent(cp: ControlPlane, url: string, dirs: AgentDirs, ids: readonly string[], env: Record<string, string> = {}): Promise<number> {
  const done = ids.length > 0 ? allReady(cp, 'node-a', ids) : cp.waitFor('node-a', isRegister, 30_000).then(() => Date.now());
  const agent = spawnAgent(url, dirs, { env });
  const at = await done;
  agent.kill('SIGKILL');
  await agent.exited;
  return at - agent.spawnedAtMs;
}

export async function floorFigures(rows: BenchRow[], notes: string[], quick: boolean): Promise<void> {
  const rounds = quick ? 3 : 7;
  const ms = (x: number) => `${x.toFixed(0)} ms`;
  const row = (figure: string, agentMs: number[], floorMs: number[], target: string, absLimitMs?: number) => {
    const a = median(agentMs);
    const f = median(floorMs);
    const ratio = a / f;
    rows.push({
      figure,
      measured: `${ms(a)} (${ratio.toFixed(2)}x floor)`,
      reference: `floor: ${ms(f)}`,
      target,
      met: ratio <= 1.2 && (absLimitMs === undefined || a <= absLimitMs),
    });
    notes.push(`${figure}: agent ${agentMs.map(ms).join(', ')}; floor ${floorMs.map(ms).join(', ')}`);
  };

  // Register: the agent with its inventory cached by its first start.
  {
    const { cp, url } = await controlPlane();
    const { cp: floorCp, url: floorUrl } = await controlPlane();
    const dirs = newRoot('floor-reg');
    await timeAgent(cp, url, dirs, []);
    for (let i = 0; i < 100 && !existsSync(join(dirs.stateDir, 'inventory.json')); i++) await sleep(100);
    const floor: number[] = [];
    const agent: number[] = [];
    const slow: number[] = [];
    for (let r = 0; r < rounds; r++) {
      floor.push(await timeFloor(floorCp, floorUrl, dirs.stateDir, []));
      agent.push(await timeAgent(cp, url, dirs, []));
      slow.push(await timeAgent(cp, url, dirs, [], SLOW_NVIDIA_SMI));
    }
    row('floor-a agent start → Register received, inventory cached', agent, floor, '<= 1.2x floor');
    row('floor-b the same, nvidia-smi taking 2 s a call', slow, floor, '<= 1.2x floor');
  }

  // Adopted shards: the agent killed with -9 and started again, engines running.
  for (const [n, limitMs] of [
    [1, 500],
    [8, 600],
  ] as const) {
    const { cp, url } = await controlPlane();
    const { cp: floorCp, url: floorUrl } = await controlPlane();
    const dirs = newRoot(`floor-adopt-${n}`);
    const first = spawnAgent(url, dirs);
    await cp.waitFor('node-a', isRegister, 30_000);
    const { ids } = await startShards(cp, 'node-a', n);
    first.kill('SIGKILL');
    await first.exited;
    const floor: number[] = [];
    const agent: number[] = [];
    for (let r = 0; r < rounds; r++) {
      floor.push(await timeFloor(floorCp, floorUrl, dirs.stateDir, ids));
      agent.push(await timeAgent(cp, url, dirs, ids));
    }
    row(`floor-${n === 1 ? 'c' : 'd'} agent start → READY, ${n} adopted shard${n > 1 ? 's' : ''}`, agent, floor, `<= 1.2x floor, <= ${limitMs / 1000} s`, limitMs);
  }
}
