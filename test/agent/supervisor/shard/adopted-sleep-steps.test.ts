import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { create } from '@bufbuild/protobuf';
import { afterEach, describe, expect, it } from 'vitest';
import { statusFromSnapshot } from '../../../../src/agent/connection/shard-report.js';
import { SGLANG_SLEEP_API } from '../../../../src/agent/engines/sglang/sglang-sleep.js';
import { VLLM_SLEEP_API } from '../../../../src/agent/engines/vllm/vllm-sleep.js';
import { type AdoptedSleepHands, adoptedSleep } from '../../../../src/agent/supervisor/shard/adopted-sleep-steps.js';
import { ShardEngineFacts } from '../../../../src/agent/supervisor/shard/shard-engine-facts.js';
import { newShardLife, nextShard, type ShardLife } from '../../../../src/agent/supervisor/shard/shard-machine.js';
import { StateFileWriter } from '../../../../src/agent/supervisor/shard/state-file-writer.js';
import { ShardState, StartShardSchema } from '../../../../src/gen/llmgw/v1/agent_pb.js';
import { writeStateFile } from '../../../../src/lib/files/state-file.js';
import { parseShardId } from '../../../../src/lib/shard-id.js';
import { captureLogger } from '../../../helpers/capture-logger.js';
import { sampleStateFile } from '../../../helpers/sample-state-file.js';
import { shardSnapshot } from '../../../helpers/shard-snapshot.js';

/*
 * An adoption's sleep check (adopted-sleep-steps.ts) on hands built as the
 * runner builds them: the real machine, a real state file, the engine a real
 * HTTP server on a real socket. vLLM's answers are its /is_sleeping and
 * engine_sleep_state gauges (V:vllm/entrypoints/serve/dev/sleep/api_router.py:45-48;
 * V:vllm/v1/metrics/loggers.py:1261-1278 at 2f41c894); without
 * VLLM_SERVER_DEV_MODE, or on a vLLM before the route, /is_sleeping is
 * FastAPI's 404. SGLang answers nothing that says whether its memory is
 * released (docs/engines.md, "The engine's word over the state file"), so it
 * is asked nothing.
 *
 * What the control plane is told is read at each told(), as the status
 * reporter reads it (statusFromSnapshot): Register went out with the file's
 * word, and a correction must follow as soon as the engine has answered.
 */

const S = ShardState;
const cleanups: (() => void)[] = [];
afterEach(() => {
  for (const c of cleanups.splice(0).reverse()) c();
});

/** What the engine answers /is_sleeping: a body (200), a status and body, or held until `release` is called. */
type Answer = { body: string; status?: number; gauges?: string } | 'held';

/** An engine on a real socket; records every path asked. A held answer waits for release(body). */
async function engine(answer: Answer) {
  const seen: string[] = [];
  let held: ((body: string) => void) | undefined;
  let asked: () => void = () => {};
  const askedOnce = new Promise<void>((r) => (asked = r));
  const server = createServer((req, res) => {
    seen.push(req.url ?? '');
    if (req.url === '/metrics') return void res.end(answer === 'held' ? '' : (answer.gauges ?? ''));
    if (req.url !== '/is_sleeping') return void res.writeHead(404, { 'content-type': 'application/json' }).end('{"detail":"Not Found"}');
    asked();
    if (answer === 'held') {
      held = (body) => res.writeHead(200, { 'content-type': 'application/json' }).end(body);
      return;
    }
    res.writeHead(answer.status ?? 200, { 'content-type': 'application/json' }).end(answer.body);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  cleanups.push(() => {
    server.closeAllConnections();
    server.close();
  });
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, seen, askedOnce, release: (body: string) => held?.(body) };
}

/** engine_sleep_state as vLLM exports it after a sleep at level 1. */
const LEVEL_1 = ['awake 0.0', 'weights_offloaded 1.0', 'discard_all 0.0']
  .map((l) => `vllm:engine_sleep_state{engine="0",model_name="m",sleep_state="${l.split(' ')[0]}"} ${l.split(' ')[1]}\n`)
  .join('');

/** Hands for an adopted shard s0 of `engine`, STARTING, recorded asleep at `recorded` (0: awake). */
async function rig(engineName: 'vllm' | 'sglang', url: string, recorded: 0 | 1 | 2) {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-adopted-sleep-'));
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  const statePath = join(dir, 's0.json');
  await writeStateFile(statePath, { ...sampleStateFile(), ...(recorded ? { sleepLevel: recorded } : {}) });
  const { logger, records } = captureLogger();
  const stateFile = new StateFileWriter(statePath, parseShardId('s0'), logger);
  const fields = { shard: 's0', replica: 'r0' };
  const facts = new ShardEngineFacts({ engine: engineName, baseUrl: url, apiKey: '', stateFile, log: logger, fields, pid: process.pid }, {});
  let life = (nextShard(newShardLife({ sleepLevel: recorded }), { kind: 'begin', why: 'adopted' }) as { life: ShardLife }).life;
  const spec = create(StartShardSchema, { shardId: 's0', replicaId: 'r0', gpuIndices: [0], profile: { name: 'p1', engine: engineName, sleepMode: true } });
  /** What the control plane was told at each told(), and the state file's sleepLevel then. */
  const told: { state: ShardState; fileLevel: number }[] = [];
  /** The state the control plane hears for the shard as it is now (the status reporter's view). */
  const heard = () => statusFromSnapshot('n', shardSnapshot('s0', { spec, state: life.state, sleepLevel: life.sleep?.level ?? 0 })).state;
  const h: AdoptedSleepHands = {
    spec,
    fields,
    baseUrl: url,
    adminKey: '',
    log: logger,
    stateFile,
    sleepApi: engineName === 'vllm' ? VLLM_SLEEP_API : SGLANG_SLEEP_API,
    checksAnswers: true,
    facts,
    life: () => life,
    apply: (c) => {
      const next = nextShard(life, c, 's0');
      if (!('refused' in next)) life = next.life;
      return next;
    },
    told: () => told.push({ state: heard(), fileLevel: (JSON.parse(readFileSync(statePath, 'utf8')) as { sleepLevel?: number }).sleepLevel ?? 0 }),
    target: (signal) => ({ baseUrl: url, model: 'm', apiKey: '', signal }),
  };
  const fromFile = () => records.filter((r) => r.msg === 'adopted engine: sleep taken from its state file');
  return { h, told, heard, records, fromFile, life: () => life, note: () => facts.sleepNote(life.sleep) };
}

const signal = () => new AbortController().signal;

describe('an adopted vLLM engine asked whether it sleeps', () => {
  it('recorded asleep, awake: awake from here, and STARTING told at once, over the SLEEPING its Register said', async () => {
    const e = await engine({ body: '{"is_sleeping": false}' });
    const r = await rig('vllm', e.url, 1);
    expect(r.heard()).toBe(S.SLEEPING);
    expect(await adoptedSleep(r.h, signal())).toBe(true);
    expect(r.life().sleep).toBeUndefined();
    expect(r.told).toEqual([{ state: S.STARTING, fileLevel: 1 }]);
    expect(r.note()).toBe('');
  });

  it('recorded awake, asleep: SLEEPING told at once at the level its gauges name, the state file saying so first', async () => {
    const e = await engine({ body: '{"is_sleeping": true}', gauges: LEVEL_1 });
    const r = await rig('vllm', e.url, 0);
    expect(r.heard()).toBe(S.STARTING);
    expect(await adoptedSleep(r.h, signal())).toBe(false);
    expect(r.told).toEqual([{ state: S.SLEEPING, fileLevel: 1 }]);
    expect(r.note()).toBe('');
  });

  it('its word agreeing with the file (asleep and asleep, awake and awake): nothing told, nothing noted', async () => {
    const asleep = await engine({ body: '{"is_sleeping": true}', gauges: LEVEL_1 });
    const a = await rig('vllm', asleep.url, 1);
    expect(await adoptedSleep(a.h, signal())).toBe(false);
    expect(a.told).toEqual([]);
    expect(a.note()).toBe('');
    expect(a.fromFile()).toEqual([]);
    const awake = await engine({ body: '{"is_sleeping": false}' });
    const b = await rig('vllm', awake.url, 0);
    expect(await adoptedSleep(b.h, signal())).toBe(false);
    expect(b.told).toEqual([]);
    expect(b.fromFile()).toEqual([]);
  });

  it('an answer held behind a running call is waited for, never read as awake meanwhile, and taken when it comes', async () => {
    const e = await engine('held');
    const r = await rig('vllm', e.url, 1);
    const asking = adoptedSleep(r.h, signal());
    await e.askedOnce;
    // Asked and not answered: still asleep by its record, nothing told.
    expect(r.life().sleep?.level).toBe(1);
    expect(r.told).toEqual([]);
    e.release('{"is_sleeping": true}');
    expect(await asking).toBe(false);
    expect(r.life().sleep?.level).toBe(1);
    expect(r.told).toEqual([]);
  });

  it('no route (a vLLM without dev mode or before /is_sleeping) or garbage: the record, logged and noted as the file\'s word', async () => {
    for (const answer of [{ status: 404, body: '{"detail":"Not Found"}' }, { body: '<html>busy</html>' }, { body: '{"is_sleeping": "yes"}' }]) {
      const e = await engine(answer);
      const r = await rig('vllm', e.url, 2);
      expect(await adoptedSleep(r.h, signal()), answer.body).toBe(false);
      expect(r.life().sleep?.level).toBe(2);
      expect(r.told).toEqual([]);
      expect(r.fromFile()[0]?.why).toMatch(/did not say whether it sleeps/);
      expect(r.note()).toMatch(/^asleep at level 2 by its state file only: the engine did not say whether it sleeps \(GET \/is_sleeping/);
    }
  });
});

describe('an adopted SGLang engine, which answers nothing that says whether its memory is released', () => {
  it('recorded asleep: asked nothing, SLEEPING by its file, and the log and Status note say it is the file\'s word', async () => {
    const e = await engine({ status: 404, body: '{"detail":"Not Found"}' });
    const r = await rig('sglang', e.url, 1);
    expect(await adoptedSleep(r.h, signal())).toBe(false);
    expect(e.seen).toEqual([]);
    expect(r.told).toEqual([]);
    expect(r.heard()).toBe(S.SLEEPING);
    expect(r.fromFile()).toMatchObject([{ recordedLevel: 1, why: 'sglang answers nothing that says whether its memory is released' }]);
    expect(r.note()).toBe('asleep at level 1 by its state file only: sglang answers nothing that says whether its memory is released');
    // Settled SLEEPING it is still that sleep; the agent's own wake makes the next word its own.
    r.h.apply({ kind: 'answered', why: 'answers /metrics' });
    expect(r.life().state).toBe(S.SLEEPING);
    expect(r.note()).toMatch(/by its state file only/);
    r.h.apply({ kind: 'resumed' });
    expect(r.note()).toBe('');
  });

  it('recorded awake: asked nothing, logged as the file\'s word, no note on a shard that is not asleep', async () => {
    const e = await engine({ status: 404, body: '{"detail":"Not Found"}' });
    const r = await rig('sglang', e.url, 0);
    expect(await adoptedSleep(r.h, signal())).toBe(false);
    expect(e.seen).toEqual([]);
    expect(r.fromFile()).toMatchObject([{ recordedLevel: 0 }]);
    expect(r.note()).toBe('');
  });
});
