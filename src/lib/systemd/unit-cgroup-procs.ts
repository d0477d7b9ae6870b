import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { isNotFound } from '../errno.js';
import { parseCgroupProcs } from '../process/cgroup-members.js';

/**
 * Where systemd's unit cgroups are, in the order looked at: the unified
 * hierarchy of a cgroup v2 host, the unified one of a hybrid host (systemd
 * tracks every unit's processes there too), systemd's own named v1 hierarchy
 * of a legacy host. The first with a cgroup.procs at its root is the one.
 */
const CGROUP_ROOTS = ['/sys/fs/cgroup', '/sys/fs/cgroup/unified', '/sys/fs/cgroup/systemd'];

/**
 * The pids still in a unit's cgroup, from its ControlGroup property (as
 * `systemctl show` prints it). A unit whose main process has exited under
 * RemainAfterExit=yes is `active (exited)` whether or not the engine left
 * workers behind, and systemd's properties do not say which (TasksCurrent
 * needs the pids controller, absent on many hosts): only the cgroup does.
 * Empty when the unit has no cgroup (any more: systemd removes an empty
 * one); undefined when it cannot be told (no cgroup hierarchy found, an
 * unreadable file), and the caller must not take that for "empty" unless
 * what it does next is safe either way.
 */
export async function unitCgroupProcs(controlGroup: string, roots: readonly string[] = CGROUP_ROOTS): Promise<number[] | undefined> {
  if (controlGroup === '') return [];
  if (!controlGroup.startsWith('/') || controlGroup.split('/').includes('..')) return undefined;
  const root = roots.find((r) => existsSync(join(r, 'cgroup.procs')));
  if (root === undefined) return undefined;
  try {
    return parseCgroupProcs(await readFile(join(root, controlGroup, 'cgroup.procs'), 'utf8'));
  } catch (err) {
    // ENOENT: systemd removed the unit's cgroup, which it does once nothing is left in it.
    if (isNotFound(err)) return [];
    return undefined;
  }
}
