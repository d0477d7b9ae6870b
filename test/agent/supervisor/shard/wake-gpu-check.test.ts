import { type ChildProcess, spawn } from 'node:child_process';
import { create } from '@bufbuild/protobuf';
import { afterEach, describe, expect, it } from 'vitest';
import { GpuProcessSchema, GpuSchema, InventorySchema, ShardState } from '../../../../src/gen/llmgw/v1/agent_pb.js';
import { readProcStat } from '../../../../src/lib/process/proc-stat.js';
import { isRunningStat } from '../../../../src/lib/process/process-identity.js';
import { gpusTakenBy } from '../../../../src/agent/supervisor/shard/wake-gpu-check.js';
import type { ShardSnapshot } from '../../../../src/agent/supervisor/shard/shard-snapshot.js';

/* Issue 47 item 5 (review engine-fidelity-3 E14): a wake onto GPUs a process no shard owns now holds, with real processes for the pids. */

const inventory = create(InventorySchema, { gpus: [create(GpuSchema, { index: 0, uuid: 'GPU-a' }), create(GpuSchema, { index: 1, uuid: 'GPU-b' })] });
const stat = (pid: number) => {
  const st = readProcStat(pid);
  return st && { pgrp: st.pgrp, running: isRunningStat(st) };
};
const children: ChildProcess[] = [];
afterEach(() => {
  for (const c of children.splice(0)) c.kill('SIGKILL');
});

/** A real process in its own process group (as an engine is started), and its pid. */
function proc(): number {
  const c = spawn('sleep', ['600'], { detached: true, stdio: 'ignore' });
  children.push(c);
  return c.pid as number;
}

const sleeping = (pid: number) => ({ shardId: 's1', replicaId: 'r1', pid, state: ShardState.SLEEPING, running: true }) as unknown as ShardSnapshot;
const onGpu = (pid: number, uuid: string, mib: number, name = 'python3') => create(GpuProcessSchema, { pid, gpuUuid: uuid, usedMemoryMb: mib, processName: name });

describe('gpusTakenBy', () => {
  it('names the pid of a live process no shard owns on one of the shard GPUs', () => {
    const engine = proc();
    const squatter = proc();
    expect(gpusTakenBy([0, 1], inventory, [onGpu(squatter, 'GPU-b', 30000, 'train.py')], [sleeping(engine)], stat)).toBe(`GPU 1 holds 30000 MiB of pid ${squatter} (train.py), which no shard owns`);
  });

  it('never counts the sleeping engine\'s own processes: its leader, or a worker in its process group', () => {
    const engine = proc();
    expect(gpusTakenBy([0], inventory, [onGpu(engine, 'GPU-a', 1500)], [sleeping(engine)], stat)).toBeUndefined();
    // A worker: a pid whose process group is the engine's (here the test runner's own pid, in its group).
    const me = readProcStat(process.pid);
    expect(gpusTakenBy([0], inventory, [onGpu(process.pid, 'GPU-a', 1500)], [sleeping(me?.pgrp as number)], stat)).toBeUndefined();
  });

  it('ignores processes on other GPUs and ones that have ended since they were listed', async () => {
    const engine = proc();
    const other = proc();
    expect(gpusTakenBy([0], inventory, [onGpu(other, 'GPU-b', 30000)], [sleeping(engine)], stat)).toBeUndefined();
    const gone = proc();
    const child = children.at(-1) as ChildProcess;
    const exited = new Promise((r) => child.once('exit', r));
    child.kill('SIGKILL');
    await exited;
    expect(gpusTakenBy([0], inventory, [onGpu(gone, 'GPU-a', 30000)], [sleeping(engine)], stat)).toBeUndefined();
  });
});
