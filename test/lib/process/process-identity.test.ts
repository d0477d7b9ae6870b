import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { parseProcStat, readProcStat } from '../../../src/lib/process/proc-stat.js';
import { checkIdentity, readBootId } from '../../../src/lib/process/process-identity.js';
import { readProcessIdentity } from '../../helpers/read-process-identity.js';
import { until } from '../../helpers/engine-processes.js';

const started: number[] = [];
afterEach(() => {
  for (const pid of started.splice(0)) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {}
  }
});

// Fields 3..52 of a real stat line, with start time (field 22) = 987654.
const tail = 'S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 100 18446744073709551615 1 1 0 0 0 0 0 4096 0 0 0 0 17 1 0 0 0 0 0 0 0 0 0 0 0 0 0';

describe('parseProcStat', () => {
  it.each([
    ['plain', 'python3'],
    ['spaces', 'vllm serve x'],
    ['parentheses', 'a) (b'],
    ['a trailing paren', 'x)'],
  ])('reads fields after a comm with %s', (_what, comm) => {
    const stat = parseProcStat(`4321 (${comm}) ${tail}\n`);
    expect(stat).toEqual({ pid: 4321, comm, state: 'S', ppid: 1, pgrp: 4242, startTime: '987654' });
  });

  it('refuses a line it cannot read rather than guessing', () => {
    expect(parseProcStat('')).toBeUndefined();
    expect(parseProcStat('12 (x) S 1')).toBeUndefined();
  });
});

describe('process identity', () => {
  it('reads the start time of a real process whose name has spaces and parentheses', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'llmgw-comm-'));
    try {
      const odd = join(dir, 'a) (b c');
      symlinkSync(process.execPath, odd);
      const plain = spawn(process.execPath, ['-e', 'setInterval(()=>{},1<<30)'], { stdio: 'ignore' });
      const weird = spawn(odd, ['-e', 'setInterval(()=>{},1<<30)'], { stdio: 'ignore' });
      started.push(plain.pid!, weird.pid!);
      await until(() => readProcStat(weird.pid!)?.comm === 'a) (b c', 'the odd name to show');
      const a = readProcStat(plain.pid!)!;
      const b = readProcStat(weird.pid!)!;
      expect(b.ppid).toBe(process.pid);
      // Started within a moment of each other: their start times (clock ticks) are close.
      expect(Math.abs(Number(a.startTime) - Number(b.startTime))).toBeLessThan(3000);
      expect(checkIdentity(weird.pid!, readProcessIdentity(weird.pid!)!)).toEqual({ alive: true });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('says a pid with another start time is another process', () => {
    const mine = readProcessIdentity(process.pid)!;
    const check = checkIdentity(process.pid, { ...mine, startTime: String(Number(mine.startTime) + 1) });
    expect(check).toEqual({ alive: false, reason: expect.stringMatching(/now belongs to another process/) });
  });

  it('says a state from another boot describes nothing running', () => {
    const mine = readProcessIdentity(process.pid)!;
    expect(checkIdentity(process.pid, { ...mine, bootId: 'not-this-boot' })).toMatchObject({
      alive: false,
      reason: expect.stringMatching(/before a reboot/),
    });
    expect(readBootId()).toMatch(/^[0-9a-f-]{36}$/);
  });
});

describe('checkIdentity with a recorded process group', () => {
  it('refuses a live, matching pid that does not lead the recorded group, naming the group it is in', async () => {
    // Not detached: the child stays in this test's group, so it leads none.
    const child = spawn('sleep', ['30'], { stdio: 'ignore' });
    started.push(child.pid as number);
    await until(() => readProcessIdentity(child.pid as number) !== undefined, 'the child to run');
    const identity = readProcessIdentity(child.pid as number);
    if (!identity) throw new Error('no identity');
    expect(checkIdentity(child.pid as number, identity)).toEqual({ alive: true });
    const own = readProcStat(process.pid)?.pgrp;
    expect(checkIdentity(child.pid as number, identity, child.pid)).toEqual({
      alive: false,
      reason: `process ${child.pid} is in process group ${own}, not the recorded ${child.pid}`,
    });
  });

  it('accepts a group leader whose pgid is its pid', async () => {
    const child = spawn('sleep', ['30'], { stdio: 'ignore', detached: true });
    started.push(child.pid as number);
    await until(() => readProcessIdentity(child.pid as number) !== undefined, 'the child to run');
    const identity = readProcessIdentity(child.pid as number);
    if (!identity) throw new Error('no identity');
    expect(checkIdentity(child.pid as number, identity, child.pid)).toEqual({ alive: true });
  });
});
