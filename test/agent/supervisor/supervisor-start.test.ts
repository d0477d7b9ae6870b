import { create } from '@bufbuild/protobuf';
import { plainWatch } from '../../../src/agent/supervisor/launch/launch-shard.js';
import { existsSync, readdirSync, readFileSync, readlinkSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import { useSupervisors } from '../../helpers/use-supervisors.js';
import type { SupervisorConfig } from '../../../src/agent/config/agent-config.js';
import type { ShardTransition } from '../../../src/agent/supervisor/shard/shard-snapshot.js';
import { ShardState, StartShardSchema } from '../../../src/gen/llmgw/v1/agent_pb.js';
import { LlmgwError } from '../../../src/lib/errors.js';
import {
  freePort,
  procInfo,
  processesWritingUnder,
  shardSpec,
  simPlan,
  } from '../../helpers/engine-processes.js';
import { parseShardId, parseStartShard } from '../../../src/lib/shard-id.js';

const harness = useSupervisors();
const newSupervisor = (over: Partial<SupervisorConfig> = {}) => harness.newSupervisor(over);

const sleeper = (extra = '') => ({
  argv: [process.execPath, '-e', `${extra};setInterval(()=>{},1<<30)`],
  env: { MARKER: 'x' },
});

describe('Supervisor.start', () => {
  it.each(['../x', 'a/b', '', 'x'.repeat(200)])('cannot be given shard id %j: it is refused where it comes in, before any file is touched', async (id) => {
    newSupervisor();
    // The supervisor takes only a checked spec (CheckedStartShard); the stream's and the admin socket's
    // edges parse it. The refusal through a real agent is in test/faults/scenarios/control-messages.ts.
    const spec = create(StartShardSchema, { shardId: id, profile: { engine: 'sim' } });
    expect(() => parseStartShard(spec)).toThrow(/invalid shard id/);
    expect(() => parseStartShard(spec)).toThrow(LlmgwError);
    expect(existsSync(harness.dirs.stateDir)).toBe(false);
    expect(existsSync(harness.dirs.logDir)).toBe(false);
    expect(processesWritingUnder(harness.dirs.root)).toEqual([]);
  });

  it('makes exactly one process when the same start arrives 5 times', async () => {
    const sup = newSupervisor();
    const spec = shardSpec('r1-s0', await freePort());
    const concurrent = await Promise.all(
      [1, 2, 3].map(() => sup.start(spec, { plan: simPlan(['--worker']), servesHttp: false })),
    );
    const later = [];
    for (let i = 0; i < 2; i++) later.push(await sup.start(spec, { plan: simPlan(['--worker']), servesHttp: false }));
    const all = [...concurrent, ...later];
    expect(all.filter((r) => r.created)).toHaveLength(1);
    expect(new Set(all.map((r) => r.shard.pid)).size).toBe(1);
    expect(processesWritingUnder(harness.dirs.logDir)).toEqual([all[0]?.shard.pid]);
    expect(sup.list()).toHaveLength(1);
  });

  it('writes an atomic, identity-bearing state file in a 0700 directory before reporting STARTING', async () => {
    const sup = newSupervisor();
    const seen: ShardTransition[] = [];
    sup.on('transition', (t) => {
      // The state file must already be on disk when STARTING is reported.
      expect(existsSync(join(harness.dirs.stateDir, 'shards', 's1.json'))).toBe(true);
      seen.push(t);
    });
    const { shard, created } = await sup.start(shardSpec('s1'), { plan: sleeper(), servesHttp: false, watch: { ...plainWatch(shardSpec('s1'), false), runningGauges: ['x:y'] } });
    expect(created).toBe(true);
    expect(shard.state).toBe(ShardState.STARTING);
    expect(seen.map((t) => [t.from, t.to])).toEqual([[ShardState.UNSPECIFIED, ShardState.STARTING]]);

    const shardsDir = join(harness.dirs.stateDir, 'shards');
    expect(statSync(shardsDir).mode & 0o777).toBe(0o700);
    // Engine output is for root and the admin group only (security review, finding 8).
    expect(statSync(join(harness.dirs.logDir, 'shards')).mode & 0o777).toBe(0o750);
    expect(statSync(join(harness.dirs.logDir, 'shards', 's1.log')).mode & 0o777).toBe(0o640);
    expect(readdirSync(shardsDir)).toEqual(['s1.json']);
    const file = JSON.parse(readFileSync(join(shardsDir, 's1.json'), 'utf8'));
    expect(file).toMatchObject({
      schemaVersion: 1,
      shardId: 's1',
      replicaId: 'replica-of-s1',
      servesHttp: false,
      inFlightMetric: 'x:y',
      watch: { healthPort: 0, readiness: 'health', runningGauges: ['x:y'], apiKey: '' },
      pid: shard.pid,
      pgid: shard.pid,
      launcher: 'direct',
      logPath: shard.logPath,
      spec: { shardId: 's1', profile: { engine: 'sim' } },
    });
    expect(file.identity.startTime).toBe(procInfo(shard.pid)?.startTime);
    expect(file.identity.bootId).toBe(readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim());
    expect(statSync(join(shardsDir, 's1.json')).mode & 0o777).toBe(0o600);
  });

  it('runs the engine in its own session and group, stdin closed, output appended to its log', async () => {
    const sup = newSupervisor();
    const { shard } = await sup.start(shardSpec('s2'), { plan: sleeper(), servesHttp: false });
    const stat = readFileSync(`/proc/${shard.pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    expect(Number(fields[2])).toBe(shard.pid); // process group
    expect(Number(fields[3])).toBe(shard.pid); // session
    expect(readlinkSync(`/proc/${shard.pid}/fd/0`)).toBe('/dev/null');
    expect(readlinkSync(`/proc/${shard.pid}/fd/1`)).toBe(shard.logPath);
    expect(readlinkSync(`/proc/${shard.pid}/fd/2`)).toBe(shard.logPath);
    const flags = /flags:\s+(\d+)/.exec(readFileSync(`/proc/${shard.pid}/fdinfo/1`, 'utf8'))?.[1] ?? '0';
    expect(Number.parseInt(flags, 8) & 0o2000).toBe(0o2000); // O_APPEND
  });

  it("gives the engine the agent's environment without systemd's and llmgw's own variables, the plan's on top", async () => {
    const saved = { ...process.env };
    Object.assign(process.env, { NOTIFY_SOCKET: '/run/systemd/notify', WATCHDOG_USEC: '1', LLMGW_NODE_ID: 'n', NODE_OPTIONS: '--max-semi-space-size=1', HF_HOME: '/models', MARKER: 'agent' });
    onTestFinished(() => {
      for (const k of ['NOTIFY_SOCKET', 'WATCHDOG_USEC', 'LLMGW_NODE_ID', 'NODE_OPTIONS', 'HF_HOME', 'MARKER']) {
        if (saved[k] === undefined) delete process.env[k];
        else process.env[k] = saved[k];
      }
    });
    const sup = newSupervisor();
    await sup.start(shardSpec('env'), { plan: sleeper('console.log(JSON.stringify(process.env))'), servesHttp: false });
    let lines: string[] = [];
    for (let i = 0; i < 200 && lines.length === 0; i++) {
      lines = await sup.tailLog(parseShardId('env'), 1);
      await new Promise((r) => setTimeout(r, 25));
    }
    const env = JSON.parse(lines[0] as string) as Record<string, string>;
    expect(env.HF_HOME).toBe('/models');
    expect(env.MARKER).toBe('x');
    expect(env.PATH).toBe(process.env.PATH);
    expect(Object.keys(env).filter((k) => /^(NOTIFY_SOCKET|WATCHDOG_|LLMGW_|NODE_OPTIONS)/.test(k))).toEqual([]);
  });

  it('reports a missing executable without keeping a shard', async () => {
    const sup = newSupervisor();
    await expect(
      sup.start(shardSpec('nope'), { plan: { argv: ['/nonexistent/engine'], env: {} }, servesHttp: false }),
    ).rejects.toThrow(/cannot launch engine "\/nonexistent\/engine".*ENOENT/);
    expect(sup.get(parseShardId('nope'))).toBeUndefined();
    expect(existsSync(join(harness.dirs.stateDir, 'shards', 'nope.json'))).toBe(false);
  });

  it('relaunches a shard whose engine failed, as a new process', async () => {
    const sup = newSupervisor();
    const first = await sup.start(shardSpec('again'), { plan: simPlan(['--worker', '--fail-after', '100ms']), servesHttp: false });
    await expect(sup.settle(parseShardId('again'), { settleMs: 20_000 })).rejects.toThrow(/exited with code 1 while starting/);
    const second = await sup.start(shardSpec('again'), { plan: sleeper(), servesHttp: false });
    expect(second.created).toBe(true);
    expect(second.shard.pid).not.toBe(first.shard.pid);
    expect(second.shard.state).toBe(ShardState.STARTING);
  });
});
