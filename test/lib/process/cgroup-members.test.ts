import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { cgroupMembers } from '../../../src/lib/process/cgroup-members.js';

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

/** A /proc and a /sys/fs/cgroup of files, for a pid in cgroup `path` with `procs` listed in it. */
function fixture(pid: number, cgroupLine: string, path: string | undefined, procs: number[]) {
  const root = mkdtempSync(join(tmpdir(), 'llmgw-cgroup-'));
  dirs.push(root);
  mkdirSync(join(root, 'proc', String(pid)), { recursive: true });
  writeFileSync(join(root, 'proc', String(pid), 'cgroup'), `${cgroupLine}\n`);
  if (path !== undefined) {
    mkdirSync(join(root, 'cg', path), { recursive: true });
    writeFileSync(join(root, 'cg', path, 'cgroup.procs'), procs.map((p) => `${p}\n`).join(''));
  }
  return { procRoot: join(root, 'proc'), cgroupRoot: join(root, 'cg') };
}

describe('cgroupMembers', () => {
  it("lists every pid of the unit's cgroup, those outside the leader's process group included", async () => {
    const path = '/llmgw.slice/llmgw-shard-s1.service';
    const f = fixture(100, `0::${path}`, path, [100, 101, 250]);
    expect(await cgroupMembers(100, f)).toEqual([100, 101, 250]);
  });

  it('cannot tell for the root cgroup, a v1-only hierarchy or a process that is gone', async () => {
    expect(await cgroupMembers(100, fixture(100, '0::/', '/', [1, 100]))).toBeUndefined();
    expect(await cgroupMembers(100, fixture(100, '4:memory:/user.slice', undefined, []))).toBeUndefined();
    expect(await cgroupMembers(7, fixture(100, '0::/x', '/x', [100]))).toBeUndefined();
  });
});
