import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { PortPool } from '../../src/control/port-pool.js';
import { readEphemeralPortRange } from '../../src/control/read-ephemeral-port-range.js';
import { REPO_ROOT, runCli } from '../helpers/run-cli.js';

function takeAll(pool: PortPool): number[] {
  const ports: number[] = [];
  for (let p = pool.take(); p !== undefined; p = pool.take()) ports.push(p);
  return ports;
}

describe('PortPool', () => {
  it('never hands out a port inside the ephemeral range, and says how many it skips', () => {
    const pool = new PortPool([32760, 32775], [32768, 60999]);
    expect(pool.avoidedCount).toBe(8);
    expect(takeAll(pool)).toEqual([32760, 32761, 32762, 32763, 32764, 32765, 32766, 32767]);
  });

  it('refuses a range that lies wholly inside the ephemeral range, naming both', () => {
    expect(() => new PortPool([40000, 40100], [32768, 60999])).toThrow(/port range 40000-40100 lies inside the ephemeral port range 32768-60999/);
  });

  it('hands out every port of a range that does not overlap', () => {
    const pool = new PortPool([18000, 18003], [32768, 60999]);
    expect(pool.avoidedCount).toBe(0);
    expect(takeAll(pool)).toEqual([18000, 18001, 18002, 18003]);
  });
});

describe('readEphemeralPortRange', () => {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-ports-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  const file = (text: string) => {
    const p = join(dir, `range-${Math.random()}`);
    writeFileSync(p, text);
    return p;
  };

  it("reads the kernel's tab-separated pair", () => {
    expect(readEphemeralPortRange(file('32768\t60999\n'))).toEqual([32768, 60999]);
  });

  it('is undefined for a missing or garbled file rather than a guess', () => {
    expect(readEphemeralPortRange(join(dir, 'nosuch'))).toBeUndefined();
    expect(readEphemeralPortRange(file('60999 32768\n'))).toBeUndefined();
    expect(readEphemeralPortRange(file('many\n'))).toBeUndefined();
  });
});

describe('llmgw dev control-plane --port-range inside the ephemeral range', () => {
  it('is a one-line usage error (exit 2) naming the ranges', async () => {
    const range = readEphemeralPortRange();
    if (!range) return;
    const r = await runCli(['dev', 'control-plane', '--listen', '127.0.0.1:0', '--deployment', 'examples/deployment.yaml', '--port-range', `${range[0]}-${range[1]}`], {
      cwd: REPO_ROOT,
      timeout: 20_000,
    });
    expect(r.exitCode).toBe(2);
    expect(r.stderr).toMatch(/lies inside the ephemeral port range/);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
  });
});
