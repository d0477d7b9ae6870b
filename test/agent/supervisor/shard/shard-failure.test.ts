import { mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import {
  addGpuEventsToFailureRecord,
  LAST_OUTPUT_LINES,
  readLastOutput,
  recordShardFailure,
  shardFailureRecord,
} from '../../../../src/agent/supervisor/shard/shard-failure.js';
import { ShardState } from '../../../../src/gen/llmgw/v1/agent_pb.js';
import type { FailureGpuEvent, FailureRecord } from '../../../../src/lib/files/failure-record.js';
import { shardFailurePath } from '../../../../src/lib/shard-layout.js';
import { captureLogger } from '../../../helpers/capture-logger.js';
import { shardSnapshot } from '../../../helpers/shard-snapshot.js';

/* The failure record beside a shard's log: what it holds, that it is written, and the GPU events added to it later. Real files. */

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});
function logDir(): string {
  const d = mkdtempSync(join(tmpdir(), 'llmgw-failure-'));
  dirs.push(d);
  return d;
}

const failed = shardSnapshot('s1', { state: ShardState.FAILED, pid: 77, exitCode: 137, signal: 'SIGKILL', error: 'engine was killed by SIGKILL', lastOutput: ['CUDA error'], startedAtMs: Date.parse('2026-01-01T00:00:00Z') });
const event: FailureGpuEvent = { gpu: 0, kind: 'XID', xid: 79, message: 'fell off the bus', source: 'kmsg', at: '2026-01-01T00:00:30Z' };

describe('shardFailureRecord', () => {
  it('is the shard as it is now, seen at the given time', () => {
    expect(shardFailureRecord(failed, new Date('2026-01-01T00:01:00Z'))).toEqual({
      shardId: 's1', replicaId: 'r-s1', pid: 77, exitCode: 137, signal: 'SIGKILL', error: 'engine was killed by SIGKILL',
      at: '2026-01-01T00:01:00.000Z', startedAt: '2026-01-01T00:00:00.000Z', lastOutput: ['CUDA error'],
    });
  });
});

describe('recordShardFailure and addGpuEventsToFailureRecord', () => {
  it('writes the record beside the log, and adds the GPU events to it afterwards', async () => {
    const dir = logDir();
    const { logger, records } = captureLogger();
    const record = shardFailureRecord(failed, new Date());
    const path = shardFailurePath(dir, 's1');
    mkdirSync(dirname(path), { recursive: true });
    await recordShardFailure({ logDir: dir, logPath: join(dir, 'missing.log'), log: logger }, record);
    expect(JSON.parse(readFileSync(path, 'utf8'))).toEqual(record);
    await addGpuEventsToFailureRecord({ logDir: dir, log: logger }, 's1', [event]);
    expect((JSON.parse(readFileSync(path, 'utf8')) as FailureRecord).gpuEvents).toEqual([event]);
    expect(records.filter((r) => (r.level as number) >= 40)).toEqual([]);
  });

  it('logs, and does not throw, when the record cannot be written: the report carries the same facts', async () => {
    const dir = logDir();
    const { logger, records } = captureLogger();
    // The shards/ directory is a file: nothing can be written under it.
    writeFileSync(dirname(shardFailurePath(dir, 's1')), 'not a directory');
    await recordShardFailure({ logDir: dir, logPath: join(dir, 'x.log'), log: logger }, shardFailureRecord(failed, new Date()));
    expect(records.map((r) => r.msg)).toContain('could not write the failure record');
  });

  it("adds nothing when there are no events, or to another shard's record, and logs a record that is not there", async () => {
    const dir = logDir();
    const { logger, records } = captureLogger();
    const path = shardFailurePath(dir, 's1');
    mkdirSync(dirname(path), { recursive: true });
    writeFileSync(path, JSON.stringify({ ...shardFailureRecord(failed, new Date()), shardId: 'other' }));
    const before = statSync(path).mtimeMs;
    await addGpuEventsToFailureRecord({ logDir: dir, log: logger }, 's1', []);
    await addGpuEventsToFailureRecord({ logDir: dir, log: logger }, 's1', [event]);
    expect(JSON.parse(readFileSync(path, 'utf8'))).not.toHaveProperty('gpuEvents');
    expect(statSync(path).mtimeMs).toBe(before);
    await addGpuEventsToFailureRecord({ logDir: dir, log: logger }, 's2', [event]);
    expect(records.map((r) => r.msg)).toEqual(['could not add the GPU events to the failure record']);
  });
});

describe('readLastOutput', () => {
  it(`keeps the last ${LAST_OUTPUT_LINES} lines of the log`, async () => {
    const dir = logDir();
    const log = join(dir, 's1.log');
    writeFileSync(log, `${Array.from({ length: 30 }, (_, i) => `line ${i}`).join('\n')}\n`);
    const got = await readLastOutput(log);
    expect(got).toHaveLength(LAST_OUTPUT_LINES);
    expect(got.at(-1)).toBe('line 29');
    expect(got[0]).toBe(`line ${30 - LAST_OUTPUT_LINES}`);
  });

  it('is empty, not an error, for a log that cannot be read', async () => {
    expect(await readLastOutput(join(logDir(), 'never-written.log'))).toEqual([]);
  });
});
