import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { useSupervisors } from '../../helpers/use-supervisors.js';
import type { SupervisorConfig } from '../../../src/agent/config/agent-config.js';
import type { ShardTransition } from '../../../src/agent/supervisor/shard/shard-snapshot.js';
import type { Supervisor } from '../../../src/agent/supervisor/supervisor.js';
import { ShardState } from '../../../src/gen/llmgw/v1/agent_pb.js';
import {
  freePort,
  groupMembers,
  simWatch,
  isRunning,
  shardSpec,
  simPlan,
  until,
} from '../../helpers/engine-processes.js';
import { parseShardId } from '../../../src/lib/shard-id.js';
import { readStateFile } from '../../../src/lib/files/state-file.js';

const harness = useSupervisors();
const newSupervisor = (over: Partial<SupervisorConfig> = {}) => harness.newSupervisor(over);

async function readySim(sup: Supervisor, id: string, args: string[]) {
  const port = await freePort();
  const { shard } = await sup.start(shardSpec(id, port), {
    plan: simPlan(['--port', String(port), ...args]),
    servesHttp: true,
    watch: simWatch(port),
  });
  const baseUrl = `http://127.0.0.1:${port}`;
  await sup.settle(parseShardId(id), { timeoutMs: 30_000 });
  return { shard, baseUrl };
}

/** The sim's grandchild, once it says it is ready (its SIGTERM disposition set). */
const grandchildOf = async (sup: Supervisor, id: string, pgid: number) => {
  await until(async () => (await sup.tailLog(parseShardId(id), 50)).some((l) => /Worker process \d+ ready/.test(l)), 'the grandchild to start');
  return groupMembers(pgid).filter((p) => p !== pgid);
};

describe('Supervisor.stop', () => {
  it('takes an --ignore-sigterm --spawn-child engine down, grandchild included, within stop_grace + 1 s', async () => {
    const graceMs = 1000;
    const sup = newSupervisor({ stopGraceMs: graceMs });
    const seen: ShardTransition[] = [];
    sup.on('transition', (t) => seen.push(t));
    const { shard } = await readySim(sup, 'stubborn', ['--ignore-sigterm', '--spawn-child']);
    const grandchildren = await grandchildOf(sup, 'stubborn', shard.pid);
    expect(grandchildren).toHaveLength(1);

    const t0 = Date.now();
    const stopped = await sup.stop(parseShardId('stubborn'));
    const elapsed = Date.now() - t0;

    expect(stopped.state).toBe(ShardState.STOPPED);
    expect(isRunning(shard.pid)).toBe(false);
    for (const pid of grandchildren) expect(isRunning(pid)).toBe(false);
    expect(groupMembers(shard.pid)).toEqual([]);
    // A safety net, not a measurement: without the SIGKILL after its grace the engine never stops (the
    // test's timeout), and one waiting the default grace (30 s) would be caught; +1 s was missed once at
    // a load of 16 on 2 cores.
    expect(elapsed).toBeLessThan(graceMs + 10_000);
    // It did get SIGTERM first, and ignored it.
    expect(readFileSync(shard.logPath, 'utf8')).toMatch(/received SIGTERM; ignoring it/);
    expect(existsSync(join(harness.dirs.stateDir, 'shards', 'stubborn.json'))).toBe(false);
    expect(seen.map((t) => ShardState[t.to])).toEqual(['STARTING', 'READY', 'STOPPING', 'STOPPED']);
  });

  it('lets a well-behaved engine finish on SIGTERM alone', async () => {
    const sup = newSupervisor({ stopGraceMs: 20_000 });
    const { shard } = await readySim(sup, 'polite', []);
    const t0 = Date.now();
    await sup.stop(parseShardId('polite'));
    // Far inside the grace period: no SIGKILL was needed (a generous bound, not a speed test).
    expect(Date.now() - t0).toBeLessThan(15_000);
    expect(readFileSync(shard.logPath, 'utf8')).toMatch(/received SIGTERM; finishing 0 in-flight/);
    expect(sup.get(parseShardId('polite'))?.state).toBe(ShardState.STOPPED);
    // Exited by itself with 0 after SIGTERM: a graceful shutdown, not a kill.
    expect(sup.get(parseShardId('polite'))).toMatchObject({ exitCode: 0, signal: null });
  });

  it("SIGTERMs the engine alone, so an engine whose worker's death would abort its requests (vLLM with TP > 1) finishes its in-flight request, then exits 0 and takes its worker with it", async () => {
    const sup = newSupervisor({ stopGraceMs: 10_000 });
    const { shard, baseUrl } = await readySim(sup, 'drains', ['--token-latency', '100ms', '--spawn-child', '--fragile-worker']);
    const [worker] = await grandchildOf(sup, 'drains', shard.pid);
    const request = fetch(`${baseUrl}/v1/completions`, { method: 'POST', body: JSON.stringify({ prompt: 'hello', max_tokens: 10 }) });
    await until(async () => (await sup.inFlight(parseShardId('drains'))) === 1, 'one request in flight');

    const stopped = await sup.stop(parseShardId('drains'));
    // A SIGTERM to the whole group killed the worker at once, and the engine aborted the request.
    const answer = await request;
    expect(answer.status).toBe(200);
    expect(((await answer.json()) as { usage: { completion_tokens: number } }).usage.completion_tokens).toBe(10);
    const log = readFileSync(shard.logPath, 'utf8');
    expect(log).toMatch(/received SIGTERM; finishing 1 in-flight request/);
    expect(log).not.toMatch(/died unexpectedly/);
    expect(stopped).toMatchObject({ state: ShardState.STOPPED, exitCode: 0, signal: null });
    expect(isRunning(worker as number)).toBe(false);
    expect(groupMembers(shard.pid)).toEqual([]);
  });

  it('has nothing left to kill when a FAILED shard is stopped: what a crashed leader left went with it', async () => {
    const sup = newSupervisor({ stopGraceMs: 500 });
    const { shard } = await readySim(sup, 'leftover', ['--ignore-sigterm', '--spawn-child']);
    const [grandchild] = await grandchildOf(sup, 'leftover', shard.pid);
    process.kill(shard.pid, 'SIGKILL'); // the leader only: its worker would keep the GPUs
    await until(() => sup.get(parseShardId('leftover'))?.state === ShardState.FAILED, 'FAILED');
    // Ended before FAILED was reported, even though it ignores SIGTERM.
    expect(isRunning(grandchild as number)).toBe(false);
    const after = await sup.stop(parseShardId('leftover'));
    expect(isRunning(grandchild as number)).toBe(false);
    expect(after).toMatchObject({ state: ShardState.FAILED, exitCode: 137 });
  });

  it('is shared by concurrent callers and idempotent afterwards', async () => {
    const sup = newSupervisor({ stopGraceMs: 5000 });
    await readySim(sup, 'twice', []);
    const [a, b] = await Promise.all([sup.stop(parseShardId('twice')), sup.stop(parseShardId('twice'))]);
    expect(a.state).toBe(ShardState.STOPPED);
    expect(b.state).toBe(ShardState.STOPPED);
    expect((await sup.stop(parseShardId('twice'))).state).toBe(ShardState.STOPPED);
  });
});

describe('Supervisor.drain and inFlight', () => {
  it('reports DRAINING and counts requests in flight from the engine metrics', async () => {
    const sup = newSupervisor();
    const { baseUrl } = await readySim(sup, 'drain', ['--token-latency', '100ms']);
    expect(await sup.inFlight(parseShardId('drain'))).toBe(0);
    const request = fetch(`${baseUrl}/v1/completions`, {
      method: 'POST',
      body: JSON.stringify({ prompt: 'hello', max_tokens: 20 }),
    }).then((r) => r.json());
    await until(async () => (await sup.inFlight(parseShardId('drain'))) === 1, 'one request in flight');
    expect((await sup.drain(parseShardId('drain'))).state).toBe(ShardState.DRAINING);
    expect((await sup.drain(parseShardId('drain'))).state).toBe(ShardState.DRAINING); // idempotent
    await request;
    await until(async () => (await sup.inFlight(parseShardId('drain'))) === 0, 'no request in flight');
  });

  it('refuses to drain a shard that is not serving', async () => {
    const sup = newSupervisor();
    await sup.start(shardSpec('early'), { plan: simPlan(['--never-ready']), servesHttp: true });
    await expect(sup.drain(parseShardId('early'))).rejects.toThrow(/shard early is STARTING: only a READY or UNHEALTHY shard can be drained/);
  });
});

describe('Supervisor.close and remove', () => {
  it('close() stops watching but never signals an engine', async () => {
    const sup = newSupervisor();
    const { shard, baseUrl } = await readySim(sup, 'keeps', []);
    sup.close();
    await new Promise((r) => setTimeout(r, 500));
    expect(isRunning(shard.pid)).toBe(true);
    expect((await fetch(`${baseUrl}/health`)).status).toBe(200);
    expect(existsSync(join(harness.dirs.stateDir, 'shards', 'keeps.json'))).toBe(true);
  });

  it('close() resolves once a state file change in flight has ended: the agent exits next, and its successor must find the drain', async () => {
    const sup = newSupervisor();
    await readySim(sup, 'drained', []);
    const statePath = join(harness.dirs.stateDir, 'shards', 'drained.json');
    const drained = sup.drain(parseShardId('drained'));
    await sup.close();
    const read = await readStateFile(statePath, 'drained');
    expect(read.ok && read.file.drainRequested).toBe(true);
    expect((await drained).state).toBe(ShardState.DRAINING);
  });

  it('remove() forgets a terminal shard and deletes its state file, and refuses a running one', async () => {
    const sup = newSupervisor();
    await readySim(sup, 'rm', []);
    expect(() => sup.remove(parseShardId('rm'))).toThrow(/shard rm is READY: stop it before removing it/);
    const { shard } = await sup.start(shardSpec('rm2'), { plan: simPlan(['--worker', '--fail-after', '100ms']), servesHttp: false });
    await until(() => sup.get(parseShardId('rm2'))?.state === ShardState.FAILED, 'FAILED');
    expect(existsSync(join(harness.dirs.stateDir, 'shards', 'rm2.json'))).toBe(true);
    sup.remove(parseShardId('rm2'));
    expect(sup.get(parseShardId('rm2'))).toBeUndefined();
    expect(existsSync(join(harness.dirs.stateDir, 'shards', 'rm2.json'))).toBe(false);
    expect(shard.pid).toBeGreaterThan(1);
  });
});

describe('a dead engine leader', () => {
  it('has the rest of its process group ended before FAILED is reported, so nothing holds its GPUs after', async () => {
    const sup = newSupervisor();
    const { shard } = await sup.start(shardSpec('leftover'), { plan: simPlan(['--worker', '--spawn-child']), servesHttp: false });
    await until(() => groupMembers(shard.pid).length === 2, 'the worker child to start');
    const [child] = groupMembers(shard.pid).filter((p) => p !== shard.pid);
    const atFailed = new Promise<number[]>((resolve) => {
      sup.on('transition', (t: ShardTransition) => {
        if (t.to === ShardState.FAILED) resolve(groupMembers(shard.pid));
      });
    });
    // The leader alone, as the OOM killer picks one process.
    process.kill(shard.pid, 'SIGKILL');
    expect(await atFailed).toEqual([]);
    expect(isRunning(child as number)).toBe(false);
    expect(sup.get(parseShardId('leftover'))?.error).toBe('engine was killed by SIGKILL while starting');
  });
});
