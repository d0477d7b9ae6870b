import { create } from '@bufbuild/protobuf';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sampleStateFile } from '../../helpers/sample-state-file.js';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  type ShardStateFile,
  readStateFile,
  readStateFileSync,
  removeStateFile,
  updateStateFile,
  writeStateFile,
} from '../../../src/lib/files/state-file.js';
import { StartShardSchema } from '../../../src/gen/llmgw/v1/agent_pb.js';
import { type CheckedStartShard, parseShardId, parseStartShard } from '../../../src/lib/shard-id.js';

let dir: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'llmgw-state-'));
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

/** Where the agent keeps shard `id`'s state file, in a `shards` directory. */
const stateFilePath = (shardsDir: string, id: string): string => join(shardsDir, `${id}.json`);

const sample = (): ShardStateFile => sampleStateFile();

describe('state files', () => {
  it('round-trips, written 0600 with no temp file left behind', async () => {
    await writeStateFile(stateFilePath(dir, 's0'), sample());
    expect(readdirSync(dir)).toEqual(['s0.json']);
    expect(statSync(stateFilePath(dir, 's0')).mode & 0o777).toBe(0o600);
    const read = await readStateFile(stateFilePath(dir, 's0'), 's0');
    expect(read.ok).toBe(true);
    if (read.ok) {
      expect(read.file.spec.gpuIndices).toEqual([0, 1]);
      expect(read.file.spec.profile?.args).toEqual(['--x']);
      expect({ ...read.file, spec: undefined }).toEqual({ ...sample(), spec: undefined });
    }
  });

  it('keeps the engine watch, and refuses a file whose watch is not one', async () => {
    const watch = {
      healthPort: 30001,
      healthPath: '/health_generate',
      probeTimeoutMs: 5000,
      readiness: 'health' as const,
      runningGauges: ['sglang:num_running_reqs'],
      inFlightGauges: ['sglang:num_running_reqs', 'sglang:num_queue_reqs'],
      progressCounters: ['sglang:realtime_tokens_total'],
      apiKey: 'k',
      adminApiKey: 'adm',
    };
    await writeStateFile(stateFilePath(dir, 's0'), { ...sample(), watch });
    const read = await readStateFile(stateFilePath(dir, 's0'), 's0');
    expect(read.ok && read.file.watch).toEqual(watch);
    const text = JSON.parse(readFileSync(stateFilePath(dir, 's0'), 'utf8'));
    text.watch.healthPath = 'health';
    writeFileSync(stateFilePath(dir, 's0'), JSON.stringify(text));
    expect(await readStateFile(stateFilePath(dir, 's0'), 's0')).toEqual({ ok: false, reason: 'state file field watch.healthPath is missing or invalid' });
  });

  it("reads a watch without adminApiKey (an agent before issue 36) as having none, and refuses one that is not a string", async () => {
    const { adminApiKey: _a, ...older } = { healthPort: 30001, healthPath: '/health_generate', probeTimeoutMs: 5000, readiness: 'model-listed' as const, runningGauges: [], inFlightGauges: [], progressCounters: [], apiKey: 'k', adminApiKey: '' };
    await writeStateFile(stateFilePath(dir, 's0'), { ...sample(), watch: older as never });
    const read = await readStateFile(stateFilePath(dir, 's0'), 's0');
    expect(read.ok && read.file.watch?.adminApiKey).toBe('');
    const text = JSON.parse(readFileSync(stateFilePath(dir, 's0'), 'utf8'));
    text.watch.adminApiKey = 7;
    writeFileSync(stateFilePath(dir, 's0'), JSON.stringify(text));
    expect(await readStateFile(stateFilePath(dir, 's0'), 's0')).toEqual({ ok: false, reason: 'state file field watch.adminApiKey is missing or invalid' });
  });

  it('replaces a planted symlink on write instead of writing through it', async () => {
    const victim = join(dir, 'victim');
    writeFileSync(victim, 'precious');
    symlinkSync(victim, stateFilePath(dir, 's0'));
    await writeStateFile(stateFilePath(dir, 's0'), sample());
    expect(statSync(victim).size).toBe('precious'.length);
    expect((await readStateFile(stateFilePath(dir, 's0'), 's0')).ok).toBe(true);
  });

  it.each([
    ['truncated', (t: string) => t.slice(0, 40), /not valid JSON/],
    ['not an object', () => '[1]', /does not hold a JSON object/],
    ['an unknown schema version', (t: string) => t.replace('"schemaVersion": 1', '"schemaVersion": 7'), /schema version 7 is not supported/],
    ['another shard id', (t: string) => t.replace('"shardId": "s0"', '"shardId": "s9"'), /field shardId/],
    ['a bad pid', (t: string) => t.replace('"pid": 1234', '"pid": -1'), /field pid/],
    ['a pgid that is not its pid', (t: string) => t.replace('"pgid": 1234', '"pgid": 4321'), /pgid 4321 is not the engine's pid 1234/],
    ['no start time', (t: string) => t.replace('"startTime": "99"', '"startTime": ""'), /identity.startTime/],
  ])('refuses a file that is %s, with a reason', async (_what, mangle, reason) => {
    await writeStateFile(stateFilePath(dir, 's0'), sample());
    const path = stateFilePath(dir, 's0');
    const { readFileSync } = await import('node:fs');
    writeFileSync(path, mangle(readFileSync(path, 'utf8')));
    const read = await readStateFile(path, 's0');
    expect(read).toEqual({ ok: false, reason: expect.stringMatching(reason) });
    expect(readStateFileSync(path, 's0')).toEqual(read);
  });

  it('refuses to follow a symlinked state file', async () => {
    await writeStateFile(stateFilePath(dir, 'real'), { ...sample(), shardId: parseShardId('real'), spec: parseStartShard(create(StartShardSchema, { shardId: 'real' })) });
    symlinkSync(stateFilePath(dir, 'real'), stateFilePath(dir, 's0'));
    expect(await readStateFile(stateFilePath(dir, 's0'), 's0')).toEqual({ ok: false, reason: 'state file is a symlink; refused' });
    expect(readStateFileSync(stateFilePath(dir, 's0'), 's0')).toEqual({ ok: false, reason: 'state file is a symlink; refused' });
  });
});

describe('removeStateFile', () => {
  it('moves a directory found where a state file should be aside, so the shard id is usable again', async () => {
    const path = stateFilePath(dir, 'dir');
    mkdirSync(path);
    await removeStateFile(path);
    expect(existsSync(path)).toBe(false);
    expect(readdirSync(dir)).toEqual([expect.stringMatching(/^dir\.json\.refused-\d+$/)]);
  });

  it('says nothing about a file that is already gone', async () => {
    await expect(removeStateFile(stateFilePath(dir, 'none'))).resolves.toBeUndefined();
  });
});

describe('the drain and token-counter fields', () => {
  it('reads a file of an older agent without the drain and token-counter fields as not drained, with no counter', async () => {
    const { drainRequested: _d, generationTokensMetric: _g, ...old } = sample();
    const path = stateFilePath(dir, 's0');
    await writeStateFile(path, old);
    const text = JSON.parse(readFileSync(path, 'utf8'));
    delete text.drainRequested;
    delete text.generationTokensMetric;
    writeFileSync(path, JSON.stringify(text));
    const read = await readStateFile(path, 's0');
    expect(read.ok && [read.file.drainRequested, read.file.generationTokensMetric]).toEqual([false, '']);
  });

  it('records a drain with updateStateFile, keeping every other field', async () => {
    const path = stateFilePath(dir, 's0');
    await writeStateFile(path, sample());
    await updateStateFile(path, 's0', { drainRequested: true });
    const read = await readStateFile(path, 's0');
    expect(read.ok && { ...read.file, spec: undefined }).toEqual({ ...sample(), drainRequested: true, spec: undefined });
    expect(readdirSync(dir)).toEqual(['s0.json']);
  });

  it('refuses to update a file it cannot read, and a drainRequested that is not a boolean', async () => {
    const path = stateFilePath(dir, 's0');
    writeFileSync(path, '{"schemaVersion": 1');
    await expect(updateStateFile(path, 's0', { drainRequested: true })).rejects.toThrow(/not valid JSON/);
    await writeStateFile(path, sample());
    const text = JSON.parse(readFileSync(path, 'utf8'));
    writeFileSync(path, JSON.stringify({ ...text, drainRequested: 'yes' }));
    expect(await readStateFile(path, 's0')).toEqual({ ok: false, reason: 'state file field drainRequested is missing or invalid' });
  });
});

describe("an older agent's file holding fields StartShard now refuses (security review 2, N6)", () => {
  const oldFile = (): ShardStateFile => ({
    ...sample(),
    spec: <CheckedStartShard>create(StartShardSchema, {
      shardId: 's0',
      replicaId: 'r0',
      gpuIndices: [0],
      pool: 'p'.repeat(12 * 1024 * 1024),
      fabric: '\u001b]0;owned\u0007',
      leaderAddr: '$(reboot)',
      hcas: ['mlx5_0\u001b[31m', 'x,^=mlx5_1'],
      profile: { engine: 'sim', name: 'p', model: 'org/m', servedModelName: 's'.repeat(300) },
    }),
  });

  it('still identifies the engine, and drops the fields that only describe it, naming each', async () => {
    const path = stateFilePath(dir, 's0');
    await writeStateFile(path, oldFile());
    const read = await readStateFile(path, 's0');
    expect(read.ok).toBe(true);
    if (!read.ok) return;
    expect([read.file.pid, read.file.identity]).toEqual([1234, { startTime: '99', bootId: 'b' }]);
    const { pool, fabric, leaderAddr, hcas, replicaId } = read.file.spec;
    expect({ pool, fabric, leaderAddr, hcas, replicaId }).toEqual({ pool: '', fabric: '', leaderAddr: '', hcas: [], replicaId: 'r0' });
    expect(read.refused.map((p) => p.field)).toEqual(['profile.served_model_name', 'pool', 'fabric', 'hcas[0]', 'leader_addr', 'hcas[1]']);
    expect(read.refused[1]?.message).toBe('pool is 12582912 bytes; at most 256 are accepted');
    // The engine answers to its served name, and readiness asks for it: kept.
    expect(read.file.spec.profile?.servedModelName).toBe('s'.repeat(300));
    expect(readStateFileSync(path, 's0')).toEqual(read);
  });

  it('writes the file back without them when it next records a drain', async () => {
    const path = stateFilePath(dir, 's0');
    await writeStateFile(path, oldFile());
    await updateStateFile(path, 's0', { drainRequested: true });
    expect(statSync(path).size).toBeLessThan(4096);
    const read = await readStateFile(path, 's0');
    expect(read.ok && read.refused.map((p) => p.field)).toEqual(['profile.served_model_name']);
  });

  it('reads a clean file with nothing refused', async () => {
    await writeStateFile(stateFilePath(dir, 's0'), sample());
    const read = await readStateFile(stateFilePath(dir, 's0'), 's0');
    expect(read.ok && read.refused).toEqual([]);
  });
});
