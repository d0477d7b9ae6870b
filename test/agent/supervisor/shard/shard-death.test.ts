import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { type DeathHands, LEFTOVER_GRACE_MS, onEngineDeath } from '../../../../src/agent/supervisor/shard/shard-death.js';
import { type GangFault, newShardLife, nextShard, type ShardLife } from '../../../../src/agent/supervisor/shard/shard-machine.js';
import { ShardState } from '../../../../src/gen/llmgw/v1/agent_pb.js';
import type { DeathInfo } from '../../../../src/lib/engine-death.js';
import type { FailureRecord } from '../../../../src/lib/files/failure-record.js';
import { shardFailurePath } from '../../../../src/lib/shard-layout.js';
import { captureLogger } from '../../../helpers/capture-logger.js';
import { shardSnapshot } from '../../../helpers/shard-snapshot.js';

/*
 * Carrying out an engine's death: the hands are the machine itself
 * (nextShard) over a real log and log directory; what the runner would do
 * with processes (stop serving, reap) is recorded.
 */

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

const crashed: DeathInfo = { known: true, code: 3, signal: null };
const clean: DeathInfo = { known: true, code: 0, signal: null };
const fault: GangFault = { rank: 0, nodeId: 'node-a', shardId: 'r-g-0', reason: 'rank 0 on node-a went first: FAILED', sinceMs: 1, stalled: false };

function hands(state: ShardState, o: { firstToGo?: GangFault; stopGraceMs?: number; aborted?: boolean } = {}) {
  const logDir = mkdtempSync(join(tmpdir(), 'llmgw-death-'));
  dirs.push(logDir);
  mkdirSync(join(logDir, 'shards'));
  const logPath = join(logDir, 'shards', 's1.log');
  writeFileSync(logPath, 'loading\nRuntimeError: CUDA out of memory\n');
  let life: ShardLife = newShardLife({ state });
  const did: string[] = [];
  const ac = new AbortController();
  if (o.aborted) ac.abort();
  const asked: number[] = [];
  const h: DeathHands = {
    logPath, logDir, signal: ac.signal, stopGraceMs: o.stopGraceMs ?? 30_000, portOwner: undefined, log: captureLogger().logger,
    life: () => life,
    apply: (change) => {
      const next = nextShard(life, change, 's1');
      if (!('refused' in next)) life = next.life;
      return next;
    },
    stopServing: () => void did.push('stop serving'),
    reapLeftovers: async (graceMs) => void did.push(`reap ${graceMs}`),
    snapshot: () => shardSnapshot('s1', { state: life.state, logPath }),
    ...(o.firstToGo
      ? {
          firstToGo: async (atMs: number) => {
            asked.push(atMs);
            return o.firstToGo;
          },
        }
      : {}),
  };
  const record = (): FailureRecord | undefined => {
    const p = shardFailurePath(logDir, 's1');
    return existsSync(p) ? (JSON.parse(readFileSync(p, 'utf8')) as FailureRecord) : undefined;
  };
  return { h, life: () => life, did, record, asked };
}

describe('onEngineDeath', () => {
  it('fails a STARTING shard with its exit, its last words and a failure record, its leftovers reaped first', async () => {
    const t = hands(ShardState.STARTING);
    await onEngineDeath(t.h, crashed);
    expect(t.life()).toMatchObject({ state: ShardState.FAILED, dead: true, exitCode: 3, error: 'engine exited with code 3 while starting', lastOutput: ['loading', 'RuntimeError: CUDA out of memory'] });
    expect(t.did).toEqual(['stop serving', `reap ${LEFTOVER_GRACE_MS}`]);
    expect(t.record()).toMatchObject({ shardId: 's1', error: 'engine exited with code 3 while starting', lastOutput: ['loading', 'RuntimeError: CUDA out of memory'] });
  });

  it('reaps within the stop grace when that is shorter', async () => {
    const t = hands(ShardState.READY, { stopGraceMs: 500 });
    await onEngineDeath(t.h, crashed);
    expect(t.did).toContain('reap 500');
  });

  it('reports a clean exit of a serving shard as EXITED, with no failure record', async () => {
    const t = hands(ShardState.READY);
    await onEngineDeath(t.h, clean);
    expect(t.life()).toMatchObject({ state: ShardState.EXITED, error: 'engine exited with code 0' });
    expect(t.record()).toBeUndefined();
  });

  it("leaves a stop's death to stop(): no reap, no record, no report, no gang asked", async () => {
    const t = hands(ShardState.STOPPING, { firstToGo: fault });
    await onEngineDeath(t.h, crashed);
    expect(t.life()).toMatchObject({ state: ShardState.STOPPING, dead: true });
    expect(t.did).toEqual(['stop serving']);
    expect([t.record(), t.asked]).toEqual([undefined, []]);
  });

  it("names the rank of its gang that went first, in the error and the record", async () => {
    const t = hands(ShardState.READY, { firstToGo: fault });
    await onEngineDeath(t.h, crashed);
    expect(t.asked).toHaveLength(1);
    expect(t.life().error).toBe('engine exited with code 3; gang broken: rank 0 on node-a went first: FAILED');
    expect(t.record()?.error).toBe('engine exited with code 3; gang broken: rank 0 on node-a went first: FAILED');
  });

  it('does nothing for an engine already dead, or a runner detached', async () => {
    const t = hands(ShardState.READY);
    await onEngineDeath(t.h, crashed);
    const once = [t.life(), [...t.did]];
    await onEngineDeath(t.h, clean);
    expect([t.life(), t.did]).toEqual(once);
    const detached = hands(ShardState.READY, { aborted: true });
    await onEngineDeath(detached.h, crashed);
    expect([detached.life().state, detached.did]).toEqual([ShardState.READY, []]);
  });
});
