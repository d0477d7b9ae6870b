import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { create } from '@bufbuild/protobuf';
import { afterEach, describe, expect, it } from 'vitest';
import { SGLANG_SLEEP_API } from '../../../../src/agent/engines/sglang/sglang-sleep.js';
import { VLLM_SLEEP_API } from '../../../../src/agent/engines/vllm/vllm-sleep.js';
import type { Readiness } from '../../../../src/agent/supervisor/probes/await-readiness.js';
import { ShardAnswers } from '../../../../src/agent/supervisor/shard/shard-answers.js';
import { ShardEngineFacts } from '../../../../src/agent/supervisor/shard/shard-engine-facts.js';
import { newShardLife, nextShard, type ShardLife } from '../../../../src/agent/supervisor/shard/shard-machine.js';
import type { SleepProbes } from '../../../../src/agent/supervisor/shard/shard-sleep.js';
import { prepareSleep, type SleepHands, sleepShard, wakeShard } from '../../../../src/agent/supervisor/shard/shard-sleep-steps.js';
import { StateFileWriter } from '../../../../src/agent/supervisor/shard/state-file-writer.js';
import { ShardState, StartShardSchema } from '../../../../src/gen/llmgw/v1/agent_pb.js';
import { readStateFile, writeStateFile } from '../../../../src/lib/files/state-file.js';
import { parseShardId } from '../../../../src/lib/shard-id.js';
import { captureLogger } from '../../../helpers/capture-logger.js';
import { sampleStateFile } from '../../../helpers/sample-state-file.js';

/*
 * The steps of a sleep and a wake (shard-sleep-steps.ts), called directly on
 * hands built as the runner builds them: the real machine (nextShard), a real
 * state file, the engine a real HTTP server on a real socket that records
 * each call of its sleep API. Only the GPU readings are stand-ins (hardware):
 * the engine's calls move them as an engine's memory moves.
 */

const S = ShardState;
const AWAKE_MIB = 10_000;
const ASLEEP_MIB = 900;
const ANSWER = ' 9, 10, 11, 12';

const cleanups: (() => void)[] = [];
afterEach(() => {
  for (const c of cleanups.splice(0).reverse()) c();
});

/** What the engine double does: its answers, version and failing calls; the calls it received, in order. */
interface EngineDouble {
  url: string;
  calls: string[];
  /** Its completion's text; null answers 500. */
  answer: string | null;
  version: string;
  /** Paths that answer 500 instead of doing their work. */
  failing: Set<string>;
  /** MiB on GPU 0, as the fake NVML would read it. */
  gpuMib: number;
}

/** An engine's sleep API on a real socket: a release frees its GPU memory, a resume takes it back. */
async function engineDouble(version = '0.24.0'): Promise<EngineDouble> {
  const e: EngineDouble = { url: '', calls: [], answer: ANSWER, version, failing: new Set(), gpuMib: AWAKE_MIB };
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      const path = req.url ?? '';
      if (path === '/version') return void res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ version: e.version }));
      if (path === '/v1/completions') {
        if (e.answer === null) return void res.writeHead(500).end('overloaded');
        return void res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ choices: [{ text: e.answer }] }));
      }
      e.calls.push(path);
      if (e.failing.has(path)) return void res.writeHead(500).end('out of memory');
      if (path.startsWith('/sleep') || path === '/release_memory_occupation') e.gpuMib = ASLEEP_MIB;
      if (path === '/wake_up?tags=weights' || path === '/wake_up' || path === '/resume_memory_occupation') e.gpuMib = AWAKE_MIB;
      res.writeHead(200).end();
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  cleanups.push(() => server.close());
  e.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return e;
}

interface Rig {
  h: SleepHands;
  engine: EngineDouble;
  probes: SleepProbes;
  statePath: string;
  told: () => number;
  life: () => ShardLife;
  records: Record<string, unknown>[];
}

/** Hands for shard s0 on GPU 0 of `engine`, READY (or `life`), as ShardRunner lends them to a sleep or wake. */
async function rig(o: { engine: 'vllm' | 'sglang'; life?: ShardLife; checksAnswers?: boolean; inFlight?: number; readiness?: Readiness; version?: string }): Promise<Rig> {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-sleep-steps-'));
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  const engine = await engineDouble(o.version);
  const statePath = join(dir, 's0.json');
  await writeStateFile(statePath, sampleStateFile());
  const logPath = join(dir, 's0.log');
  writeFileSync(logPath, 'loading weights\n');
  const { logger, records } = captureLogger();
  const stateFile = new StateFileWriter(statePath, parseShardId('s0'), logger);
  const fields = { shard: 's0', replica: 'r0' };
  const facts = new ShardEngineFacts({ engine: o.engine, baseUrl: engine.url, apiKey: '', stateFile, log: logger, fields, pid: process.pid }, {});
  const scope = new AbortController();
  cleanups.push(() => scope.abort());
  let life = o.life ?? newShardLife({ state: S.READY });
  let told = 0;
  const base = {
    shardId: 's0',
    spec: create(StartShardSchema, { shardId: 's0', replicaId: 'r0', gpuIndices: [0], profile: { name: 'p1', engine: o.engine, sleepMode: true } }),
    fields,
    logPath,
    baseUrl: engine.url,
    adminKey: '',
    signal: scope.signal,
    log: logger,
    stateFile,
    sleepApi: o.engine === 'vllm' ? VLLM_SLEEP_API : SGLANG_SLEEP_API,
    facts,
    checksAnswers: o.checksAnswers ?? true,
    life: () => life,
    apply: (c: Parameters<SleepHands['apply']>[0]) => {
      const next = nextShard(life, c, 's0');
      if (!('refused' in next)) life = next.life;
      return next;
    },
    told: () => {
      told++;
    },
    target: (signal: AbortSignal) => ({ baseUrl: engine.url, model: 'm', apiKey: '', signal }),
    inFlight: async () => o.inFlight ?? 0,
    readiness: async (): Promise<Readiness> => o.readiness ?? { ready: true, why: 'answers /health' },
  };
  const h: SleepHands = { ...base, answers: new ShardAnswers(base) };
  // Host room for a copy to host RAM: a /proc/meminfo stand-in with 200 GiB available, no cgroup limit, no NUMA binding.
  const meminfo = join(dir, 'meminfo');
  writeFileSync(meminfo, `MemTotal: 263842764 kB\nMemFree: 1000000 kB\nMemAvailable: ${200_000 * 1024} kB\n`);
  const none = join(dir, 'none');
  // The fake NVML's reading, taken at once when asked (GpuMemorySampler.readNow).
  const probes: SleepProbes = {
    gpuMemoryMib: () => [engine.gpuMib],
    readNow: async () => [engine.gpuMib],
    pollMs: 20,
    timeoutMs: 10_000,
    meminfoPath: meminfo,
    hostRoomPaths: { proc: none, cgroupRoot: none, nodeRoot: none },
  };
  return { h, engine, probes, statePath, told: () => told, life: () => life, records };
}

/** A state file recording no sleep: both fields absent (state-file.ts). */
const AWAKE = { sleepLevel: undefined, sleepAwakeMib: undefined };

/** What the shard's state file records of its sleep. */
async function recordedSleep(statePath: string): Promise<{ sleepLevel?: number; sleepAwakeMib?: number }> {
  const r = await readStateFile(statePath, 's0');
  if (!r.ok) throw new Error(r.reason);
  return { sleepLevel: r.file.sleepLevel, sleepAwakeMib: r.file.sleepAwakeMib };
}

describe('prepareSleep', () => {
  it("reads the shard's GPUs and records its known answer before anything is asked of the engine", async () => {
    const r = await rig({ engine: 'vllm' });
    const p = await prepareSleep(r.h, 2, r.probes);
    expect([p.level, p.before, p.api]).toEqual([2, AWAKE_MIB, VLLM_SLEEP_API]);
    expect(r.engine.calls).toEqual([]);
    expect([r.life().state, r.life().knownAnswer]).toEqual([S.READY, ANSWER]);
  });

  it('refuses a shard whose engine gives no known answer, the engine untouched; one not checked by answers is prepared', async () => {
    const r = await rig({ engine: 'vllm' });
    r.engine.answer = null;
    await expect(prepareSleep(r.h, 2, r.probes)).rejects.toThrow(/^sleep refused: shard s0 gave no answer to "1, 2, 3, 4, 5, 6, 7, 8," to check its wake against/);
    expect(r.engine.calls).toEqual([]);
    const unchecked = await rig({ engine: 'vllm', checksAnswers: false });
    unchecked.engine.answer = null;
    expect((await prepareSleep(unchecked.h, 2, unchecked.probes)).before).toBe(AWAKE_MIB);
  });

  it("refuses a level-2 sleep of a vLLM that says at /version it lacks the partial-wake fix; the fixed one's is prepared", async () => {
    const old = await rig({ engine: 'vllm', version: '0.23.1' });
    await expect(prepareSleep(old.h, 2, old.probes)).rejects.toThrow(/^sleep refused: vLLM 0\.23\.1 lacks #44483/);
    expect(old.engine.calls).toEqual([]);
    const fixed = await rig({ engine: 'vllm', version: '0.24.1' });
    expect((await prepareSleep(fixed.h, 2, fixed.probes)).level).toBe(2);
  });

  it('refuses to sleep an SGLang holding requests, naming how many; an idle one is prepared', async () => {
    const busy = await rig({ engine: 'sglang', inFlight: 3 });
    await expect(prepareSleep(busy.h, 1, busy.probes)).rejects.toThrow('sleep refused: sglang must be idle to release its memory and holds 3 request(s); drain it first');
    expect(busy.engine.calls).toEqual([]);
    const idle = await rig({ engine: 'sglang', inFlight: 0 });
    expect((await prepareSleep(idle.h, 1, idle.probes)).before).toBe(AWAKE_MIB);
  });
});

describe('sleepShard', () => {
  it('says SLEEPING, records the sleep, asks the engine, and is told once its GPUs hold under half', async () => {
    const r = await rig({ engine: 'vllm' });
    await sleepShard(r.h, 2, r.probes);
    expect(r.engine.calls).toEqual(['/sleep?level=2']);
    expect([r.life().state, r.life().sleep]).toEqual([S.SLEEPING, { level: 2, awakeMib: AWAKE_MIB, memory: 'released' }]);
    expect(await recordedSleep(r.statePath)).toEqual({ sleepLevel: 2, sleepAwakeMib: AWAKE_MIB });
    expect(r.told()).toBe(1);
    expect(r.records.find((l) => l.msg === 'shard asleep: GPU memory released')).toMatchObject({ sleepLevel: 2, beforeMib: AWAKE_MIB, afterMib: ASLEEP_MIB });
  });

  it('undoes a sleep the engine refused: woken by its documented calls, READY with the reason, recorded awake', async () => {
    const r = await rig({ engine: 'vllm' });
    r.engine.failing.add('/sleep?level=2');
    await expect(sleepShard(r.h, 2, r.probes)).rejects.toThrow('sleep failed: POST /sleep?level=2 answered 500: out of memory');
    expect(r.engine.calls).toEqual(['/sleep?level=2', '/wake_up?tags=weights', '/collective_rpc', '/wake_up?tags=kv_cache']);
    expect([r.life().state, r.life().error, r.life().sleep]).toEqual([S.READY, 'sleep failed: POST /sleep?level=2 answered 500: out of memory', undefined]);
    expect(await recordedSleep(r.statePath)).toEqual(AWAKE);
  });

  it('never resumes an SGLang that did not release (its resume of held memory kills it), and lets its held requests run again', async () => {
    const r = await rig({ engine: 'sglang' });
    r.engine.failing.add('/release_memory_occupation');
    await expect(sleepShard(r.h, 1, r.probes)).rejects.toThrow(/^sleep failed: POST \/release_memory_occupation answered 500/);
    expect(r.engine.calls).toEqual(['/pause_generation', '/release_memory_occupation', '/continue_generation']);
    expect(r.life().state).toBe(S.READY);
  });

  it('is refused in one line for a shard not READY, the engine untouched', async () => {
    const r = await rig({ engine: 'vllm', life: newShardLife({ state: S.STARTING }) });
    await expect(sleepShard(r.h, 2, r.probes)).rejects.toThrow('sleep refused: shard s0 is STARTING; only a READY shard can sleep');
    expect(r.engine.calls).toEqual([]);
  });
});

describe('wakeShard', () => {
  it('wakes a level-2 sleep by its three calls, READY once its memory is back and it gives its known answer, recorded awake', async () => {
    const r = await rig({ engine: 'vllm' });
    await sleepShard(r.h, 2, r.probes);
    await wakeShard(r.h, r.probes);
    expect(r.engine.calls).toEqual(['/sleep?level=2', '/wake_up?tags=weights', '/collective_rpc', '/wake_up?tags=kv_cache']);
    expect([r.life().state, r.life().error, r.life().sleep]).toEqual([S.READY, '', undefined]);
    expect(await recordedSleep(r.statePath)).toEqual(AWAKE);
  });

  it('makes the shard FAILED, naming both answers, when it wakes answering otherwise (woken without its weights)', async () => {
    const r = await rig({ engine: 'vllm' });
    await sleepShard(r.h, 2, r.probes);
    r.engine.answer = '!!!!!!!!!!!!!!!!';
    await expect(wakeShard(r.h, r.probes)).rejects.toThrow(/^wake failed: shard s0 woke without its weights: /);
    expect(r.life().state).toBe(S.FAILED);
    expect(r.life().error).toMatch(/^woke without its weights: .*!!!!/);
    expect(r.life().lastOutput).toEqual(['loading weights']);
  });

  it('leaves the shard SLEEPING with the reason when it does not answer as at a start', async () => {
    const r = await rig({ engine: 'vllm', readiness: { ready: false, message: 'GET /health answered 503' } });
    await sleepShard(r.h, 2, r.probes);
    await expect(wakeShard(r.h, r.probes)).rejects.toThrow('wake failed: GET /health answered 503');
    expect([r.life().state, r.life().error]).toEqual([S.SLEEPING, 'wake failed: GET /health answered 503']);
    expect((await recordedSleep(r.statePath)).sleepLevel).toBe(2);
  });

  it('refuses a wake onto GPUs another process holds, the engine not asked', async () => {
    const r = await rig({ engine: 'vllm' });
    await sleepShard(r.h, 2, r.probes);
    const taken = async () => 'GPU 0 holds 30000 MiB of pid 4242, no shard';
    await expect(wakeShard(r.h, { ...r.probes, gpusTaken: taken })).rejects.toThrow('wake refused: GPU 0 holds 30000 MiB of pid 4242, no shard; shard s0 is left asleep: stop that process, then wake it');
    expect(r.engine.calls).toEqual(['/sleep?level=2']);
    expect(r.life().state).toBe(S.SLEEPING);
  });

  it('skips the resume of an SGLang recorded asleep that still holds its memory (never released); resumes one that released it', async () => {
    // Adopted SLEEPING from a state file: released as far as anyone knows (newShardLife).
    const adopted = () => newShardLife({ state: S.SLEEPING, sleepLevel: 1, awakeMib: AWAKE_MIB, knownAnswer: ANSWER });
    const held = await rig({ engine: 'sglang', life: adopted() });
    await wakeShard(held.h, held.probes);
    expect(held.engine.calls).toEqual(['/continue_generation']);
    expect(held.life().state).toBe(S.READY);
    expect(held.records.some((l) => String(l.msg).startsWith('shard recorded asleep still holds its GPU memory'))).toBe(true);

    const released = await rig({ engine: 'sglang', life: adopted() });
    released.engine.gpuMib = ASLEEP_MIB;
    await wakeShard(released.h, released.probes);
    expect(released.engine.calls).toEqual(['/resume_memory_occupation', '/continue_generation']);
    expect(released.life().state).toBe(S.READY);
  });
});
