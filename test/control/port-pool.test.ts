import { describe, expect, it } from 'vitest';
import { PortPool } from '../../src/control/port-pool.js';
import { readEphemeralPortRangeSync } from '../../src/lib/ephemeral-port-range.js';
import { REPO_ROOT, runCli } from '../helpers/run-cli.js';

function takeAll(pool: PortPool): number[] {
  const ports: number[] = [];
  for (let p = pool.take(); p !== undefined; p = pool.take()) ports.push(p);
  return ports;
}

describe('PortPool', () => {
  it('never hands out a port inside the ephemeral range, and says how many it skips', () => {
    const pool = new PortPool([32760, 32775], { low: 32768, high: 60999 });
    expect(pool.avoidedCount).toBe(8);
    expect(takeAll(pool)).toEqual([32760, 32761, 32762, 32763, 32764, 32765, 32766, 32767]);
  });

  it('refuses a range that lies wholly inside the ephemeral range, naming both', () => {
    expect(() => new PortPool([40000, 40100], { low: 32768, high: 60999 })).toThrow(/port range 40000-40100 lies inside the ephemeral port range 32768-60999/);
  });

  it('hands out every port of a range that does not overlap', () => {
    const pool = new PortPool([18000, 18003], { low: 32768, high: 60999 });
    expect(pool.avoidedCount).toBe(0);
    expect(takeAll(pool)).toEqual([18000, 18001, 18002, 18003]);
  });
});

describe('llmgw dev control-plane --port-range inside the ephemeral range', () => {
  it('is a one-line usage error (exit 2) naming the ranges', async () => {
    const range = readEphemeralPortRangeSync();
    if (!range) return;
    const r = await runCli(['dev', 'control-plane', '--listen', '127.0.0.1:0', '--deployment', 'examples/deployment.yaml', '--port-range', `${range.low}-${range.high}`], {
      cwd: REPO_ROOT,
      timeout: 20_000,
    });
    expect(r.exitCode).toBe(2);
    expect(r.stderr).toMatch(/lies inside the ephemeral port range/);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
  });
});
