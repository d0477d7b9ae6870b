import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { unitCgroupProcs } from '../../../src/lib/systemd/unit-cgroup-procs.js';

/* A fixture cgroup tree (a hybrid host: v2 under unified/), standing in for /sys/fs/cgroup. */
let root = '';
afterEach(() => rmSync(root, { recursive: true, force: true }));

function hybridTree(): string[] {
  root = mkdtempSync(join(tmpdir(), 'llmgw-cg-'));
  const unit = join(root, 'unified/llmgw.slice/llmgw-shard-a.service');
  mkdirSync(unit, { recursive: true });
  writeFileSync(join(root, 'unified/cgroup.procs'), '1\n');
  writeFileSync(join(unit, 'cgroup.procs'), '41\n57\n');
  // The tmpfs at the top of a hybrid host has no cgroup.procs: the first root is skipped.
  return [root, join(root, 'unified'), join(root, 'systemd')];
}

describe('unitCgroupProcs', () => {
  it("reads the unit's pids from the first hierarchy that has a cgroup.procs at its root", async () => {
    expect(await unitCgroupProcs('/llmgw.slice/llmgw-shard-a.service', hybridTree())).toEqual([41, 57]);
  });

  it('is empty when the unit has no cgroup, or systemd has removed it', async () => {
    const roots = hybridTree();
    expect(await unitCgroupProcs('', roots)).toEqual([]);
    expect(await unitCgroupProcs('/llmgw.slice/llmgw-shard-gone.service', roots)).toEqual([]);
  });

  it('cannot tell (undefined) without a cgroup hierarchy or for a path that climbs out of it', async () => {
    const roots = hybridTree();
    expect(await unitCgroupProcs('/llmgw.slice/llmgw-shard-a.service', [join(root, 'nowhere')])).toBeUndefined();
    expect(await unitCgroupProcs('/../etc', roots)).toBeUndefined();
  });
});
