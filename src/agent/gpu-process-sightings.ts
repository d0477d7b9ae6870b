import type { GpuProcess } from '../gen/llmgw/v1/agent_pb.js';
import { type ProcStat, readProcStat } from '../lib/process/proc-stat.js';
import { isRunningStat } from '../lib/process/process-identity.js';

/**
 * The compute processes of the last hardware scan as they were when it
 * listed them: each pid with its start time (/proc/<pid>/stat field 22).
 * The list is up to discovery.interval (60 s) old, and a start right after
 * a shard's STOPPED was refused for that long, "GPU 7 is in use by pid N
 * (python3), which no shard owns", by the engine that had just ended
 * (issue 36, item 7). This tells a listed process that still runs from one
 * that is gone, and from a pid the kernel has since given to another
 * process, which the scan never saw on a GPU.
 */
export class GpuProcessSightings {
  /** pid → its start time when the scan listed it; undefined when it was gone already. */
  #seen = new Map<number, string | undefined>();

  constructor(private readonly readStat: (pid: number) => ProcStat | undefined = readProcStat) {}

  /** Called with each scan's processes, right after nvidia-smi listed them. */
  record(processes: readonly GpuProcess[]): void {
    this.#seen = new Map(processes.map((p) => [p.pid, this.readStat(p.pid)?.startTime]));
  }

  /**
   * Whether the listed process `pid` no longer runs: no /proc entry, a
   * zombie (it holds no GPU memory), or a pid that now names a process
   * started since the scan. A pid the scans never listed (an inventory read
   * from the cache at start) is judged by /proc alone. One /proc did not
   * have when the scan listed it is never judged gone: nvidia-smi may name
   * pids of another pid namespace (an agent in a container), and counting
   * those gone would let a start onto a GPU another process holds.
   */
  gone(pid: number): boolean {
    const now = this.readStat(pid);
    if (!this.#seen.has(pid)) return !isRunningStat(now);
    const then = this.#seen.get(pid);
    if (then === undefined) return false;
    return !isRunningStat(now) || now.startTime !== then;
  }
}
