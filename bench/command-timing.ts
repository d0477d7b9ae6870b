/**
 * Whole commands timed from outside, for the figures that set a CLI run
 * beside its reference (1, 6, 9, nvml): each command spawned and waited for,
 * the median of the runs taken.
 */
import { spawnSync } from 'node:child_process';
import { median } from './bench-support.js';

export const ms = (x: number) => `${x.toFixed(0)} ms`;

export function timeCommand(argv: string[], runs: number): number {
  const times: number[] = [];
  for (let i = 0; i < runs; i++) {
    const t0 = performance.now();
    const r = spawnSync(argv[0] as string, argv.slice(1), { stdio: 'ignore' });
    times.push(performance.now() - t0);
    if (r.status !== 0 && !argv.includes('ctl')) throw new Error(`${argv.join(' ')} exited ${r.status}`);
  }
  return median(times);
}

/** Alternates the commands run by run, so load on a shared machine falls on both alike. */
export function timeSideBySide(cmds: string[][], runs: number): number[] {
  const times: number[][] = cmds.map(() => []);
  for (let i = 0; i < runs; i++) {
    for (const [j, c] of cmds.entries()) (times[j] as number[]).push(timeCommand(c, 1));
  }
  return times.map(median);
}
