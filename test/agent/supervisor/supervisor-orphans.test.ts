import { spawn } from 'node:child_process';
import { existsSync, readFileSync, renameSync, statSync, symlinkSync, unlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { useSupervisors } from '../../helpers/use-supervisors.js';
import type { SupervisorConfig } from '../../../src/agent/config/agent-config.js';
import { ShardState } from '../../../src/gen/llmgw/v1/agent_pb.js';
import {
  freePort,
  groupMembers,
  isRunning,
  procInfo,
  shardSpec,
  simPlan,
  simWatch,
  until,
} from '../../helpers/engine-processes.js';
import { parseShardId } from '../../../src/lib/shard-id.js';

const harness = useSupervisors();
const newSupervisor = (over: Partial<SupervisorConfig> = {}) => harness.newSupervisor(over);
const statePath = (id: string) => join(harness.dirs.stateDir, 'shards', `${id}.json`);

/** A serving sim shard left behind by a first supervisor instance, which is then discarded (as an agent restart does). */
async function leftBehind(id: string, args: string[] = []) {
  const first = newSupervisor();
  const port = await freePort();
  const { shard } = await first.start(shardSpec(id, port), { plan: simPlan(['--port', String(port), ...args]), servesHttp: true,
    watch: simWatch(port),
  });
  const baseUrl = `http://127.0.0.1:${port}`;
  await first.settle(parseShardId(id), { timeoutMs: 30_000 });
  first.close();
  return { pid: shard.pid, logPath: shard.logPath, baseUrl };
}

describe('adoption after an agent restart', () => {
  it('finds, identifies and adopts a running engine: same pid, still serving, log still growing', async () => {
    const { pid, logPath, baseUrl } = await leftBehind('keep', ['--log-rate', '20']);
    const second = newSupervisor();
    const orphans = await second.findOrphans();
    expect(orphans).toHaveLength(1);
    const [o] = orphans;
    expect(o).toMatchObject({ shardId: 'keep', pid, alive: true, identified: true, reason: '', servesHttp: true });
    expect(o?.replicaId).toBe('replica-of-keep');
    expect(o?.spec?.profile?.servedModelName).toBe('sim-model');

    const adopted = second.adopt(o!);
    expect(adopted).toMatchObject({ shardId: 'keep', pid, adopted: true, state: ShardState.STARTING });
    // Settled exactly like a fresh start.
    await second.settle(parseShardId('keep'), { timeoutMs: 30_000 });
    expect(second.get(parseShardId('keep'))?.state).toBe(ShardState.READY);
    expect(isRunning(pid)).toBe(true);
    expect((await fetch(`${baseUrl}/v1/models`)).status).toBe(200);
    const size = statSync(logPath).size;
    await until(() => statSync(logPath).size > size, 'the log to keep growing');
    expect(await second.findOrphans()).toEqual([]);
    expect(await second.inFlight(parseShardId('keep'))).toBe(0);
  });

  it('notices an adopted engine dying without an exit event, and reports FAILED', async () => {
    const { pid } = await leftBehind('goes');
    const second = newSupervisor();
    const [o] = await second.findOrphans();
    second.adopt(o!);
    await second.settle(parseShardId('goes'), { settleMs: 100 });
    process.kill(pid, 'SIGKILL');
    await until(() => second.get(parseShardId('goes'))?.state === ShardState.FAILED, 'FAILED', 10_000);
    expect(second.get(parseShardId('goes'))?.error).toMatch(/is gone .*exit status is unknown/);
    expect(second.get(parseShardId('goes'))?.exitCode).toBeNull();
  });

  it('refuses a fresh start of a shard a previous agent still runs, instead of launching a second engine', async () => {
    const { pid } = await leftBehind('busy');
    const second = newSupervisor();
    await expect(second.start(shardSpec('busy'), { plan: simPlan(['--worker']), servesHttp: false })).rejects.toThrow(
      /shard busy is already running \(pid \d+\) from a previous agent; adopt it/,
    );
    expect(groupMembers(pid)).toEqual([pid]);
  });
});

describe('orphans that cannot be adopted', () => {
  it('reports a state file whose pid now belongs to an unrelated process as dead, and never signals that process', async () => {
    const { pid } = await leftBehind('reused');
    const file = JSON.parse(readFileSync(statePath('reused'), 'utf8'));
    process.kill(-pid, 'SIGKILL');
    await until(() => !isRunning(pid), 'the engine to die');
    // An unrelated process that would record any SIGTERM it got, and dies of SIGKILL.
    const marker = join(harness.dirs.root, 'signalled');
    const bystander = spawn(
      process.execPath,
      ['-e', `process.on('SIGTERM',()=>require('fs').writeFileSync(${JSON.stringify(marker)},'x'));setInterval(()=>{},1<<30)`],
      { detached: true, stdio: 'ignore' },
    );
    harness.extraGroups.push(bystander.pid!);
    await until(() => procInfo(bystander.pid!) !== undefined, 'the bystander');
    // As if the pid had been reused: the file names it, with the engine's start time.
    writeFileSync(statePath('reused'), JSON.stringify({ ...file, pid: bystander.pid, pgid: bystander.pid }));

    const second = newSupervisor();
    const [o] = await second.findOrphans();
    expect(o).toMatchObject({ shardId: 'reused', alive: false, identified: false });
    expect(o?.reason).toMatch(new RegExp(`pid ${bystander.pid} now belongs to another process`));
    expect(() => second.adopt(o!)).toThrow(/cannot adopt shard reused/);
    await second.killOrphan(o!);
    expect(existsSync(statePath('reused'))).toBe(false);
    await new Promise((r) => setTimeout(r, 300));
    expect(isRunning(bystander.pid!)).toBe(true);
    expect(existsSync(marker)).toBe(false);
  });

  it('kills a live engine whose state file is truncated, since nothing can describe it', async () => {
    const { pid } = await leftBehind('torn', ['--spawn-child']);
    const text = readFileSync(statePath('torn'), 'utf8');
    writeFileSync(statePath('torn'), text.slice(0, Math.floor(text.length / 2)));
    const second = newSupervisor({ stopGraceMs: 1000 });
    const [o] = await second.findOrphans();
    expect(o).toMatchObject({ shardId: 'torn', pid, alive: true, identified: false, replicaId: '' });
    expect(o?.reason).toMatch(/not valid JSON \(truncated or corrupt\).*still write the shard's log/);
    await second.killOrphan(o!);
    expect(groupMembers(pid)).toEqual([]);
    expect(existsSync(statePath('torn'))).toBe(false);
  });

  it('finds an engine that has no state file (agent killed mid-launch) by the log it writes, and kills it', async () => {
    const { pid, logPath } = await leftBehind('unrecorded', ['--spawn-child']);
    // The agent died after the spawn and before the state file was written.
    unlinkSync(statePath('unrecorded'));
    const second = newSupervisor({ stopGraceMs: 1000 });
    const orphans = await second.findOrphans();
    expect(orphans).toHaveLength(1);
    expect(orphans[0]).toMatchObject({ shardId: 'unrecorded', pid, alive: true, identified: false });
    expect(orphans[0]?.reason).toMatch(/no state file records this engine.*still write the shard's log/);
    await second.killOrphan(orphans[0]!);
    expect(groupMembers(pid)).toEqual([]);
    expect(existsSync(logPath)).toBe(true);
    expect(await second.findOrphans()).toEqual([]);
  });

  it('cleans the corrupt state file of a dead engine without signalling anything', async () => {
    const { pid } = await leftBehind('junk');
    process.kill(-pid, 'SIGKILL');
    await until(() => groupMembers(pid).length === 0, 'the engine to die');
    writeFileSync(statePath('junk'), '{"schemaVersion": 1, "shardId": "ju');
    const second = newSupervisor();
    const [o] = await second.findOrphans();
    expect(o).toMatchObject({ shardId: 'junk', pid: 0, alive: false, identified: false });
    await second.killOrphan(o!);
    expect(existsSync(statePath('junk'))).toBe(false);
  });

  it('refuses a symlinked state file: never followed, the engine behind it killed, the target untouched', async () => {
    const { pid } = await leftBehind('link');
    const elsewhere = join(harness.dirs.root, 'elsewhere.json');
    renameSync(statePath('link'), elsewhere);
    symlinkSync(elsewhere, statePath('link'));
    const second = newSupervisor({ stopGraceMs: 1000 });
    const [o] = await second.findOrphans();
    expect(o).toMatchObject({ shardId: 'link', alive: true, identified: false });
    expect(o?.reason).toMatch(/symlink; refused/);
    expect(() => second.adopt(o!)).toThrow(/symlink; refused/);
    await second.killOrphan(o!);
    expect(isRunning(pid)).toBe(false);
    expect(existsSync(statePath('link'))).toBe(false);
    expect(JSON.parse(readFileSync(elsewhere, 'utf8')).shardId).toBe('link');
  });

  it('does not identify a state file of an unknown schema version, and says why', async () => {
    const { pid } = await leftBehind('future');
    const file = JSON.parse(readFileSync(statePath('future'), 'utf8'));
    writeFileSync(statePath('future'), JSON.stringify({ ...file, schemaVersion: 2 }));
    const second = newSupervisor();
    const [o] = await second.findOrphans();
    expect(o).toMatchObject({ shardId: 'future', pid, alive: true, identified: false });
    expect(o?.reason).toMatch(/schema version 2 is not supported/);
  });
});
