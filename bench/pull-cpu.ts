/**
 * The CPU that bench 14b's rounds spend, beside their wall time: what the
 * pull's own process takes (its main thread, the rest: the hash thread,
 * libuv's pool), what curl takes, and what the hub (in the bench's process)
 * takes serving each. On a host with two cores the hub shares them with
 * the client, so a client that spends more CPU per byte than curl, on more
 * threads, cannot keep curl's time however its threads overlap: the wall
 * time of a round is at least its CPU and the hub's over two cores. These
 * figures are that profile, measured in the same run (issue 52, item 1:
 * "where a target is not reached, the note shows the profile that says why").
 */
import { median } from './bench-support.js';

/** CPU of one round, milliseconds of user + system time. */
export interface RoundCpu {
  /** The client's process: every thread (process.cpuUsage, or the shell's `times` of curl). */
  client: number;
  /** The pull's main thread (10 ms ticks, /proc/self/task/PID/stat); undefined for curl. */
  main?: number;
  /** The bench's process while the round ran: the hub serving it, and the child's spawn. */
  hub: number;
}

/**
 * Lines the pull's child adds at its end: `cpu TOTAL MAIN`, user + system
 * milliseconds since `cpu0`/`main0` (a script fragment run before its pull).
 */
export const CHILD_CPU_START = `import { readFileSync as __rf } from 'node:fs';
const __mainTicks = () => { const s = __rf('/proc/self/task/' + process.pid + '/stat', 'utf8'); const f = s.slice(s.lastIndexOf(')') + 2).split(' '); return (Number(f[11]) + Number(f[12])) * 10; };
const __cpu0 = process.cpuUsage(); const __main0 = __mainTicks();`;
export const CHILD_CPU_END = `{ const c = process.cpuUsage(__cpu0); console.log('cpu ' + ((c.user + c.system) / 1000).toFixed(1) + ' ' + (__mainTicks() - __main0)); }`;

/** The `cpu TOTAL MAIN` line a child printed, if any. */
export function childCpu(stdout: string): { client: number; main: number } | undefined {
  const m = /^cpu (\d+(?:\.\d+)?) (\d+)$/m.exec(stdout);
  return m ? { client: Number(m[1]), main: Number(m[2]) } : undefined;
}

/** The children's user + system time from a shell's `times` (its second line: `0m0.012000s 0m0.040000s`). */
export function shellChildrenCpu(stdout: string): number | undefined {
  const lines = stdout.trim().split('\n');
  const m = /^(\d+)m(\d+(?:\.\d+)?)s (\d+)m(\d+(?:\.\d+)?)s$/.exec(lines[lines.length - 1] ?? '');
  if (!m) return undefined;
  return (Number(m[1]) * 60 + Number(m[2]) + Number(m[3]) * 60 + Number(m[4])) * 1000;
}

/** The bench process's CPU (the hub's) while `fn` runs, added to what `fn` answers. */
export async function withHubCpu<T extends object>(fn: () => Promise<T>): Promise<T & { hub: number }> {
  const before = process.cpuUsage();
  const r = await fn();
  const d = process.cpuUsage(before);
  return { ...r, hub: (d.user + d.system) / 1000 };
}

/** The note's sentence: medians of each kind's CPU, and the least wall time two cores allow for each. */
export function cpuNote(pull: readonly RoundCpu[], curl: readonly RoundCpu[], cores: number): string {
  const med = (xs: readonly number[]) => (xs.length ? median([...xs]) : Number.NaN);
  const p = { client: med(pull.map((c) => c.client)), main: med(pull.flatMap((c) => (c.main === undefined ? [] : [c.main]))), hub: med(pull.map((c) => c.hub)) };
  const c = { client: med(curl.map((x) => x.client)), hub: med(curl.map((x) => x.hub)) };
  const f = (x: number) => x.toFixed(0);
  const least = (client: number, hub: number, busiest: number) => Math.max((client + hub) / cores, busiest);
  return `14b CPU per round (ms of user + system time, medians of ${pull.length} rounds): the pull's process ${f(p.client)} (its main thread ${f(p.main)}, its other threads ${f(p.client - p.main)}: the hash thread reading back and hashing, libuv's pool), the hub serving it ${f(p.hub)}; curl ${f(c.client)}, the hub serving it ${f(c.hub)}. On ${cores} cores the least wall time that CPU allows is ${f(least(p.client, p.hub, p.main))} ms for the pull and ${f(least(c.client, c.hub, c.client))} ms for curl (the CPU spread over the cores, or the busiest single thread when that is longer); the pull spends ${(p.client / c.client).toFixed(2)}x curl's CPU for the same bytes, the sha256 of every byte and the read back it hashes from being the difference`;
}
