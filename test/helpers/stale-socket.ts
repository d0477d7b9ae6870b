import { mkdirSync, statSync } from 'node:fs';
import { dirname } from 'node:path';
import { execa } from 'execa';
import { expect } from 'vitest';

/** A socket file nobody listens on at `path`, as a process killed with -9 before it could remove it leaves it. */
export async function leaveStaleSocket(path: string): Promise<void> {
  mkdirSync(dirname(path), { recursive: true });
  await execa(process.execPath, ['-e', `require('net').createServer().listen(${JSON.stringify(path)}, () => process.kill(process.pid, 'SIGKILL'))`], {
    reject: false,
  });
  expect(statSync(path).isSocket()).toBe(true);
}
