import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import { classifyKmsgSource, deviceNumbers } from '../../../src/agent/health/classify-kmsg-source.js';

function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-kmsg-kind-'));
  onTestFinished(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** glibc's makedev(), the inverse of what is under test, for device numbers beyond 8 bits of minor and 12 of major. */
function makedev(major: number, minor: number): number {
  const dev = ((BigInt(major) & 0xfffn) << 8n) | ((BigInt(major) & ~0xfffn) << 32n) | (BigInt(minor) & 0xffn) | ((BigInt(minor) & ~0xffn) << 12n);
  return Number(dev);
}

describe('classifyKmsgSource', () => {
  it.skipIf(!existsSync('/dev/kmsg'))('streams only the real kernel log, the character device 1:11', () => {
    expect(classifyKmsgSource(statSync('/dev/kmsg'))).toEqual({ kind: 'device' });
  });

  it('refuses /dev/null, where containers map /dev/kmsg, and names it', () => {
    expect(classifyKmsgSource(statSync('/dev/null'))).toEqual({ kind: 'refused', what: 'the character device 1:3 (/dev/null)' });
  });

  it('refuses other character devices, which epoll may not watch or whose read never ends', () => {
    expect(classifyKmsgSource(statSync('/dev/zero'))).toEqual({ kind: 'refused', what: 'the character device 1:5 (/dev/zero)' });
    expect(classifyKmsgSource(statSync('/dev/urandom'))).toEqual({ kind: 'refused', what: 'the character device 1:9 (/dev/urandom)' });
  });

  it('polls a regular file and a FIFO, as tests write them', () => {
    const dir = tempDir();
    writeFileSync(join(dir, 'kmsg'), '');
    execFileSync('mkfifo', [join(dir, 'kmsg.fifo')]);
    expect(classifyKmsgSource(statSync(join(dir, 'kmsg')))).toEqual({ kind: 'file' });
    expect(classifyKmsgSource(statSync(join(dir, 'kmsg.fifo')))).toEqual({ kind: 'fifo' });
  });

  it('refuses a directory and a socket', async () => {
    const dir = tempDir();
    expect(classifyKmsgSource(statSync(dir))).toEqual({ kind: 'refused', what: 'a directory' });
    const path = join(dir, 'kmsg.sock');
    const server = createServer();
    await new Promise<void>((resolve) => server.listen(path, resolve));
    onTestFinished(() => new Promise<void>((resolve) => server.close(() => resolve())));
    expect(classifyKmsgSource(statSync(path))).toEqual({ kind: 'refused', what: 'a socket' });
  });

  it.skipIf(!existsSync('/dev/loop0'))('refuses a block device, and gives its numbers', () => {
    expect(classifyKmsgSource(statSync('/dev/loop0'))).toEqual({ kind: 'refused', what: 'the block device 7:0' });
  });
});

describe('deviceNumbers', () => {
  it('splits a dev_t as glibc does, high bits of major and minor included', () => {
    for (const [major, minor] of [
      [1, 11],
      [1, 3],
      [259, 300_000],
      [4095, 255],
      [4096, 256],
      [0xfffff, 0xfffff],
    ] as const) {
      expect(deviceNumbers(makedev(major, minor))).toEqual({ major, minor });
    }
  });

  it('does not take a device whose low bits alone read 1:11 for the kernel log', () => {
    // 1:11 plus a high minor bit: minor 0x10000b, which only the 64-bit split sees.
    expect(deviceNumbers(makedev(1, 0x10000b))).toEqual({ major: 1, minor: 0x10000b });
  });
});
