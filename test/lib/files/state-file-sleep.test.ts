import { create } from '@bufbuild/protobuf';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sampleStateFile } from '../../helpers/sample-state-file.js';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { StartShardSchema } from '../../../src/gen/llmgw/v1/agent_pb.js';
import { parseStateText, readStateFile, type ShardStateFile, updateStateFile, writeStateFile } from '../../../src/lib/files/state-file.js';
import { parseStartShard } from '../../../src/lib/shard-id.js';

/* The sleep a restarted agent must adopt (issue 30): EngineRecord.sleepLevel on disk. */

let dir: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'llmgw-state-sleep-'));
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

const sample = (): ShardStateFile =>
  sampleStateFile({
    spec: parseStartShard(create(StartShardSchema, { shardId: 's0', replicaId: 'r0', gpuIndices: [0], profile: { engine: 'vllm', sleepMode: true } })),
  });

describe('sleepLevel in the state file', () => {
  it('is written while asleep, read back, and gone from the file once woken', async () => {
    const path = join(dir, 's0.json');
    await writeStateFile(path, sample());
    expect(JSON.parse(readFileSync(path, 'utf8'))).not.toHaveProperty('sleepLevel');
    await updateStateFile(path, 's0', { sleepLevel: 2 });
    const asleep = await readStateFile(path, 's0');
    expect(asleep.ok && asleep.file.sleepLevel).toBe(2);
    await updateStateFile(path, 's0', { sleepLevel: 0 });
    expect(JSON.parse(readFileSync(path, 'utf8'))).not.toHaveProperty('sleepLevel');
    const awake = await readStateFile(path, 's0');
    expect(awake.ok && awake.file.sleepLevel).toBeUndefined();
  });

  it.each([3, -1, 1.5, '1', true, null])('refuses sleepLevel %j, as any invalid field', async (bad) => {
    const path = join(dir, 's0.json');
    await writeStateFile(path, sample());
    const raw = JSON.parse(readFileSync(path, 'utf8'));
    expect(parseStateText(JSON.stringify({ ...raw, sleepLevel: bad }), 's0')).toEqual({ ok: false, reason: 'state file field sleepLevel is missing or invalid' });
  });

  it('keeps the memory the GPUs held awake with the sleep, and takes an invalid figure as unknown, never as a reason to refuse the file', async () => {
    const path = join(dir, 's0.json');
    await writeStateFile(path, sample());
    await updateStateFile(path, 's0', { sleepLevel: 1, sleepAwakeMib: 70000 });
    const asleep = await readStateFile(path, 's0');
    expect(asleep.ok && asleep.file.sleepAwakeMib).toBe(70000);
    const raw = JSON.parse(readFileSync(path, 'utf8'));
    for (const bad of [-5, 0, 1.5, '70000', null]) {
      const read = parseStateText(JSON.stringify({ ...raw, sleepAwakeMib: bad }), 's0');
      expect(read.ok && read.file.sleepLevel).toBe(1);
      expect(read.ok && read.file.sleepAwakeMib).toBeUndefined();
    }
    // Awake: the figure goes with the sleep.
    await updateStateFile(path, 's0', { sleepLevel: 0, sleepAwakeMib: undefined });
    expect(JSON.parse(readFileSync(path, 'utf8'))).not.toHaveProperty('sleepAwakeMib');
  });

  it('takes 0 as awake', async () => {
    const path = join(dir, 's0.json');
    await writeStateFile(path, sample());
    const raw = JSON.parse(readFileSync(path, 'utf8'));
    const read = parseStateText(JSON.stringify({ ...raw, sleepLevel: 0 }), 's0');
    expect(read.ok && read.file.sleepLevel).toBeUndefined();
  });

  it('keeps what was read of the engine (its version, the host copy it holds) for an adopting agent, an invalid one taken as unknown', async () => {
    const path = join(dir, 's0.json');
    await writeStateFile(path, sample());
    await updateStateFile(path, 's0', { engineVersion: '0.24.0+cu129' });
    await updateStateFile(path, 's0', { hostCopyMib: 36000 });
    const read = await readStateFile(path, 's0');
    expect(read.ok && [read.file.engineVersion, read.file.hostCopyMib]).toEqual(['0.24.0+cu129', 36000]);
    const raw = JSON.parse(readFileSync(path, 'utf8'));
    for (const bad of [7, '', 'x'.repeat(65), '0.24 ; rm -rf', null]) {
      const r = parseStateText(JSON.stringify({ ...raw, engineVersion: bad, hostCopyMib: -1 }), 's0');
      expect(r.ok && [r.file.engineVersion, r.file.hostCopyMib]).toEqual([undefined, undefined]);
    }
  });

  it("keeps the model's content digest for an adopting agent's known-answer check; a file without one (an older agent's) still reads, and one not of the store's form is unknown", async () => {
    const path = join(dir, 's0.json');
    const digest = `sha256:${'ab'.repeat(32)}`;
    await writeStateFile(path, { ...sample(), modelDigest: digest });
    const read = await readStateFile(path, 's0');
    expect(read.ok && read.file.modelDigest).toBe(digest);
    // Kept through the runner's later rewrites.
    await updateStateFile(path, 's0', { engineVersion: '0.24.0' });
    const raw = JSON.parse(readFileSync(path, 'utf8'));
    expect(raw.modelDigest).toBe(digest);
    const { modelDigest: _gone, ...older } = raw;
    const old = parseStateText(JSON.stringify(older), 's0');
    expect([old.ok, old.ok && old.file.modelDigest]).toEqual([true, undefined]);
    for (const bad of [7, '', 'sha256:xyz', `md5:${'ab'.repeat(16)}`, null]) {
      const r = parseStateText(JSON.stringify({ ...raw, modelDigest: bad }), 's0');
      expect([r.ok, r.ok && r.file.modelDigest]).toEqual([true, undefined]);
    }
  });
});
