import { freeFakeGpu } from '../../helpers/fake-gpus.js';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync, readFileSync, renameSync, rmSync, symlinkSync, unlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ShardState, type ShardStatus } from '../../../src/gen/llmgw/v1/agent_pb.js';
import { killEverything } from '../../helpers/engine-processes.js';
import { simStart } from '../../helpers/sim-shards.js';
import { type FaultHarness, type Scenario, freePort, isRunning, processesWritingUnder, sleep } from './fault-harness.js';

/**
 * The state directory and the disks under it go bad: state files that
 * cannot be read, a symlink where a state file should be, a file from
 * another schema version, a read-only state directory, a full disk under
 * the state files or the logs. The agent must refuse what it cannot trust
 * with a reason the control plane hears, never crash, and leave nothing
 * running that nobody supervises.
 */

const S = ShardState;
const statePath = (h: FaultHarness, id: string) => join(h.dirs.stateDir, 'shards', `${id}.json`);

/**
 * The disk scenarios test the writes themselves on a full disk: with the
 * disk pressure watch on, a tiny tmpfs refuses every start before a byte is
 * written (that refusal is test/agent/disk-pressure.test.ts's).
 */
const DISK_PRESSURE_OFF = ['disk_pressure:', '  interval: 0s'];

/** Mounts a tmpfs of `size` at `dir` (root only); unmounted when the scenario ends. */
function mountTmpfs(h: FaultHarness, dir: string, size: string): void {
  mkdirSync(dir, { recursive: true });
  execFileSync('mount', ['-t', 'tmpfs', '-o', `size=${size},mode=0755`, 'tmpfs', dir]);
  // Engines writing to the tmpfs first: once it is detached their files are no longer under the test's
  // directory, where the harness's last sweep looks (a sim engine survives a full log disk now).
  h.defer(async () => {
    await killEverything(dir);
    execFileSync('umount', ['-l', dir]);
  });
}

/**
 * Makes the bind mount at `dir` read-only. The kernel refuses (EBUSY) while a file is open for writing
 * through that mount, and the running agent may be writing a state file at that moment: it is asked again.
 */
async function remountReadOnly(dir: string): Promise<void> {
  for (let attempt = 1; ; attempt++) {
    try {
      execFileSync('mount', ['-o', 'remount,ro,bind', dir], { stdio: ['ignore', 'ignore', 'pipe'] });
      return;
    } catch (err) {
      if (attempt >= 100) throw err;
      await sleep(50);
    }
  }
}

/** Fills the file system holding `dir` until it refuses with ENOSPC; returns the filler's path. */
function fill(dir: string): string {
  const filler = join(dir, 'filler');
  try {
    writeFileSync(filler, Buffer.alloc(64 * 1024 * 1024));
  } catch (err) {
    assert.equal((err as NodeJS.ErrnoException).code, 'ENOSPC', 'filling the tmpfs failed for another reason');
    return filler;
  }
  throw new Error(`${dir} did not fill up: is it really a small tmpfs?`);
}

async function startReady(h: FaultHarness, id: string, gpu: number, args?: string[]): Promise<{ pid: number; port: number }> {
  const port = await freePort();
  const ready = h.waitShard(id, [S.READY, S.FAILED]);
  h.start(simStart(id, port, { args, gpu }));
  const st = await ready;
  assert.equal(S[st.state], 'READY', `${id}: ${st.error}`);
  return { pid: st.pid, port };
}

/**
 * Kills the agent, lets `damage` spoil the state of engines that were
 * serving, restarts it, and checks each spoiled one was refused: not
 * adopted, not listed, its engine ended, and a FAILED with the reason sent.
 */
async function restartWithDamagedState(
  h: FaultHarness,
  cases: { id: string; damage: (path: string) => void; reason: RegExp }[],
): Promise<void> {
  await h.boot();
  const engines = new Map<string, number>();
  for (const [i, c] of cases.entries()) engines.set(c.id, (await startReady(h, c.id, freeFakeGpu(i))).pid);
  await h.killAgent();
  for (const c of cases) c.damage(statePath(h, c.id));
  const failures = new Map<string, Promise<ShardStatus>>(cases.map((c) => [c.id, h.waitShard(c.id, [S.FAILED])]));
  const registered = h.waitRegister();
  h.startAgent();
  const reg = await registered;
  assert.deepEqual(reg.runningShards.map((r) => r.shardId), [], 'an engine with a state file it cannot trust was adopted');
  for (const c of cases) {
    const st = await failures.get(c.id);
    assert.match(st?.error ?? '', c.reason, `${c.id}: the FAILED report does not say why`);
    assert.equal(isRunning(engines.get(c.id) as number), false, `${c.id}: its engine still runs, supervised by nobody`);
  }
  // The control plane starts them again, and the agent can.
  for (const [i, c] of cases.entries()) {
    const { pid, port } = await startReady(h, c.id, freeFakeGpu(i));
    h.keepsServing(c.id, pid, port);
  }
}

export const unreadableStateFiles: Scenario = {
  name: 'state-unreadable',
  title: 'state files that are garbage, empty, a FIFO or a directory are refused with a reason, their engines ended, and the shards can start again',
  timeoutMs: 90_000,
  async run(h) {
    await restartWithDamagedState(h, [
      { id: 'garbage', damage: (p) => writeFileSync(p, Buffer.from([0xff, 0xfe, 0x00, 0x7b, 0x22])), reason: /could not be identified \(state file is not valid JSON/ },
      { id: 'empty', damage: (p) => writeFileSync(p, ''), reason: /could not be identified \(state file is not valid JSON/ },
      {
        id: 'fifo',
        damage: (p) => {
          unlinkSync(p);
          execFileSync('mkfifo', [p]);
        },
        reason: /state file is not a regular file/,
      },
      {
        id: 'directory',
        damage: (p) => {
          unlinkSync(p);
          mkdirSync(p);
        },
        reason: /state file is not a regular file/,
      },
    ]);
    return { dataLost: 0 };
  },
};

export const symlinkedStateFile: Scenario = {
  name: 'state-symlink',
  title: 'a state file that is a symlink is never followed: refused with a reason, its engine ended, the target untouched',
  timeoutMs: 60_000,
  async run(h) {
    const elsewhere = join(h.root, 'elsewhere.json');
    let original = '';
    await restartWithDamagedState(h, [
      {
        id: 'linked',
        damage: (p) => {
          original = readFileSync(p, 'utf8');
          renameSync(p, elsewhere);
          symlinkSync(elsewhere, p);
        },
        reason: /state file is a symlink; refused/,
      },
    ]);
    assert.equal(readFileSync(elsewhere, 'utf8'), original, 'the symlink target was changed');
    return { dataLost: 0 };
  },
};

export const oldSchemaStateFile: Scenario = {
  name: 'state-old-schema',
  title: 'a state file from another schema version is refused with a reason that names the version',
  timeoutMs: 60_000,
  async run(h) {
    await restartWithDamagedState(h, [
      {
        id: 'old',
        damage: (p) => writeFileSync(p, JSON.stringify({ ...JSON.parse(readFileSync(p, 'utf8')), schemaVersion: 0 })),
        reason: /state file schema version 0 is not supported \(this agent reads 1\)/,
      },
    ]);
    return { dataLost: 0 };
  },
};

export const readOnlyStateDir: Scenario = {
  name: 'state-dir-read-only',
  title: 'a read-only state directory refuses new starts with a reason, launches nothing, and still lets a running shard be stopped',
  timeoutMs: 60_000,
  async run(h) {
    await h.boot();
    const { pid } = await startReady(h, 'before', 0);
    // Root ignores file modes, so read-only has to come from the mount.
    execFileSync('mount', ['--bind', h.dirs.stateDir, h.dirs.stateDir]);
    h.defer(() => execFileSync('umount', ['-l', h.dirs.stateDir]));
    await remountReadOnly(h.dirs.stateDir);

    const refused = h.waitShard('after', [S.FAILED, S.STARTING, S.READY]);
    h.expectFailed.add('after');
    h.start(simStart('after', await freePort(), { gpu: 1 }));
    const st = await refused;
    assert.equal(S[st.state], 'FAILED');
    assert.match(st.error, /read-only file system/);
    await sleep(200);
    assert.deepEqual(processesWritingUnder(h.dirs.logDir), [pid], 'something was launched for the refused shard');

    const stopped = h.waitShard('before', [S.STOPPED, S.FAILED]);
    h.stop('before', 1000);
    const sst = await stopped;
    assert.equal(S[sst.state], 'STOPPED', `stopping with a read-only state dir: ${sst.error}`);
    assert.equal(isRunning(pid), false);
    await sleep(300);
    const last = h.lastReports().get('before');
    assert.equal(S[last?.state ?? 0], 'STOPPED', `a stopped engine was reported ${S[last?.state ?? 0]} afterwards: ${last?.error}`);
    return { dataLost: 0 };
  },
};

export const fullDiskUnderStateFiles: Scenario = {
  name: 'disk-full-state',
  title: 'a full disk under the state files fails the start with ENOSPC, stops the engine it launched, and the shard starts once space is back',
  timeoutMs: 60_000,
  async run(h) {
    mountTmpfs(h, h.dirs.stateDir, '256k');
    await h.boot({ supervisor: DISK_PRESSURE_OFF });
    mkdirSync(join(h.dirs.stateDir, 'shards'), { recursive: true, mode: 0o700 });
    const filler = fill(h.dirs.stateDir);
    const failed = h.waitShard('s1', [S.FAILED, S.READY]);
    const port = await freePort();
    h.start(simStart('s1', port));
    const st = await failed;
    assert.equal(S[st.state], 'FAILED');
    assert.match(st.error, /cannot write the state file .*ENOSPC.*the engine was stopped/);
    assert.deepEqual(processesWritingUnder(h.dirs.logDir), [], 'the engine without a state file was left running');
    rmSync(filler);
    const ready = h.waitShard('s1', [S.READY, S.FAILED]);
    h.start(simStart('s1', port));
    const again = await ready;
    assert.equal(S[again.state], 'READY', again.error);
    h.keepsServing('s1', again.pid, port);
    return { dataLost: 0 };
  },
};

export const fullDiskUnderLogs: Scenario = {
  name: 'disk-full-logs',
  title: 'a full disk under the logs leaves the agent running: the shard ends READY or FAILED with a reason, and nothing leaks',
  timeoutMs: 60_000,
  async run(h) {
    mountTmpfs(h, h.dirs.logDir, '512k');
    await h.boot({ supervisor: DISK_PRESSURE_OFF });
    // One shard serving and logging fast, so the disk fills under it and rotation fails.
    const port = await freePort();
    const first = h.waitShard('chatty', [S.READY, S.FAILED]);
    h.start(simStart('chatty', port, { args: ['--load-time', '100ms', '--log-rate', '2000'] }));
    const st = await first;
    assert.ok(st.state === S.READY || st.error !== '', 'chatty ended without a reason');
    mkdirSync(join(h.dirs.logDir, 'shards'), { recursive: true });
    fill(h.dirs.logDir);
    // A start with the disk already full.
    const second = h.waitShard('late', [S.READY, S.FAILED]);
    h.start(simStart('late', await freePort(), { gpu: 1 }));
    const late = await second;
    assert.ok(late.state === S.READY || late.error !== '', 'late ended without a reason');
    await sleep(2500); // a log-rotation check or two on the full disk
    assert.ok(h.agent && isRunning(h.agent.pid), 'the agent died of a full log disk');
    return { dataLost: 0, hit: `chatty ${S[h.lastReports().get('chatty')?.state ?? 0]}, late ${S[late.state]}` };
  },
};

export const stateAndDiskScenarios: Scenario[] = [
  unreadableStateFiles,
  symlinkedStateFile,
  oldSchemaStateFile,
  readOnlyStateDir,
  fullDiskUnderStateFiles,
  fullDiskUnderLogs,
];
