import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { IP_LOCAL_PORT_RANGE, isInPortRange, readEphemeralPortRange, readEphemeralPortRangeSync } from '../../src/lib/ephemeral-port-range.js';

const dir = mkdtempSync(join(tmpdir(), 'llmgw-portrange-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function rangeFile(text: string): string {
  const p = join(dir, `range-${Math.random().toString(36).slice(2)}`);
  writeFileSync(p, text);
  return p;
}

describe('readEphemeralPortRange', () => {
  it('reads the two numbers the kernel writes, tab-separated with a newline', async () => {
    expect(await readEphemeralPortRange(rangeFile('32768\t60999\n'))).toEqual({ low: 32768, high: 60999 });
    expect(await readEphemeralPortRange(rangeFile('1024 65000'))).toEqual({ low: 1024, high: 65000 });
  });

  it('reads this machine\'s real range', async () => {
    const [low, high] = readFileSync(IP_LOCAL_PORT_RANGE, 'utf8').trim().split(/\s+/).map(Number);
    expect(await readEphemeralPortRange()).toEqual({ low, high });
  });

  it('gives undefined, not a guess, for a missing or nonsensical file', async () => {
    expect(await readEphemeralPortRange(join(dir, 'absent'))).toBeUndefined();
    expect(await readEphemeralPortRange(rangeFile(''))).toBeUndefined();
    expect(await readEphemeralPortRange(rangeFile('60999 32768\n'))).toBeUndefined();
    expect(await readEphemeralPortRange(rangeFile('0 70000\n'))).toBeUndefined();
    expect(await readEphemeralPortRange(rangeFile('a b\n'))).toBeUndefined();
  });
});

describe('readEphemeralPortRangeSync', () => {
  it('reads what the async read reads, from the same parser', async () => {
    for (const text of ['32768\t60999\n', '1024 65000', '', '60999 32768\n', '0 70000\n', 'a b\n']) {
      const path = rangeFile(text);
      expect(readEphemeralPortRangeSync(path)).toEqual(await readEphemeralPortRange(path));
    }
    expect(readEphemeralPortRangeSync(rangeFile('32768\t60999\n'))).toEqual({ low: 32768, high: 60999 });
  });

  it('gives undefined for a missing file instead of throwing', () => {
    expect(readEphemeralPortRangeSync(join(dir, 'absent'))).toBeUndefined();
  });
});

describe('isInPortRange', () => {
  it('includes both ends', () => {
    const r = { low: 32768, high: 60999 };
    expect([32767, 32768, 40000, 60999, 61000].map((p) => isInPortRange(p, r))).toEqual([false, true, true, true, false]);
  });
});
