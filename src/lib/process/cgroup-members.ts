import { readFile } from 'node:fs/promises';
import { join } from 'node:path';

/**
 * The pids in the cgroup (v2, unified hierarchy) that `pid` is in: its
 * /proc/<pid>/cgroup "0::<path>" line, then <cgroupRoot><path>/cgroup.procs.
 * An engine under systemd-run is its unit's whole cgroup, workers that left
 * its process group included. Undefined when it cannot be told (the process
 * is gone, a v1-only hierarchy, the root cgroup, which holds everything
 * unplaced and is nobody's engine): the caller falls back to the group.
 */
export async function cgroupMembers(pid: number, opts: { procRoot?: string; cgroupRoot?: string } = {}): Promise<number[] | undefined> {
  const procRoot = opts.procRoot ?? '/proc';
  const cgroupRoot = opts.cgroupRoot ?? '/sys/fs/cgroup';
  let path: string | undefined;
  try {
    const text = await readFile(join(procRoot, String(pid), 'cgroup'), 'utf8');
    path = text
      .split('\n')
      .find((l) => l.startsWith('0::'))
      ?.slice(3);
  } catch {
    return undefined;
  }
  if (path === undefined || path === '/' || path === '' || path.includes('..')) return undefined;
  try {
    return parseCgroupProcs(await readFile(join(cgroupRoot, path, 'cgroup.procs'), 'utf8'));
  } catch {
    return undefined;
  }
}

/** The pids a cgroup.procs file lists, one a line. */
export function parseCgroupProcs(text: string): number[] {
  return text
    .split('\n')
    .filter((l) => /^\d+$/.test(l))
    .map(Number);
}
