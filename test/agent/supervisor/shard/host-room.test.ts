import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { boundNumaNode, cgroupRoomMib, checkHostRoom, type HostRoomPaths, numaFreeMib } from '../../../../src/agent/supervisor/shard/host-room.js';

/*
 * Issue 47 item 5 (review engine-fidelity-3 E4): the pinned copy of the
 * weights must fit every limit the engine runs under. The host's files are
 * stand-ins laid out as the kernel's: /proc/<pid>/cgroup and numa_maps,
 * cgroup v2's memory.max/memory.current, a NUMA node's meminfo.
 */

const MIB = 1024 * 1024;
const PID = 4242;
const SGLANG = 'free host memory, or stop the shard instead (SGLang keeps this copy at both levels)';
let dir: string;
let paths: HostRoomPaths;

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'llmgw-host-room-'));
  paths = { meminfo: join(dir, 'meminfo'), proc: join(dir, 'proc'), cgroupRoot: join(dir, 'cgroup'), nodeRoot: join(dir, 'node') };
  mkdirSync(join(dir, 'proc', String(PID)), { recursive: true });
  writeFileSync(paths.meminfo as string, `MemTotal: 263842764 kB\nMemAvailable: ${200_000 * 1024} kB\n`);
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

function cgroup(rel: string, files: Record<string, string>): void {
  const d = join(dir, 'cgroup', rel);
  mkdirSync(d, { recursive: true });
  for (const [name, text] of Object.entries(files)) writeFileSync(join(d, name), `${text}\n`);
}

const unit = '/system.slice/llmgw-shard-s1.service';
const inUnit = () => writeFileSync(join(dir, 'proc', String(PID), 'cgroup'), `0::${unit}\n`);

describe('cgroup room', () => {
  it('is the least memory.max − memory.current of the engine cgroup and its ancestors', async () => {
    inUnit();
    cgroup(unit, { 'memory.max': String(40_000 * MIB), 'memory.current': String(10_000 * MIB) });
    cgroup('/system.slice', { 'memory.max': String(100_000 * MIB), 'memory.current': String(90_000 * MIB) });
    cgroup('/', { 'memory.max': 'max', 'memory.current': '1' });
    expect(await cgroupRoomMib(PID, paths)).toEqual({ mib: 10_000, cgroup: '/system.slice', maxMib: 100_000 });
  });

  it('is unknown when no cgroup sets a limit, or the process has none listed', async () => {
    expect(await cgroupRoomMib(PID, paths)).toBeUndefined();
    inUnit();
    cgroup(unit, { 'memory.max': 'max', 'memory.current': '5' });
    expect(await cgroupRoomMib(PID, paths)).toBeUndefined();
  });

  it('refuses an SGLang sleep whose copy passes the unit memory.max, naming the cgroup, with MemAvailable plenty', async () => {
    inUnit();
    cgroup(unit, { 'memory.max': String(40_000 * MIB), 'memory.current': String(10_000 * MIB) });
    await expect(checkHostRoom(2, 30_001, PID, SGLANG, paths)).rejects.toThrow(
      `sleep refused: level 2 copies up to 30001 MiB of weights to pinned host RAM and the engine's cgroup ${unit} has only 30000 MiB left under its memory.max of 40000 MiB; raise its MemoryMax or ${SGLANG}`,
    );
    await expect(checkHostRoom(2, 30_000, PID, SGLANG, paths)).resolves.toBeUndefined();
  });
});

describe('NUMA binding', () => {
  const numaMaps = (policy: string) => writeFileSync(join(dir, 'proc', String(PID), 'numa_maps'), `55d0c0a00000 ${policy} file=/usr/bin/python3.12 mapped=2 N1=2 kernelpagesize_kB=4\n7f0000000000 ${policy} anon=4 dirty=4 N1=4\n`);
  const node = (n: number, freeMib: number) => {
    mkdirSync(join(dir, 'node', `node${n}`), { recursive: true });
    writeFileSync(join(dir, 'node', `node${n}`, 'meminfo'), `Node ${n} MemTotal:       131000000 kB\nNode ${n} MemFree:        ${freeMib * 1024} kB\nNode ${n} MemUsed:        1 kB\n`);
  };

  it('reads the one node the engine is bound to, and none for default, interleave or several nodes', async () => {
    numaMaps('bind:1');
    expect(await boundNumaNode(PID, paths)).toBe(1);
    for (const p of ['default', 'interleave:0-1', 'bind:0-1', 'prefer:1']) {
      numaMaps(p);
      expect(await boundNumaNode(PID, paths), p).toBeUndefined();
    }
    expect(await boundNumaNode(PID + 1, paths)).toBeUndefined();
  });

  it('refuses a copy that fits the host but not the bound node, naming the node; accepts an unbound engine and a bound one with room', async () => {
    node(1, 20_000);
    node(0, 180_000);
    expect(await numaFreeMib(1, paths)).toBe(20_000);
    numaMaps('bind:1');
    await expect(checkHostRoom(1, 30_000, PID, SGLANG, paths)).rejects.toThrow(`sleep refused: level 1 copies up to 30000 MiB of weights to pinned host RAM and the engine is bound to NUMA node 1, which has only 20000 MiB free; ${SGLANG}`);
    numaMaps('default');
    await expect(checkHostRoom(1, 30_000, PID, SGLANG, paths)).resolves.toBeUndefined();
    numaMaps('bind:0');
    await expect(checkHostRoom(1, 30_000, PID, SGLANG, paths)).resolves.toBeUndefined();
  });
});

describe('MemAvailable', () => {
  it('is checked first, and an engine with room everywhere is accepted', async () => {
    await expect(checkHostRoom(2, 200_001, PID, SGLANG, paths)).rejects.toThrow(/only 200000 MiB is available \(MemAvailable\)/);
    await expect(checkHostRoom(2, 200_000, PID, SGLANG, paths)).resolves.toBeUndefined();
  });

  it('reads this machine\'s own files for a real process without refusing a small copy', async () => {
    await expect(checkHostRoom(1, 1, process.pid, SGLANG)).resolves.toBeUndefined();
  });
});
