import { type ChildProcess, spawn } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { ShardState } from '../../src/gen/llmgw/v1/agent_pb.js';
import { STATE_SCHEMA_VERSION, writeStateFile } from '../../src/lib/files/state-file.js';
import { readProcStat } from '../../src/lib/process/proc-stat.js';
import { readBootId } from '../../src/lib/process/process-identity.js';
import { FaultHarness, until } from '../faults/scenarios/fault-harness.js';
import { isRunning } from '../helpers/engine-processes.js';
import { simStart } from '../helpers/sim-shards.js';
import { expectAgentUnharmed } from './agent-unharmed.js';
import { parseShardId, parseStartShard } from '../../src/lib/shard-id.js';

const S = ShardState;

/** A process that is not an engine and that nothing may signal; `setsid` makes it lead its own group. */
function bystander(setsid: boolean): ChildProcess {
  const child = setsid ? spawn('setsid', ['sleep', '1000'], { stdio: 'ignore' }) : spawn('sleep', ['1000'], { stdio: 'ignore' });
  child.unref();
  return child;
}

describe('a forged state file naming an unrelated process group (security review, finding 10)', () => {
  let h: FaultHarness | undefined;
  const started: ChildProcess[] = [];
  afterEach(async () => {
    for (const c of started.splice(0)) c.kill('SIGKILL');
    await h?.close();
    h = undefined;
  });

  it('never signals the unrelated group: the file is refused, the decoy and the victim keep running', async () => {
    h = new FaultHarness('core-pgid');
    const decoy = bystander(false);
    const victim = bystander(true);
    started.push(decoy, victim);
    // setsid forks when it is already a group leader, so the victim's pid is found by its group.
    await until(() => readProcStat(decoy.pid as number) !== undefined, 'the decoy to run');
    let victimPgid = 0;
    await until(() => {
      const s = readProcStat(victim.pid as number);
      victimPgid = s?.pgrp ?? 0;
      return s !== undefined && s.comm === 'sleep';
    }, 'the victim to run');
    const decoyStat = readProcStat(decoy.pid as number);
    expect(decoyStat).toBeDefined();
    mkdirSync(join(h.dirs.stateDir, 'shards'), { recursive: true, mode: 0o700 });
    const id = 'forge-g1-r0';
    // The decoy's identity matches: only the pgid is a lie.
    await writeStateFile(join(h.dirs.stateDir, 'shards', `${id}.json`), {
      schemaVersion: STATE_SCHEMA_VERSION,
      shardId: parseShardId(id),
      replicaId: 'r-forge',
      spec: parseStartShard(simStart(id, 18999)),
      servesHttp: true,
      inFlightMetric: '',
      pid: decoy.pid as number,
      pgid: victimPgid,
      identity: { startTime: decoyStat?.startTime as string, bootId: readBootId() },
      launcher: 'direct',
      logPath: join(h.dirs.logDir, 'shards', `${id}.log`),
      createdAtMs: Date.now(),
    });

    await h.boot();
    const report = await h.waitShard(id, [S.FAILED]);
    expect(report.error).toMatch(`pgid ${victimPgid} is not the engine's pid ${decoy.pid}`);
    // Recovery has run (its report is out); give a stray signal time to land.
    await until(() => h?.agent?.logs().some((r) => r.msg === 'cleaned the state of an engine that is gone') ?? false, 'recovery');
    expect(isRunning(victim.pid as number)).toBe(true);
    expect(isRunning(decoy.pid as number)).toBe(true);
    expectAgentUnharmed(h.agent?.pid ?? 0);
  }, 60_000);
});
