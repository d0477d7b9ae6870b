import { spawn } from 'node:child_process';
import { appendFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { create } from '@bufbuild/protobuf';
import { describe, expect, it, onTestFinished } from 'vitest';
import { GpuProcessSightings } from '../../src/agent/gpu-process-sightings.js';
import { inventoryCachePath } from '../../src/agent/inventory-cache.js';
import { type AgentMessage, GpuProcessSchema, type Inventory, type Register, ShardState, type ShardStatus, StopShardSchema } from '../../src/gen/llmgw/v1/agent_pb.js';
import type { ProcStat } from '../../src/lib/process/proc-stat.js';
import { startAgentProcess, tempAgentDirs } from '../helpers/agent-process.js';
import { freePort, until } from '../helpers/engine-processes.js';
import { isRegister, shardIs, simStart } from '../helpers/sim-shards.js';
import { startControlPlane } from '../helpers/start-control-plane.js';

/*
 * A freed GPU is free at once (issue 36, item 7): swapping models on a GPU
 * is stop-then-start, and the inventory's process list is up to
 * discovery.interval old, so the engine just stopped is still listed on it.
 */

/** The inventory a message carries: Register's or an Inventory update's. */
const inventoryOf = (m: AgentMessage): Inventory | undefined => (m.msg.case === 'inventory' ? m.msg.value : m.msg.case === 'register' ? m.msg.value.inventory : undefined);

describe('a GPU freed by a stop', () => {
  it('takes a start at once, although the inventory, a minute old, still lists the stopped engine on it', async () => {
    const { cp, url } = await startControlPlane();
    const dirs = tempAgentDirs('llmgw-freed-gpu-');
    // The fake nvidia-smi's compute processes: at first one no shard owns, on GPU 1, which runs throughout.
    const foreign = spawn('sleep', ['600'], { stdio: 'ignore' });
    onTestFinished(() => {
      foreign.kill('SIGKILL');
    });
    const procs = join(dirs.root, 'gpu-procs.csv');
    const gpuUuid = (i: number) => `GPU-3f1c0a5e-8b2d-4c7a-9e61-00000000000${i}`;
    writeFileSync(procs, `${foreign.pid},${gpuUuid(1)},30000,python3\n`);
    const env = { LLMGW_FAKE_GPU_PROCS: procs };
    const registered = cp.waitFor('node-a', isRegister, 30_000);
    const first = startAgentProcess({ server: url, dirs, env });
    const gpus = ((await registered).msg.value as Register).inventory?.gpus ?? [];
    expect([0, 1].map((i) => gpus.find((g) => g.index === i)?.uuid)).toEqual([gpuUuid(0), gpuUuid(1)]);

    const ready = cp.waitFor('node-a', shardIs('s1', ShardState.READY), 30_000);
    cp.send('node-a', { case: 'start', value: simStart('s1', await freePort(), { gpu: 0 }) });
    const engine = ((await ready).msg.value as ShardStatus).pid;
    // nvidia-smi from now on lists s1's engine on GPU 0, as it would a real one.
    appendFileSync(procs, `${engine},${gpuUuid(0)},20000,python3\n`);

    // An agent whose hardware scan lists the engine (the discovery interval
    // is a minute, so restarted: its first scan, with no cache, runs at once)
    // and adopts s1.
    await first.stop();
    rmSync(inventoryCachePath(dirs.stateDir));
    // The control plane's waits see only what arrives after they begin.
    const listed = cp.waitFor('node-a', (m) => inventoryOf(m)?.processes.some((p) => p.pid === engine) === true, 30_000);
    const from = cp.messages('node-a').length;
    startAgentProcess({ server: url, dirs, env });
    await listed;
    // Adopted: READY in the Register, or in a status after it.
    const adoptedReady = (m: AgentMessage) =>
      (m.msg.case === 'register' && m.msg.value.runningShards.some((r) => r.shardId === 's1' && r.state === ShardState.READY)) || shardIs('s1', ShardState.READY)(m);
    await until(() => cp.messages('node-a').slice(from).some(adoptedReady), 'the restarted agent to adopt s1 READY', 30_000);

    const stopped = cp.waitFor('node-a', shardIs('s1', ShardState.STOPPED), 30_000);
    cp.send('node-a', { case: 'stop', value: create(StopShardSchema, { shardId: 's1' }) });
    await stopped;
    // At once: no rescan since, so the inventory still lists the stopped engine on GPU 0.
    const s2 = cp.waitFor('node-a', shardIs('s2', ShardState.READY, ShardState.FAILED), 30_000);
    cp.send('node-a', { case: 'start', value: simStart('s2', await freePort(), { gpu: 0 }) });
    const status = (await s2).msg.value as ShardStatus;
    expect([status.state, status.error]).toEqual([ShardState.READY, '']);
    // A listed process that still runs, and that no shard owns, still keeps its GPU.
    const s3 = cp.waitFor('node-a', shardIs('s3', ShardState.READY, ShardState.FAILED), 30_000);
    cp.send('node-a', { case: 'start', value: simStart('s3', await freePort(), { gpu: 1 }) });
    expect(((await s3).msg.value as ShardStatus).error).toBe(`GPU 1 is in use by pid ${foreign.pid} (python3), which no shard owns; stop it first`);
  });
});

describe('GpuProcessSightings', () => {
  const stat = (pid: number, startTime: string, state = 'S'): ProcStat => ({ pid, comm: 'python3', state, ppid: 1, pgrp: pid, startTime });
  const listed = (...pids: number[]) => pids.map((pid) => create(GpuProcessSchema, { pid, gpuUuid: 'GPU-0', usedMemoryMb: 1000, processName: 'python3' }));

  it('counts a listed process gone when /proc no longer has it, when it is a zombie, or when its pid now names a process started since the scan', () => {
    let table = new Map([
      [10, stat(10, '100')],
      [11, stat(11, '110')],
      [12, stat(12, '120')],
      [13, stat(13, '130')],
    ]);
    const sightings = new GpuProcessSightings((pid) => table.get(pid));
    sightings.record(listed(10, 11, 12, 13));
    expect([10, 11, 12, 13].map((p) => sightings.gone(p))).toEqual([false, false, false, false]);
    // 10 still runs; 11 exited; 12 is a zombie; 13's pid was reused by a later process.
    table = new Map([
      [10, stat(10, '100')],
      [12, stat(12, '120', 'Z')],
      [13, stat(13, '999')],
    ]);
    expect([10, 11, 12, 13].map((p) => sightings.gone(p))).toEqual([false, true, true, true]);
    // A pid no scan listed (an inventory from the cache): /proc alone.
    expect([sightings.gone(10), sightings.gone(14)]).toEqual([false, true]);
  });

  it('never counts gone a process /proc did not have when the scan listed it: a pid of another namespace, which /proc cannot judge', () => {
    const sightings = new GpuProcessSightings(() => undefined);
    sightings.record(listed(20));
    expect(sightings.gone(20)).toBe(false);
  });
});
