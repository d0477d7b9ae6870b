import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import type { ReplicaView, ShardView } from '../../src/control/replica-view.js';
import { describeWaitingReplica, WAITING_LOG_LINES } from '../../src/dev/describe-waiting-replica.js';
import { LOG_TAIL_BYTES, readLogTail } from '../../src/dev/read-log-tail.js';
import { ShardState } from '../../src/gen/llmgw/v1/agent_pb.js';
import { shardLogPath } from '../../src/lib/shard-layout.js';

const root = mkdtempSync(join(tmpdir(), 'llmgw-waiting-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

const shard = (shardId: string): ShardView => ({
  shardId,
  replicaId: 'tiny-0',
  rank: 0,
  nnodes: 1,
  nodeId: 'dev-node',
  gpuIndices: [0],
  httpPort: 18000,
  leaderAddr: '',
  leaderPort: 0,
  generation: 1,
  state: ShardState.STARTING,
  stateName: 'STARTING',
  adopted: false,
  error: '',
  exitCode: 0,
});

const replica = (over: Partial<ReplicaView>): ReplicaView => ({
  id: 'tiny-0',
  group: 'tiny',
  profile: 'sim-tiny',
  engine: 'sim',
  servedModelName: 'tiny-chat',
  phase: 'starting',
  generation: 1,
  nnodes: 1,
  gpusPerShard: 1,
  pool: '',
  shards: [shard('tiny-0-g1-r0')],
  ...over,
});

describe('readLogTail', () => {
  it('returns the last lines, dropping the one the read window cuts', () => {
    const path = join(root, 'big.log');
    const lines = Array.from({ length: 5000 }, (_, i) => `line ${i}`);
    writeFileSync(path, `${lines.join('\n')}\n`);
    expect(readLogTail(path, 3)).toEqual({ lines: ['line 4997', 'line 4998', 'line 4999'] });
    const all = readLogTail(path, 100_000);
    expect('lines' in all && all.lines.length).toBeLessThan(LOG_TAIL_BYTES / 8);
    expect('lines' in all && all.lines[0]).toMatch(/^line \d+$/);
  });

  it('says why there is nothing to show instead of throwing', () => {
    expect(readLogTail(join(root, 'nosuch.log'), 3)).toEqual({ problem: 'no such file' });
    writeFileSync(join(root, 'empty.log'), '');
    expect(readLogTail(join(root, 'empty.log'), 3)).toEqual({ problem: 'empty so far' });
  });
});

describe('describeWaitingReplica', () => {
  const logDir = join(root, 'log');
  mkdirSync(join(logDir, 'shards'), { recursive: true });

  it("shows the phase, the shard's state and the end of the engine's log", () => {
    writeFileSync(shardLogPath(logDir, 'tiny-0-g1-r0'), `${Array.from({ length: 20 }, (_, i) => `log ${i}`).join('\n')}\n`);
    const lines = describeWaitingReplica(replica({ lastError: 'needs 1 node(s) with 1 free healthy GPU(s)' }), logDir, 4_200);
    // A first generation that is starting was placed: the placement error is history.
    expect(lines[0]).toBe('tiny-0 not ready after 4 s: starting, shard tiny-0-g1-r0 STARTING on GPU 0');
    expect(lines[1]).toBe(`  the end of ${shardLogPath(logDir, 'tiny-0-g1-r0')}:`);
    expect(lines.slice(2)).toEqual(Array.from({ length: WAITING_LOG_LINES }, (_, i) => `    log ${20 - WAITING_LOG_LINES + i}`));
  });

  it('says why a replica was placed again, and names a log that is not there yet', () => {
    const lines = describeWaitingReplica(replica({ generation: 2, lastError: 'tiny-0-g1-r0 exited with code 3', shards: [shard('tiny-0-g2-r0')] }), logDir, 9_000);
    expect(lines[0]).toBe('tiny-0 not ready after 9 s: starting, shard tiny-0-g2-r0 STARTING on GPU 0 (generation 2); last error: tiny-0-g1-r0 exited with code 3');
    expect(lines[1]).toBe(`  ${shardLogPath(logDir, 'tiny-0-g2-r0')}: no such file`);
  });
});
