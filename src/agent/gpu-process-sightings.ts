import type { GpuProcess } from '../gen/llmgw/v1/agent_pb.js';
import { type ProcStat, readProcStat } from '../lib/process/proc-stat.js';
import { isRunningStat } from '../lib/process/process-identity.js';

/** Ended engines remembered; far more than a node runs between two scans. */
const MAX_ENDED_ENGINES = 1024;

/** A listed process as /proc had it when the scan's list was recorded. */
interface Sighting {
  /** Its start time (/proc/<pid>/stat field 22); undefined when /proc no longer had it. */
  startTime?: string;
  /** Its process group: then, or from an earlier scan that saw it running. */
  pgrp?: number;
}

/**
 * The compute processes of the last hardware scan as they were when it
 * listed them: each pid with its start time (/proc/<pid>/stat field 22).
 * The list is up to discovery.interval (60 s) old, and a start right after
 * a shard's STOPPED was refused for that long, "GPU 7 is in use by pid N
 * (python3), which no shard owns", by the engine that had just ended
 * (issue 36, item 7). This tells a listed process that still runs from one
 * that is gone, and from a pid the kernel has since given to another
 * process, which the scan never saw on a GPU.
 *
 * A scan lists the processes first and records them seconds later (after
 * `nvidia-smi topo -m`, the HCAs, the network): an engine that ended in
 * between is listed, yet gone from /proc when recorded, which reads like a
 * pid of another namespace and was never judged gone: the next start on its
 * GPU was refused until the next scan (issue 47, item 7). So the agent says
 * when each of its engines ended (engineEnded), and a listed process of
 * that engine (its pid, or its process group as a scan saw it running) in a
 * scan begun no later than that end is the engine's own stale memory.
 */
export class GpuProcessSightings {
  #seen = new Map<number, Sighting>();
  /** When the scan recorded last began (the `now` clock): its list is no older. */
  #takenAt = Number.NEGATIVE_INFINITY;
  /** Process group of an engine of this agent → when its shard first ended with the engine gone. */
  #ended = new Map<number, number>();

  constructor(
    private readonly readStat: (pid: number) => ProcStat | undefined = readProcStat,
    private readonly now: () => number = () => performance.now(),
  ) {}

  /** Called with each scan's processes, right after the scan; `takenAt`, on the `now` clock, is when it began. */
  record(processes: readonly GpuProcess[], takenAt: number = this.now()): void {
    const before = this.#seen;
    this.#seen = new Map(
      processes.map((p) => {
        const stat = this.readStat(p.pid);
        return [p.pid, { startTime: stat?.startTime, pgrp: stat?.pgrp ?? before.get(p.pid)?.pgrp }];
      }),
    );
    this.#takenAt = takenAt;
  }

  /**
   * The engine whose process group is `pgrp` (a shard's pid) is gone: its
   * shard is STOPPED or FAILED and nothing of it runs. The first end counts.
   */
  engineEnded(pgrp: number, at: number = this.now()): void {
    if (pgrp <= 0 || this.#ended.has(pgrp)) return;
    this.#ended.set(pgrp, at);
    // Kept (an end before a scan excuses nothing in it), but bounded: the oldest go first.
    for (const group of this.#ended.keys()) {
      if (this.#ended.size <= MAX_ENDED_ENGINES) break;
      this.#ended.delete(group);
    }
  }

  /**
   * Whether the listed process `pid` no longer runs: no /proc entry, a
   * zombie (it holds no GPU memory), or a pid that now names a process
   * started since the scan. A pid the scans never listed (an inventory read
   * from the cache at start) is judged by /proc alone. One /proc did not
   * have when the scan listed it is judged gone only when it was one of this
   * agent's engines, ended no earlier than the scan began: otherwise it may
   * be a pid of another pid namespace (an agent in a container), and
   * counting it gone would let a start onto a GPU another process holds;
   * a scan begun after the engine ended, and still listing it, is believed.
   */
  gone(pid: number): boolean {
    const now = this.readStat(pid);
    const seen = this.#seen.get(pid);
    if (seen === undefined) return !isRunningStat(now);
    if (seen.startTime === undefined) return this.#endedSinceScan(seen.pgrp ?? pid) && !isRunningStat(now);
    return !isRunningStat(now) || now.startTime !== seen.startTime;
  }

  #endedSinceScan(pgrp: number): boolean {
    const at = this.#ended.get(pgrp);
    return at !== undefined && this.#takenAt <= at;
  }
}
