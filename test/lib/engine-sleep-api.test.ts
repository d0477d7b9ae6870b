import { create } from '@bufbuild/protobuf';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { SglangEngine } from '../../src/agent/engines/sglang/sglang-engine.js';
import { SGLANG_SLEEP_API } from '../../src/agent/engines/sglang/sglang-sleep.js';
import { VllmEngine } from '../../src/agent/engines/vllm/vllm-engine.js';
import { VLLM_SLEEP_API } from '../../src/agent/engines/vllm/vllm-sleep.js';
import { withLegacySleepApi } from '../../src/agent/supervisor/orphans/legacy-watch.js';
import { StartShardSchema } from '../../src/gen/llmgw/v1/agent_pb.js';
import { parseEngineSleepApi } from '../../src/lib/engine-sleep-api.js';
import type { EngineWatch } from '../../src/lib/engine-watch.js';
import { readStateFile, writeStateFile } from '../../src/lib/files/state-file.js';
import { parseStartShard } from '../../src/lib/shard-id.js';
import { sampleStateFile } from '../helpers/sample-state-file.js';
import { shard } from '../agent/engines/engine-fixtures.js';

/* The sleep API as data (issue 50): recorded in the watch at launch, kept by the state file, so an adopted engine keeps the API it was launched with. */

let dir: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'llmgw-sleep-api-'));
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

const WATCH: EngineWatch = { healthPort: 8100, healthPath: '/health', probeTimeoutMs: 0, readiness: 'model-listed', runningGauges: [], inFlightGauges: [], progressCounters: [], apiKey: '', adminApiKey: '' };
const spec = (engine: string) => parseStartShard(create(StartShardSchema, { shardId: 's0', replicaId: 'r0', gpuIndices: [0], profile: { engine, sleepMode: true } }));

describe('the sleep API as data', () => {
  it("is in the API rank's watch of each engine that sleeps, and in no worker rank's", () => {
    const vllm = new VllmEngine({ command: [process.execPath] }, 'eth0');
    const sglang = new SglangEngine(undefined, 'eth0');
    expect(vllm.watch(shard(), vllm.command(shard())).sleepApi).toEqual(VLLM_SLEEP_API);
    expect(sglang.watch(shard(), sglang.command(shard())).sleepApi).toEqual(SGLANG_SLEEP_API);
    const worker = shard({ nnodes: 2, rank: 1, leaderAddr: '10.0.0.1', leaderPort: 5000, httpPort: 31001, profile: { tensorParallelSize: 4 } });
    expect(sglang.watch(worker, sglang.command(worker)).sleepApi).toBeUndefined();
  });

  it('survives the state file as it was launched, not as this agent would launch it now', async () => {
    const path = join(dir, 's0.json');
    const launchedWith = { ...VLLM_SLEEP_API, levels: { ...VLLM_SLEEP_API.levels, 1: { ...VLLM_SLEEP_API.levels[1], sleep: { method: 'POST' as const, path: '/sleep?level=1&mode=wait' } } } };
    await writeStateFile(path, sampleStateFile({ spec: spec('vllm'), watch: { ...WATCH, sleepApi: launchedWith } }));
    const read = await readStateFile(path, 's0');
    expect(read.ok && read.file.watch?.sleepApi).toEqual(launchedWith);
    // Adopted: what it recorded wins over today's wing.
    expect(read.ok && read.file.watch && withLegacySleepApi(read.file.watch, read.file).sleepApi).toEqual(launchedWith);
  });

  it("gives a record from before it its wing's API by the engine's name, and none to a worker rank or an engine without one", () => {
    expect(withLegacySleepApi(WATCH, { spec: spec('sglang'), servesHttp: true }).sleepApi).toEqual(SGLANG_SLEEP_API);
    expect(withLegacySleepApi(WATCH, { spec: spec('vllm'), servesHttp: true }).sleepApi).toEqual(VLLM_SLEEP_API);
    expect(withLegacySleepApi(WATCH, { spec: spec('vllm'), servesHttp: false }).sleepApi).toBeUndefined();
    expect(withLegacySleepApi(WATCH, { spec: spec('sim'), servesHttp: true }).sleepApi).toBeUndefined();
  });

  it("gives a record from before the adoption's question the query and gauges of its wing, its own calls kept", () => {
    const { asleepQuery: _q, levelGauges: _g, ...older } = VLLM_SLEEP_API;
    const launchedWith = { ...older, levels: { ...older.levels, 1: { ...older.levels[1], sleep: { method: 'POST' as const, path: '/sleep?level=1&mode=wait' } } } };
    const adopted = withLegacySleepApi({ ...WATCH, sleepApi: launchedWith }, { spec: spec('vllm'), servesHttp: true }).sleepApi;
    expect(adopted).toEqual({ ...launchedWith, asleepQuery: '/is_sleeping', levelGauges: VLLM_SLEEP_API.levelGauges });
    // SGLang's wing has none to give.
    expect(withLegacySleepApi({ ...WATCH, sleepApi: SGLANG_SLEEP_API }, { spec: spec('sglang'), servesHttp: true }).sleepApi).toEqual(SGLANG_SLEEP_API);
    // A query that is not a path is no API.
    expect(parseEngineSleepApi({ ...JSON.parse(JSON.stringify(VLLM_SLEEP_API)), asleepQuery: 'http://elsewhere/is_sleeping' })).toBeUndefined();
    expect(parseEngineSleepApi({ ...JSON.parse(JSON.stringify(VLLM_SLEEP_API)), levelGauges: { 1: 'x' } })).toBeUndefined();
  });

  it('reads back every call and flag, and refuses a record that is not an API (the file is refused, naming the field)', async () => {
    for (const api of [VLLM_SLEEP_API, SGLANG_SLEEP_API]) expect(parseEngineSleepApi(JSON.parse(JSON.stringify(api)))).toEqual(api);
    const broken = JSON.parse(JSON.stringify(VLLM_SLEEP_API));
    broken.levels[2].wake.restore[0].method = 'GET';
    expect(parseEngineSleepApi(broken)).toBeUndefined();
    expect(parseEngineSleepApi({ ...VLLM_SLEEP_API, mustBeIdle: 'no' })).toBeUndefined();
    expect(parseEngineSleepApi({ ...SGLANG_SLEEP_API, hold: { pause: SGLANG_SLEEP_API.hold?.pause } })).toBeUndefined();
    const path = join(dir, 's0.json');
    await writeStateFile(path, sampleStateFile({ spec: spec('vllm'), watch: { ...WATCH, sleepApi: VLLM_SLEEP_API } }));
    const text = JSON.parse(readFileSync(path, 'utf8'));
    text.watch.sleepApi = broken;
    writeFileSync(path, JSON.stringify(text));
    const read = await readStateFile(path, 's0');
    expect(read.ok).toBe(false);
    expect(!read.ok && read.reason).toMatch(/watch\.sleepApi/);
  });
});
