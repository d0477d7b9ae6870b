import { open, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { failure } from '../../../lib/errors.js';

/*
 * Room in host RAM for the copy of the weights a sleep keeps (issue 47 item
 * 5; review engine-fidelity-3 E4). The copy is pinned (cudaMallocHost in
 * torch_memory_saver's pause, csrc/core.cpp at 1a565eb; vLLM's CPU backup,
 * V:vllm/device_allocator/cumem.py), so it must fit in every limit the engine
 * runs under: the host's MemAvailable, its cgroup's memory.max (an engine
 * unit's MemoryMax=, or the agent's own when it runs in the agent's cgroup),
 * and, for a rank bound to one NUMA node (NUMAPolicy=bind, rank-placement.ts),
 * that node's free memory. A failed cudaMallocHost is exit(1) in SGLang's
 * scheduler (csrc/utils.h CUDA_ERROR_CHECK); a copy past a cgroup's limit
 * is the OOM killer's.
 */

/** Where the limits are read; tests give stand-ins. */
export interface HostRoomPaths {
  /** /proc/meminfo. */
  meminfo?: string;
  /** /proc: <proc>/<pid>/cgroup and <proc>/<pid>/numa_maps. */
  proc?: string;
  /** The cgroup v2 mount, /sys/fs/cgroup. */
  cgroupRoot?: string;
  /** /sys/devices/system/node: node<N>/meminfo. */
  nodeRoot?: string;
}

const MIB = 1024 * 1024;

/** MemAvailable of /proc/meminfo in MiB. */
export async function memAvailableMib(path = '/proc/meminfo'): Promise<number> {
  const text = await readFile(path, 'utf8');
  const m = /^MemAvailable:\s+(\d+)\s+kB$/m.exec(text);
  if (!m) throw failure(`sleep refused: ${path} has no MemAvailable line`);
  return Math.floor(Number(m[1]) / 1024);
}

const readText = (path: string) => readFile(path, 'utf8').then((t) => t.trim()).catch(() => undefined);

/**
 * The least room any cgroup of the engine's (its own and each ancestor's,
 * cgroup v2) leaves under its memory.max: memory.max − memory.current, in
 * MiB, with the cgroup that sets it. Undefined when no cgroup sets a limit
 * or none can be read.
 */
export async function cgroupRoomMib(pid: number, paths: HostRoomPaths = {}): Promise<{ mib: number; cgroup: string; maxMib: number } | undefined> {
  const text = await readText(join(paths.proc ?? '/proc', String(pid), 'cgroup'));
  const line = text?.split('\n').find((l) => l.startsWith('0::'));
  if (!line) return undefined;
  let rel = line.slice(3);
  let least: { mib: number; cgroup: string; maxMib: number } | undefined;
  for (;;) {
    const dir = join(paths.cgroupRoot ?? '/sys/fs/cgroup', rel);
    const [max, current] = await Promise.all([readText(join(dir, 'memory.max')), readText(join(dir, 'memory.current'))]);
    if (max !== undefined && /^\d+$/.test(max) && current !== undefined && /^\d+$/.test(current)) {
      const room = Math.floor(Math.max(0, Number(max) - Number(current)) / MIB);
      if (!least || room < least.mib) least = { mib: room, cgroup: rel, maxMib: Math.floor(Number(max) / MIB) };
    }
    if (rel === '/' || rel === '') return least;
    rel = rel.slice(0, rel.lastIndexOf('/')) || '/';
  }
}

/**
 * The one NUMA node the engine's memory is bound to (NUMAPolicy=bind sets the
 * process's policy, which /proc/<pid>/numa_maps prints as `bind:N` for its
 * mappings); undefined when it is not bound to exactly one node.
 */
export async function boundNumaNode(pid: number, paths: HostRoomPaths = {}): Promise<number | undefined> {
  let head = '';
  try {
    // The first mapping's line says the policy; the whole file walks every page table.
    const f = await open(join(paths.proc ?? '/proc', String(pid), 'numa_maps'), 'r');
    try {
      const buf = Buffer.alloc(4096);
      const { bytesRead } = await f.read(buf, 0, buf.length, 0);
      head = buf.subarray(0, bytesRead).toString('utf8').split('\n')[0] ?? '';
    } finally {
      await f.close();
    }
  } catch {
    return undefined;
  }
  const m = /^\S+\s+bind[:=](\d+)(\s|$)/.exec(head);
  return m ? Number(m[1]) : undefined;
}

/** MemFree of NUMA node `node` in MiB (node<N>/meminfo); undefined when unreadable. */
export async function numaFreeMib(node: number, paths: HostRoomPaths = {}): Promise<number | undefined> {
  const text = await readText(join(paths.nodeRoot ?? '/sys/devices/system/node', `node${node}`, 'meminfo'));
  const m = text && new RegExp(`^Node ${node} MemFree:\\s+(\\d+) kB$`, 'm').exec(text);
  return m ? Math.floor(Number(m[1]) / 1024) : undefined;
}

/**
 * Refuses, in one line, a sleep whose host copy of up to `mib` MiB does not
 * fit every limit the engine `pid` runs under; `instead` is what to do
 * (level 2 on vLLM; on SGLang, whose both levels keep the copy, free memory
 * or stop the shard). `promised`: what sleeps under way will copy and
 * MemAvailable does not show yet (HostRamLedger).
 */
export async function checkHostRoom(level: 1 | 2, mib: number, pid: number, instead: string, paths: HostRoomPaths = {}, promised?: () => { mib: number; shards: string[] }): Promise<void> {
  const what = `sleep refused: level ${level} copies up to ${mib} MiB of weights to pinned host RAM`;
  const available = await memAvailableMib(paths.meminfo);
  if (available < mib) throw failure(`${what} and only ${available} MiB is available (MemAvailable); ${instead}`);
  // Sleeps admitted before this one whose copies are not made yet (host-ram-ledger.ts): MemAvailable does not show them.
  const ahead = promised?.();
  if (ahead && ahead.mib > 0 && available - ahead.mib < mib) {
    const whose = `${ahead.shards.length === 1 ? 'the sleep' : 'the sleeps'} of ${ahead.shards.join(', ')}`;
    throw failure(`${what} and ${available} MiB is available (MemAvailable), ${ahead.mib} MiB of it promised to ${whose} under way; wait for ${ahead.shards.length === 1 ? 'it' : 'them'}, or ${instead}`);
  }
  const cg = pid > 0 ? await cgroupRoomMib(pid, paths) : undefined;
  if (cg && cg.mib < mib) throw failure(`${what} and the engine's cgroup ${cg.cgroup} has only ${cg.mib} MiB left under its memory.max of ${cg.maxMib} MiB; raise its MemoryMax or ${instead.replace(/^use/, 'use')}`);
  const node = pid > 0 ? await boundNumaNode(pid, paths) : undefined;
  const free = node === undefined ? undefined : await numaFreeMib(node, paths);
  if (node !== undefined && free !== undefined && free < mib) throw failure(`${what} and the engine is bound to NUMA node ${node}, which has only ${free} MiB free; ${instead}`);
}
