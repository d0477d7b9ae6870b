import { spawn } from 'node:child_process';
import { appendFileSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { create } from '@bufbuild/protobuf';
import { describe, expect, it, onTestFinished } from 'vitest';
import { GpuProcessSightings } from '../../src/agent/gpu-process-sightings.js';
import { type ShardReactionParts, shardReactions } from '../../src/agent/shard-reactions.js';
import type { ShardSnapshot, ShardTransition } from '../../src/agent/supervisor/shard/shard-snapshot.js';
import { inventoryCachePath } from '../../src/agent/inventory-cache.js';
import { type AgentMessage, GpuProcessSchema, type Inventory, type Register, ShardState, type ShardStatus, StopShardSchema } from '../../src/gen/llmgw/v1/agent_pb.js';
import type { ProcStat } from '../../src/lib/process/proc-stat.js';
import { FAKE_NVIDIA_SMI, startAgentProcess, tempAgentDirs } from '../helpers/agent-process.js';
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

/**
 * bin/fake-nvidia-smi behind a gate, for one scan caught mid-way: while
 * `<gate>/hold` exists, `--query-compute-apps` also writes what it lists to
 * `<gate>/listed.<pid>`, and `topo -m` (which discovery runs after it)
 * marks `<gate>/held.<pid>` and waits until `hold` is gone or
 * `release.<pid>` exists. Every wait is on a file, none on the clock.
 */
function gatedNvidiaSmi(dir: string): { path: string; gate: string } {
  const gate = join(dir, 'gate');
  mkdirSync(gate, { recursive: true });
  const path = join(dir, 'gated-nvidia-smi');
  writeFileSync(
    path,
    [
      '#!/bin/sh',
      `gate='${gate}'`,
      `fake='${FAKE_NVIDIA_SMI}'`,
      'case "$*" in',
      '  *--query-compute-apps*)',
      '    out=$("$fake" "$@"); rc=$?',
      '    if [ -e "$gate/hold" ]; then printf "%s\n" "$out" > "$gate/.listed.$$"; mv "$gate/.listed.$$" "$gate/listed.$$"; fi',
      '    [ -n "$out" ] && printf "%s\n" "$out"',
      '    exit $rc ;;',
      '  topo*)',
      '    if [ -e "$gate/hold" ]; then',
      '      : > "$gate/held.$$"',
      '      while [ -e "$gate/hold" ] && [ ! -e "$gate/release.$$" ]; do sleep 0.05; done',
      '    fi ;;',
      'esac',
      'exec "$fake" "$@"',
      '',
    ].join('\n'),
    { mode: 0o755 },
  );
  return { path, gate };
}

describe('a GPU whose engine ended while a hardware scan was under way (issue 47, item 7)', () => {
  it('takes a start at once, though that scan, begun before the STOPPED, lists the engine; a foreign process still keeps its GPU', { timeout: 120_000 }, async () => {
    const { cp, url } = await startControlPlane();
    const dirs = tempAgentDirs('llmgw-freed-gpu-scan-');
    const { path: nvidiaSmi, gate } = gatedNvidiaSmi(dirs.root);
    // Whatever happens, no gated nvidia-smi waits on after the test.
    onTestFinished(() => rmSync(join(gate, 'hold'), { force: true }));
    const foreign = spawn('sleep', ['600'], { stdio: 'ignore' });
    onTestFinished(() => {
      foreign.kill('SIGKILL');
    });
    const procs = join(dirs.root, 'gpu-procs.csv');
    const gpuUuid = (i: number) => `GPU-3f1c0a5e-8b2d-4c7a-9e61-00000000000${i}`;
    const foreignLine = `${foreign.pid},${gpuUuid(1)},30000,python3\n`;
    writeFileSync(procs, foreignLine);
    const registered = cp.waitFor('node-a', isRegister, 30_000);
    startAgentProcess({ server: url, dirs, env: { LLMGW_FAKE_GPU_PROCS: procs }, nvidiaSmi, discoveryInterval: '1s' });
    await registered;

    const ready = cp.waitFor('node-a', shardIs('s1', ShardState.READY), 30_000);
    cp.send('node-a', { case: 'start', value: simStart('s1', await freePort(), { gpu: 0 }) });
    const engine = ((await ready).msg.value as ShardStatus).pid;
    // nvidia-smi lists s1's engine on GPU 0 from now on, as it would a real one.
    appendFileSync(procs, `${engine},${gpuUuid(0)},20000,python3\n`);

    // A scan lists the engine, then waits in topo -m.
    writeFileSync(join(gate, 'hold'), '');
    const files = () => readdirSync(gate);
    await until(() => files().some((f) => f.startsWith('listed.') && readFileSync(join(gate, f), 'utf8').includes(`${engine},`)), 'a scan to list the engine', 30_000);
    await until(() => files().some((f) => f.startsWith('held.')), 'that scan to wait in topo -m', 30_000);
    const held = files().filter((f) => f.startsWith('held.'));
    expect(held).toHaveLength(1);

    const stopped = cp.waitFor('node-a', shardIs('s1', ShardState.STOPPED), 30_000);
    cp.send('node-a', { case: 'stop', value: create(StopShardSchema, { shardId: 's1' }) });
    await stopped;
    // The engine is gone: nvidia-smi lists it no more. The scan under way ends
    // (recording its list, which has the engine, now gone from /proc); the next
    // one, which cannot begin before, waits in topo -m in turn.
    writeFileSync(procs, foreignLine);
    writeFileSync(join(gate, `release.${(held[0] as string).slice('held.'.length)}`), '');
    await until(() => files().filter((f) => f.startsWith('held.')).length >= 2, 'the next scan to begin', 30_000);

    const s2 = cp.waitFor('node-a', shardIs('s2', ShardState.READY, ShardState.FAILED), 30_000);
    cp.send('node-a', { case: 'start', value: simStart('s2', await freePort(), { gpu: 0 }) });
    const status = (await s2).msg.value as ShardStatus;
    expect([status.state, status.error]).toEqual([ShardState.READY, '']);
    // The true positive, judged from the same scan: a listed process that runs and no shard owns.
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

  /*
   * Issue 47, item 7: a scan lists the processes, then spends seconds on
   * topo -m and the rest; an engine that ends in between is recorded as a
   * pid /proc no longer has. Engine 30 (its own group) and its worker 31,
   * which holds the GPU; clock in ms.
   */
  describe("an engine of this agent that ended while a scan was under way (issue 47, item 7)", () => {
    const running = new Map([
      [30, { ...stat(30, '300'), pgrp: 30 }],
      [31, { ...stat(31, '310'), pgrp: 30 }],
      [40, { ...stat(40, '400'), pgrp: 40 }],
    ]);
    /** Scan 1 (begun at 0) saw the engine run; `exited` leaves /proc for scan 2, begun at 10 and recorded at 20. */
    function twoScans(exited: number[]) {
      let table: Map<number, ProcStat> = running;
      const sightings = new GpuProcessSightings((pid) => table.get(pid));
      sightings.record(listed(30, 31, 40), 0);
      table = new Map([...running].filter(([pid]) => !exited.includes(pid)));
      return { sightings, scan2: (pids: number[], takenAt = 10) => sightings.record(listed(...pids), takenAt) };
    }

    it('is gone, it and its worker, when it ended after that scan began: its own memory, seen before its STOPPED', () => {
      const { sightings, scan2 } = twoScans([30, 31]);
      scan2([30, 31]);
      sightings.engineEnded(30, 15);
      expect([sightings.gone(30), sightings.gone(31)]).toEqual([true, true]);
    });

    it('is not gone when the scan began after it ended and still lists it: memory that outlived its engine is believed', () => {
      const { sightings, scan2 } = twoScans([30, 31]);
      sightings.engineEnded(30, 15);
      scan2([30, 31], 16);
      expect([sightings.gone(30), sightings.gone(31)]).toEqual([false, false]);
    });

    it("excuses nothing of another process: a foreign pid /proc lost the same way, or one that still runs, keeps its GPU", () => {
      const { sightings, scan2 } = twoScans([30, 31, 40]);
      scan2([30, 31, 40]);
      sightings.engineEnded(30, 15);
      expect(sightings.gone(40)).toBe(false);
      const alive = twoScans([30, 31]);
      alive.scan2([30, 31, 40]);
      alive.sightings.engineEnded(30, 15);
      expect(alive.sightings.gone(40)).toBe(false);
    });

    it('is not gone while it runs: an end noted for a group whose process still runs excuses nothing', () => {
      const { sightings, scan2 } = twoScans([]);
      scan2([30, 31]);
      sightings.engineEnded(30, 15);
      expect([sightings.gone(30), sightings.gone(31)]).toEqual([false, false]);
    });

    it('keeps the first end: a FAILED engine stopped later is judged by when it died', () => {
      const { sightings, scan2 } = twoScans([30, 31]);
      sightings.engineEnded(30, 5);
      sightings.engineEnded(30, 50);
      scan2([30, 31], 10);
      expect(sightings.gone(30)).toBe(false);
    });
  });
});

describe("the agent's note that an engine ended", () => {
  const reaction = (ended: number[]) =>
    shardReactions({ engineEnded: (pgrp: number) => ended.push(pgrp) } as unknown as ShardReactionParts).find((r) => r.name === 'engine end noted');
  const transition = (to: ShardState, running: boolean, pid = 4242): ShardTransition => ({ from: ShardState.READY, to, shard: { pid, running } as ShardSnapshot });

  it('is taken when its shard ends with nothing of it running (STOPPED, FAILED, EXITED), and not before', () => {
    const ended: number[] = [];
    const r = reaction(ended);
    for (const t of [transition(ShardState.STOPPING, true), transition(ShardState.FAILED, true), transition(ShardState.UNHEALTHY, true)]) r?.on(t);
    expect(ended).toEqual([]);
    for (const to of [ShardState.STOPPED, ShardState.FAILED, ShardState.EXITED]) r?.on(transition(to, false));
    expect(ended).toEqual([4242, 4242, 4242]);
  });
});

