import { formatBytes } from '../../lib/format-bytes.js';

/**
 * Whether the directories the agent writes to are too full for new shards:
 * kubelet's DiskPressure (nodefs.available, nodefs.inodesFree), judged
 * apart from the watch that reads them so the judgement is a pure function.
 */

/** One directory's file system as statfs(2) reads it. */
export interface DiskReading {
  /** The config key the directory comes from ("log_dir", "state_dir"): what an operator searches for. */
  key: string;
  path: string;
  /** Bytes an unprivileged writer may still use (f_bavail × f_bsize). */
  freeBytes: number;
  /** Free inodes (f_ffree) and the file system's total (f_files); a total of 0 means it does not count them (btrfs). */
  freeInodes: number;
  totalInodes: number;
}

export interface DiskPressureThresholds {
  /** supervisor.disk_pressure.min_free, bytes. */
  minFreeBytes: number;
  /** supervisor.disk_pressure.min_free_inodes, a share 0..1; 0 is off. */
  minFreeInodes: number;
}

/** The judgement: active with one line per directory short of a threshold, or not. */
export interface DiskPressureVerdict {
  active: boolean;
  /** "log_dir /var/log/llmgw has 12 MiB free (< 1 GiB)"; '' when not active. */
  reason: string;
  /** The config key an operator would change to stop the refusals: min_free or min_free_inodes. */
  keys: string[];
}

export function judgeDiskPressure(readings: readonly DiskReading[], t: DiskPressureThresholds): DiskPressureVerdict {
  const problems: string[] = [];
  const keys = new Set<string>();
  for (const r of readings) {
    if (r.freeBytes < t.minFreeBytes) {
      problems.push(`${r.key} ${r.path} has ${formatBytes(r.freeBytes)} free (< ${formatBytes(t.minFreeBytes)})`);
      keys.add('min_free');
    }
    if (t.minFreeInodes > 0 && r.totalInodes > 0 && r.freeInodes / r.totalInodes < t.minFreeInodes) {
      const pct = (share: number) => `${Number((share * 100).toFixed(1))}%`;
      problems.push(`${r.key} ${r.path} has ${r.freeInodes} inodes free, ${pct(r.freeInodes / r.totalInodes)} (< ${pct(t.minFreeInodes)})`);
      keys.add('min_free_inodes');
    }
  }
  return { active: problems.length > 0, reason: problems.join('; '), keys: [...keys] };
}
