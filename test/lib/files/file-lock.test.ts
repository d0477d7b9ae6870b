import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, readlinkSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { tryLockFile } from '../../../src/lib/files/file-lock.js';
import { until } from '../../helpers/engine-processes.js';

const dir = mkdtempSync(join(tmpdir(), 'llmgw-lock-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const children: ChildProcess[] = [];
afterEach(() => {
  for (const c of children.splice(0)) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
});

/** Whether another process (util-linux flock(1)) could take the lock now. */
const othersCanLock = (path: string) => spawnSync('flock', ['--nonblock', path, 'true']).status === 0;

/** One process holding `path` until killed: a shell that locks its fd 9 with flock(1), then becomes sleep, fd 9 still open. */
async function holdElsewhere(path: string): Promise<ChildProcess> {
  const child = spawn('sh', ['-c', 'exec 9>>"$1"; flock 9; exec sleep 1000', 'sh', path], { stdio: 'ignore' });
  children.push(child);
  await until(() => !othersCanLock(path), 'flock(1) to hold the lock');
  return child;
}

describe('tryLockFile', () => {
  it('holds the lock against other processes until released, writing its pid', () => {
    const path = join(dir, 'a.lock');
    const lock = tryLockFile(path);
    expect(lock.kind).toBe('held');
    expect(readFileSync(path, 'utf8')).toBe(`${process.pid}\n`);
    expect(othersCanLock(path)).toBe(false);
    if (lock.kind === 'held') lock.release();
    expect(othersCanLock(path)).toBe(true);
  });

  it('is busy while another process holds it, naming the pid that process wrote', async () => {
    const path = join(dir, 'b.lock');
    writeFileSync(path, '4242\n');
    await holdElsewhere(path);
    expect(tryLockFile(path)).toEqual({ kind: 'busy', holderPid: 4242 });
  });

  it('is free again the moment its holder is killed with SIGKILL: the kernel leaves nothing stale', async () => {
    const path = join(dir, 'c.lock');
    const holder = await holdElsewhere(path);
    expect(tryLockFile(path).kind).toBe('busy');
    holder.kill('SIGKILL');
    await new Promise((r) => holder.once('exit', r));
    const lock = tryLockFile(path);
    expect(lock.kind).toBe('held');
    if (lock.kind === 'held') lock.release();
  });

  it('is not inherited by a process spawned while it is held, so an engine that outlives the agent never holds it', async () => {
    const path = join(dir, 'd.lock');
    const lock = tryLockFile(path);
    expect(lock.kind).toBe('held');
    const child = spawn('sleep', ['1000'], { stdio: 'ignore' });
    children.push(child);
    await until(() => readdirSync(`/proc/${child.pid}/fd`).length > 0, 'the child to start');
    const childFds = readdirSync(`/proc/${child.pid}/fd`).map((fd) => {
      try {
        return readlinkSync(`/proc/${child.pid}/fd/${fd}`);
      } catch {
        return '';
      }
    });
    expect(childFds).not.toContain(path);
    if (lock.kind === 'held') lock.release();
    // With the parent's fd closed, nobody holds it, though the child still runs.
    expect(othersCanLock(path)).toBe(true);
  });

  it('refuses a symlink planted at the path, leaving its target alone', () => {
    const target = join(dir, 'victim');
    writeFileSync(target, 'precious\n');
    const path = join(dir, 'e.lock');
    symlinkSync(target, path);
    const lock = tryLockFile(path);
    expect(lock.kind).toBe('unsupported');
    expect(lock.kind === 'unsupported' && lock.reason).toMatch(/ELOOP|symbolic link/);
    expect(readFileSync(target, 'utf8')).toBe('precious\n');
  });
});
