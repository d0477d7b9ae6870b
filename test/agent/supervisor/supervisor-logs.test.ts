import { closeSync, existsSync, ftruncateSync, mkdirSync, openSync, readFileSync, readdirSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { useSupervisors } from '../../helpers/use-supervisors.js';
import type { SupervisorConfig } from '../../../src/agent/config/agent-config.js';
import { ShardState } from '../../../src/gen/llmgw/v1/agent_pb.js';
import {
  isRunning,
  shardSpec,
  simPlan,
  until,
} from '../../helpers/engine-processes.js';
import { parseShardId } from '../../../src/lib/shard-id.js';

const harness = useSupervisors();
const newSupervisor = (over: Partial<SupervisorConfig> = {}, logCheckIntervalMs = 200) => harness.newSupervisor(over, { logCheckIntervalMs });

describe('shard logs', () => {
  it('tails a 1 GiB log from its end', async () => {
    // A sparse 1 GiB log (no disk used) whose engine appends its lines after
    // the hole. Reading it whole would need a 1 GiB string, which Node
    // refuses, so passing at all shows the tail reads from the end.
    const logPath = join(harness.dirs.logDir, 'shards', 'big.log');
    mkdirSync(join(harness.dirs.logDir, 'shards'), { recursive: true });
    const fd = openSync(logPath, 'w');
    ftruncateSync(fd, 1024 ** 3);
    closeSync(fd);
    // keepPreviousRuns 0: the planted log stays the engine's own instead of being kept as a previous run's.
    const sup = newSupervisor({ logMaxBytes: 4 * 1024 ** 3, keepPreviousRuns: 0 });
    const script = "for(let i=1;i<=500;i++)console.log('line '+i);setInterval(()=>{},1<<30)";
    await sup.start(shardSpec('big'), { plan: { argv: [process.execPath, '-e', script], env: {} }, servesHttp: false });
    await until(async () => (await sup.tailLog(parseShardId('big'), 1))[0] === 'line 500', 'the engine to write');
    expect(statSync(logPath).size).toBeGreaterThan(1024 ** 3);
    expect(await sup.tailLog(parseShardId('big'), 3)).toEqual(['line 498', 'line 499', 'line 500']);
  });

  it('rotates at logMaxBytes by copy-then-truncate, and the O_APPEND engine keeps writing', async () => {
    const maxBytes = 16 * 1024;
    const sup = newSupervisor({ logMaxBytes: maxBytes });
    const { shard } = await sup.start(shardSpec('chatty'), { plan: simPlan(['--worker', '--log-rate', '400']), servesHttp: false });
    const rotated = `${shard.logPath}.1`;
    await until(() => existsSync(rotated), 'a rotation', 30_000);
    const firstRotation = statSync(rotated).ino;
    await until(() => existsSync(rotated) && statSync(rotated).ino !== firstRotation, 'a second rotation', 30_000);
    expect(isRunning(shard.pid)).toBe(true);
    expect(statSync(rotated).size).toBeGreaterThan(maxBytes);
    const current = readFileSync(shard.logPath);
    // A writer without O_APPEND would keep its old offset and leave a hole of NULs.
    expect(current.includes(0)).toBe(false);
    const size = current.length;
    await until(() => statSync(shard.logPath).size > size, 'the engine to keep writing into the same file');
    expect(sup.get(parseShardId('chatty'))?.state).toBe(ShardState.STARTING);
    expect((await sup.tailLog(parseShardId('chatty'), 1))[0]).toMatch(/Avg prompt throughput/);
  });

  it('follows a log across rotation, and ends when the shard is removed', async () => {
    const sup = newSupervisor({ logMaxBytes: 8 * 1024, stopGraceMs: 1000 });
    const { shard } = await sup.start(shardSpec('tailing'), { plan: simPlan(['--worker', '--log-rate', '200']), servesHttp: false,
    });
    const ac = new AbortController();
    const numbers: number[] = [];
    const following = (async () => {
      for await (const batch of sup.followLog(parseShardId('tailing'), ac.signal)) {
        for (const line of batch) {
          const m = / line (\d+)$/.exec(line);
          if (m) numbers.push(Number(m[1]));
        }
      }
    })();
    const rotated = `${shard.logPath}.1`;
    await until(() => existsSync(rotated), 'a rotation', 30_000);
    const firstRotation = statSync(rotated).ino;
    await until(() => existsSync(rotated) && statSync(rotated).ino !== firstRotation, 'a second rotation', 30_000);
    const seenBefore = numbers.length;
    await until(() => numbers.length > seenBefore + 50, 'lines after rotation', 30_000);
    await sup.stop(parseShardId('tailing'));
    sup.remove(parseShardId('tailing'));
    await following; // ends by itself: no abort needed
    // In order; the only lines ever missed are the few written in the instant between copy and truncate.
    for (let i = 1; i < numbers.length; i++) expect(numbers[i]).toBeGreaterThan(numbers[i - 1] as number);
    const span = (numbers.at(-1) as number) - (numbers[0] as number) + 1;
    expect(numbers.length).toBeGreaterThan(span * 0.95);
    ac.abort();
  });

  it('tailLog of a shard with no log yet is empty', async () => {
    const sup = newSupervisor();
    expect(await sup.tailLog(parseShardId('never-started'), 10)).toEqual([]);
    // An id like this is refused where it comes in (parseShardId); the supervisor takes only a checked one.
    expect(() => parseShardId('../etc/passwd')).toThrow(/invalid shard id/);
  });
});

describe('Supervisor.pruneLogs (security review, finding 17)', () => {
  it('removes old logs of removed shards by the retention, never the log of a supervised shard', async () => {
    const sup = harness.newSupervisor({ logRetentionMs: 60_000, logRetentionBytes: 1 });
    const { shard } = await sup.start(shardSpec('kept'), { plan: { argv: [process.execPath, '-e', 'setInterval(()=>{},1<<30)'], env: {} }, servesHttp: false });
    const logs = join(harness.dirs.logDir, 'shards');
    const aged = (name: string) => {
      mkdirSync(dirname(join(harness.dirs.logDir, name)), { recursive: true });
      writeFileSync(join(harness.dirs.logDir, name), 'old output\n');
      const t = (Date.now() - 3_600_000) / 1000;
      utimesSync(join(harness.dirs.logDir, name), t, t);
    };
    aged('shards/kept.log.1');
    aged('shards/kept.failure.json');
    aged('previous-runs/kept.1.log');
    aged('shards/removed-g1-r0.log');
    aged('shards/removed-g1-r0.log.1');
    aged('shards/removed-g1-r0.failure.json');
    aged('previous-runs/removed-g1-r0.1.log');
    aged('previous-runs/removed-g1-r0.1.failure.json');
    const t = (Date.now() - 3_600_000) / 1000;
    utimesSync(shard.logPath, t, t);

    const removed = await sup.pruneLogs();
    expect(removed.sort()).toEqual([
      'previous-runs/removed-g1-r0.1.failure.json',
      'previous-runs/removed-g1-r0.1.log',
      'removed-g1-r0.failure.json',
      'removed-g1-r0.log',
      'removed-g1-r0.log.1',
    ]);
    expect(readdirSync(logs).sort()).toEqual(['kept.failure.json', 'kept.log', 'kept.log.1']);
    expect(readdirSync(join(harness.dirs.logDir, 'previous-runs'))).toEqual(['kept.1.log']);
  });
});
