import { chmodSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { runNvidiaSmi } from '../../../src/agent/discovery/run-nvidia-smi.js';

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

/** Processes whose command line names `path`. */
function running(path: string): number {
  let n = 0;
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      if (readFileSync(`/proc/${name}/cmdline`, 'utf8').includes(path)) n++;
    } catch {
      // Gone while scanned.
    }
  }
  return n;
}

describe('runNvidiaSmi', () => {
  it('starts calls made together in separate turns of the event loop, so a death is read between their spawns', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'llmgw-smi-turns-'));
    dirs.push(dir);
    // A slow nvidia-smi (a busy driver): each call is still running when the next is started.
    const smi = join(dir, 'nvidia-smi');
    writeFileSync(smi, '#!/bin/sh\nsleep 1\n');
    chmodSync(smi, 0o755);

    // What the loop sees at each turn: how many of the calls run.
    const seen: number[] = [];
    let done = false;
    const tick = () => {
      seen.push(running(smi));
      if (!done) setImmediate(tick);
    };
    setImmediate(tick);
    const calls = [['-L'], ['--query-compute-apps=pid'], ['--version']].map((args) => runNvidiaSmi(smi, args, { timeoutMs: 10_000 }));
    const results = await Promise.all(calls);
    done = true;
    expect(results.map((r) => r.ok)).toEqual([true, true, true]);
    // Until all three run (they end one by one after): spawned in one turn,
    // the loop would see none, then all three.
    const starting = seen.slice(0, seen.indexOf(3));
    expect(seen).toContain(3);
    expect(starting.some((n) => n > 0)).toBe(true);
  });
});
