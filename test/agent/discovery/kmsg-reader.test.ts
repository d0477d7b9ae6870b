import { accessSync, constants, writeFileSync } from 'node:fs';
import { randomUUID } from 'node:crypto';
import { describe, expect, it, onTestFinished, vi } from 'vitest';
import { KmsgReader } from '../../../src/agent/discovery/kmsg-reader.js';

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
    expect(warn.mock.calls[0]?.[1]).toMatch(/kernel log unreadable/);
    await reader.close();
  });
});
