import { execFileSync } from 'node:child_process';
import { accessSync, appendFileSync, closeSync, constants, mkdtempSync, openSync, rmSync, writeFileSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import { describe, expect, it, onTestFinished, vi } from 'vitest';
import { KmsgReader } from '../../../src/agent/health/kmsg-reader.js';

function deviceWritable(): boolean {
  try {
    accessSync('/dev/kmsg', constants.R_OK | constants.W_OK);
    return true;
  } catch {
    return false;
  }
}

// The real kernel log: root may both read it and log a record into it. The
// record is no Xid, so agents of other tests reading /dev/kmsg ignore it.
describe.skipIf(!deviceWritable())('KmsgReader on the real /dev/kmsg', () => {
  it('delivers a record the kernel logs after start, without polling, and none from before', async () => {
    const before = `llmgw-test before ${randomUUID()}`;
    writeFileSync('/dev/kmsg', `${before}\n`);
    // Start is known to /proc/uptime's hundredth of a second.
    await new Promise((r) => setTimeout(r, 50));
    const lines: string[] = [];
    const reader = new KmsgReader({ path: '/dev/kmsg', onLine: (l) => lines.push(l), pollMs: 3_600_000 });
    onTestFinished(() => reader.close());
    expect(await reader.start()).toBe(true);
    const after = `llmgw-test after ${randomUUID()}`;
    writeFileSync('/dev/kmsg', `${after}\n`);
    // A poll every hour would never see it: only the event-driven stream can.
    await vi.waitFor(() => expect(lines.some((l) => l.endsWith(`;${after}`))).toBe(true), { timeout: 10_000 });
    expect(lines.some((l) => l.includes(before))).toBe(false);
    expect(lines.every((l) => /^\d+,\d+,\d+,[^;]*;/.test(l) || l.startsWith(' '))).toBe(true);
  });

  it('stops reading at close: a record logged after it is not delivered', async () => {
    const lines: string[] = [];
    const reader = new KmsgReader({ path: '/dev/kmsg', onLine: (l) => lines.push(l) });
    expect(await reader.start()).toBe(true);
    await reader.close();
    const after = `llmgw-test closed ${randomUUID()}`;
    writeFileSync('/dev/kmsg', `${after}\n`);
    await new Promise((r) => setTimeout(r, 300));
    expect(lines.some((l) => l.includes(after))).toBe(false);
  });
});

describe('KmsgReader on a file', () => {
  it('says false, with a warning, for a log it cannot open', async () => {
    const warn = vi.fn();
    const logger = { warn, debug: vi.fn(), info: vi.fn(), error: vi.fn() };
    const reader = new KmsgReader({ path: '/nonexistent/kmsg', onLine: () => {}, logger: logger as never });
    expect(await reader.start()).toBe(false);
    expect(warn.mock.calls[0]?.[0]).toMatchObject({ path: '/nonexistent/kmsg', err: 'no such file' });
    expect(warn.mock.calls[0]?.[1]).toMatch(/^kernel log unreadable: .*; set discovery\.kmsg to \/dev\/kmsg or a file$/);
    await reader.close();
  });
});

function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-kmsg-reader-'));
  onTestFinished(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

function warnLogger() {
  const warn = vi.fn();
  return { warn, logger: { warn, debug: vi.fn(), info: vi.fn(), error: vi.fn() } as never };
}

describe('KmsgReader on what is not a kernel log', () => {
  // Streamed, /dev/null made epoll_ctl fail and libuv abort(): this very test
  // process would be killed with SIGABRT (security review 2, N5).
  it.each([
    ['/dev/null, where containers map /dev/kmsg', () => '/dev/null', 'the character device 1:3 (/dev/null)'],
    ['/dev/zero', () => '/dev/zero', 'the character device 1:5 (/dev/zero)'],
    ['a directory', () => tempDir(), 'a directory'],
  ])('reads nothing from %s, and warns once with what it is and what to set', async (_name, path, what) => {
    const { warn, logger } = warnLogger();
    const lines: string[] = [];
    const reader = new KmsgReader({ path: path(), onLine: (l) => lines.push(l), pollMs: 10, logger });
    onTestFinished(() => reader.close());
    expect(await reader.start()).toBe(false);
    await new Promise((r) => setTimeout(r, 100));
    expect(warn).toHaveBeenCalledTimes(1);
    expect(warn.mock.calls[0]?.[0]).toMatchObject({ kind: what });
    expect(warn.mock.calls[0]?.[1]).toMatch(/^kernel log not read: discovery\.kmsg \S+ is .*; set discovery\.kmsg to \/dev\/kmsg or a file$/);
    expect(warn.mock.calls[0]?.[1]).toContain(what);
    expect(lines).toEqual([]);
  });
});

describe('KmsgReader on a FIFO or a file (tests)', () => {
  it('delivers the lines written to a FIFO', async () => {
    const fifo = join(tempDir(), 'kmsg.fifo');
    execFileSync('mkfifo', [fifo]);
    const { warn, logger } = warnLogger();
    const lines: string[] = [];
    const reader = new KmsgReader({ path: fifo, onLine: (l) => lines.push(l), pollMs: 10, logger });
    onTestFinished(() => reader.close());
    expect(await reader.start()).toBe(true);
    const fd = openSync(fifo, constants.O_WRONLY);
    onTestFinished(() => closeSync(fd));
    writeSync(fd, 'one\ntwo\n');
    await vi.waitFor(() => expect(lines).toEqual(['one', 'two']));
    expect(warn).not.toHaveBeenCalled();
  });

  it('delivers the lines appended to a file after start, none from before', async () => {
    const file = join(tempDir(), 'kmsg');
    writeFileSync(file, 'before\n');
    const lines: string[] = [];
    const reader = new KmsgReader({ path: file, onLine: (l) => lines.push(l), pollMs: 10 });
    onTestFinished(() => reader.close());
    expect(await reader.start()).toBe(true);
    appendFileSync(file, 'after\n');
    await vi.waitFor(() => expect(lines).toEqual(['after']));
  });
});
