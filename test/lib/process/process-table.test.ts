import { type ChildProcess, spawn } from 'node:child_process';
import { closeSync, constants, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { engineUidsFor, findProcessesLoggingTo, findProcessesLoggingUnder, listProcessGroup } from '../../../src/lib/process/process-table.js';
import { until } from '../../helpers/engine-processes.js';

const NOBODY = 65534;
let dir: string;
const started: ChildProcess[] = [];
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'llmgw-ptable-'));
});
afterEach(() => {
  for (const c of started.splice(0)) c.kill('SIGKILL');
  rmSync(dir, { recursive: true, force: true });
});

/** A sleeper whose fd 1 is `log` opened with `flags` (by this test, as root), running as `uid`. */
function holder(log: string, flags: number, uid = 0): ChildProcess {
  const fd = openSync(log, flags);
  try {
    const argv = uid === 0 ? ['sleep', '30'] : ['setpriv', `--reuid=${uid}`, `--regid=${uid}`, '--clear-groups', 'sleep', '30'];
    const child = spawn(argv[0] as string, argv.slice(1), { stdio: ['ignore', fd, 'ignore'], cwd: '/' });
    started.push(child);
    return child;
  } finally {
    closeSync(fd);
  }
}

async function running(child: ChildProcess): Promise<void> {
  await until(() => {
    try {
      return child.pid !== undefined && !readFileSync(`/proc/${child.pid}/cmdline`, 'utf8').startsWith('setpriv');
    } catch {
      return false;
    }
  }, 'the holder to exec sleep');
}

describe('findProcessesLoggingTo', () => {
  it('counts a root process writing the log on fd 1', async () => {
    const log = join(dir, 's.log');
    writeFileSync(log, '');
    const w = holder(log, constants.O_WRONLY | constants.O_APPEND);
    await running(w);
    expect(findProcessesLoggingTo(log).map((p) => p.pid)).toEqual([w.pid]);
    expect([...findProcessesLoggingUnder(dir).keys()]).toEqual([log]);
  });

  it('counts a writer running as a configured engine user only once that user is among the engine uids', async () => {
    const log = join(dir, 's.log');
    writeFileSync(log, '');
    const w = holder(log, constants.O_WRONLY | constants.O_APPEND, NOBODY);
    await running(w);
    // The agent's own uid alone: a nobody writer is someone else's, as before engines.<name>.user.
    expect(findProcessesLoggingTo(log)).toEqual([]);
    const uids = engineUidsFor([undefined, { uid: NOBODY }]);
    expect([...uids].sort()).toEqual([0, NOBODY]);
    expect(findProcessesLoggingTo(log, uids).map((p) => p.pid)).toEqual([w.pid]);
  });

  it('does not count a process that has the log open read-only (security review, finding 4)', async () => {
    const log = join(dir, 's.log');
    writeFileSync(log, '');
    const r = holder(log, constants.O_RDONLY);
    await running(r);
    expect(findProcessesLoggingTo(log)).toEqual([]);
    expect(findProcessesLoggingUnder(dir).size).toBe(0);
  });

  it('does not count a writer running as another uid than the engines, unless that uid is the engine user', async () => {
    const log = join(dir, 's.log');
    writeFileSync(log, '');
    const n = holder(log, constants.O_WRONLY | constants.O_APPEND, NOBODY);
    await running(n);
    expect(findProcessesLoggingTo(log)).toEqual([]);
    expect(findProcessesLoggingTo(log, new Set([NOBODY])).map((p) => p.pid)).toEqual([n.pid]);
  });
});

describe('listProcessGroup', () => {
  it('lists the running members of a group, and none once the whole group is gone', async () => {
    // A leader of its own group with one child in it, as an engine and its worker.
    const leader = spawn('sh', ['-c', 'sleep 30 & wait'], { detached: true, stdio: 'ignore' });
    started.push(leader);
    const pgid = leader.pid as number;
    await until(() => listProcessGroup(pgid).length === 2, 'the leader and its sleep in one group');
    expect(listProcessGroup(pgid)).toContain(pgid);
    process.kill(-pgid, 'SIGKILL');
    await until(() => listProcessGroup(pgid).length === 0, 'the group to be gone');
    expect(listProcessGroup(pgid)).toEqual([]);
  });

  it('lists nothing for a group no process is in, and for ids that name no group', () => {
    expect(listProcessGroup(2 ** 22 + 1)).toEqual([]);
    expect(listProcessGroup(1)).toEqual([]);
    expect(listProcessGroup(0)).toEqual([]);
    expect(listProcessGroup(-5)).toEqual([]);
  });
});
