import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { StateFileWriter } from '../../../../src/agent/supervisor/shard/state-file-writer.js';
import { readStateFile, writeStateFile } from '../../../../src/lib/files/state-file.js';
import { parseShardId } from '../../../../src/lib/shard-id.js';
import { captureLogger } from '../../../helpers/capture-logger.js';
import { sampleStateFile } from '../../../helpers/sample-state-file.js';

/* What a runner records of its shard in the state file a restarted agent adopts it by: real files, writes in order. */

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

async function writer() {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-state-writer-'));
  dirs.push(dir);
  const path = join(dir, 's0.json');
  await writeStateFile(path, sampleStateFile());
  const { logger, records } = captureLogger();
  const read = async () => {
    const r = await readStateFile(path, 's0');
    if (!r.ok) throw new Error(r.reason);
    return r.file;
  };
  return { path, w: new StateFileWriter(path, parseShardId('s0'), logger), records, read };
}

describe('StateFileWriter', () => {
  it('records a drain, a sleep with what the GPUs held awake, a known answer and what was read of the engine', async () => {
    const { w, read, records } = await writer();
    await w.recordDrain(true);
    await w.recordSleep(2, 70_000);
    await w.recordKnownAnswer('Paris', '12');
    await w.recordFacts({ engineVersion: '0.9.1', hostCopyMib: 512 });
    expect(await read()).toMatchObject({ drainRequested: true, sleepLevel: 2, sleepAwakeMib: 70_000, knownAnswer: 'Paris', knownAnswerToken: '12', engineVersion: '0.9.1', hostCopyMib: 512 });
    expect(records).toEqual([]);
  });

  it('forgets what the GPUs held once awake, or when it was not known', async () => {
    const { w, read } = await writer();
    await w.recordSleep(1, 70_000);
    await w.recordSleep(0, 70_000);
    // Awake: no level kept (an absent level reads as awake).
    expect((await read()).sleepLevel ?? 0).toBe(0);
    expect((await read()).sleepAwakeMib).toBeUndefined();
    await w.recordSleep(2);
    expect((await read()).sleepAwakeMib).toBeUndefined();
  });

  it('writes in the order asked, without waiting: the last of quick changes is what stays', async () => {
    const { w, read } = await writer();
    void w.recordDrain(true);
    void w.recordSleep(1, 10);
    void w.recordDrain(false);
    await w.recordSleep(0);
    const file = await read();
    expect([file.drainRequested, file.sleepLevel ?? 0, file.sleepAwakeMib]).toEqual([false, 0, undefined]);
  });

  it('removes the file only after the writes asked before, which would otherwise bring it back', async () => {
    const { w, path } = await writer();
    void w.recordDrain(true);
    await w.remove();
    expect(existsSync(path)).toBe(false);
  });

  it("logs what a failed write means for a restarted agent, and goes on", async () => {
    const { w, path, records } = await writer();
    rmSync(path);
    await w.recordDrain(true);
    await w.recordSleep(1);
    await w.recordSleep(0);
    await w.recordKnownAnswer('Paris');
    await w.recordFacts({ engineVersion: '0.9.1' });
    expect(records.map((r) => r.msg)).toEqual([
      'shard is DRAINING but the drain could not be recorded; an agent restart would bring it back READY',
      'shard is SLEEPING but the sleep could not be recorded; an agent restart would bring it back READY',
      'shard woke but the state file still records its sleep; an agent restart would bring it back SLEEPING',
      'the known answer could not be recorded; a restarted agent would check a wake against garbage alone',
      'what was read of the engine could not be recorded; a restarted agent reads it again',
    ]);
    await w.remove();
    expect(records).toHaveLength(5);
  });

  it('close() resolves once the change in flight has ended, and no change asked after it writes, not even a removal', async () => {
    const { w, read, path } = await writer();
    void w.recordDrain(true);
    await w.close();
    expect((await read()).drainRequested).toBe(true);
    // The agent is going away: this one's memory holds it; the file is as it was at close.
    await w.recordSleep(2);
    await w.remove();
    expect(existsSync(path)).toBe(true);
    expect((await read()).sleepLevel ?? 0).toBe(0);
  });
});
