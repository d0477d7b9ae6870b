import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { create } from '@bufbuild/protobuf';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type AgentMessage, AdapterState, ModelPullState, SetAdaptersSchema, ShardState, type ShardStatus } from '../../src/gen/llmgw/v1/agent_pb.js';
import { type AgentDirs, type AgentProcess, agentDirs, endAgentFixture } from '../helpers/agent-process.js';
import { doubleStart } from '../helpers/double-shards.js';
import { freePort, until } from '../helpers/engine-processes.js';
import { shardIs } from '../helpers/sim-shards.js';
import type { StartedControlPlane } from '../helpers/start-control-plane.js';
import { BASE, adapterOf, adaptersAre, ask, lora, loraHub } from './lora-adapters-helpers.js';
import { prefetch, startStoreAgent } from '../helpers/store-agent.js';

/*
 * Issue 53's acceptance on the real agent with the doubles: load/unload
 * cycles over 8 adapters under concurrent traffic (n > 1 included), with
 * 0 wrong-adapter answers served as loaded and 0 requests failed by an
 * unload; and SGLang's deadlock after an unload following n > 1 traffic
 * (SGLang #36894) reported within 5 s. LLMGW_LORA_CHURN_CYCLES sets the
 * cycles (1,000 in the issue; fewer here, the suite's time being shared).
 */

const CYCLES = Number(process.env.LLMGW_LORA_CHURN_CYCLES ?? 60);
const { LOADED, FAILED } = AdapterState;
const hub = loraHub(8);
let plane: StartedControlPlane;
let dirs: AgentDirs;
let agent: AgentProcess;

const send = (shardId: string, names: number[]) =>
  plane.cp.send('node-a', { case: 'setAdapters', value: create(SetAdaptersSchema, { shardId, adapters: names.map((i) => lora(`t${i}`, `acme/lora-${i}`)) }) });
const want = (names: number[]) => Object.fromEntries(names.map((i) => [`t${i}`, LOADED]));

async function start(engine: 'vllm' | 'sglang', id: string, gpu: number, maxAdapters: number): Promise<number> {
  const s = doubleStart(engine, id, await freePort(), { model: BASE, gpus: [gpu], args: ['--sim-token-latency', '5ms'] });
  s.maxAdapters = maxAdapters;
  const ready = plane.cp.waitFor('node-a', shardIs(id, ShardState.READY, ShardState.FAILED), 60_000);
  plane.cp.send('node-a', { case: 'start', value: s });
  const r = (await ready).msg.value as ShardStatus;
  expect([r.state, r.error], r.lastOutput.join('\n')).toEqual([ShardState.READY, '']);
  return s.httpPort;
}

beforeAll(async () => {
  await hub.start();
  ({ plane, dirs, agent } = await startStoreAgent(hub, agentDirs(mkdtempSync(join(tmpdir(), 'llmgw-lora-churn-')))));
  expect((await prefetch(plane, BASE)).state).toBe(ModelPullState.DONE);
}, 90_000);

afterAll(async () => {
  await endAgentFixture({ agent, cp: plane, dirs });
  await hub.stop();
});

describe('adapters under churn (issue 53 acceptance)', () => {
  it(`${CYCLES} load/unload cycles over 8 adapters under concurrent traffic: no wrong answer from a loaded adapter, no request failed by an unload`, { timeout: 30_000 + CYCLES * 2_000 }, async () => {
    const port = await start('vllm', 'c1', 0, 4);
    // The router's view: adapters it may send to (desired and LOADED); one leaving is taken out before the set that drops it is sent.
    const routable = new Set<string>();
    const expected = new Map<string, string>();
    const tally = { requests: 0, wrong: [] as string[], failed: [] as string[], n2: 0 };
    const answered = new Set<number>();
    let stop = false;
    const worker = async (w: number) => {
      for (let k = 0; !stop; k++) {
        const names = [...routable];
        if (names.length === 0) {
          await new Promise((r) => setTimeout(r, 5));
          continue;
        }
        const name = names[(k * 7 + w) % names.length] as string;
        const n = k % 3 === 0 ? 2 : 1;
        if (n === 2) tally.n2++;
        const r = await ask(port, name, n);
        tally.requests++;
        answered.add(w);
        if (r.status !== 200) tally.failed.push(`${name}: ${r.status}`);
        for (const text of r.texts) {
          const first = expected.get(name) ?? text;
          expected.set(name, first);
          if (text !== first) tally.wrong.push(`${name}: ${JSON.stringify(text)} after ${JSON.stringify(first)}`);
        }
      }
    };
    let current: number[] = [0, 1, 2, 3];
    const first = plane.cp.waitFor('node-a', adaptersAre('c1', want(current)), 60_000);
    send('c1', current);
    await first;
    for (const i of current) routable.add(`t${i}`);
    const workers = [0, 1, 2, 3].map(worker);
    // Every worker answered once before the first set that drops an adapter: started in the same tick as that set,
    // a first request (its connection still opening) reached the engine after the agent's drain read no request
    // naming t0, and got 404 (1 run in a sweep at load 12). The drain sees requests the engine has, not ones on the way.
    await until(() => answered.size === 4, 'a first answer for each worker', 30_000);
    const t0 = performance.now();
    const cycleMs: number[] = [];
    const loadMs: number[] = [];
    for (let c = 0; c < CYCLES; c++) {
      const tc = performance.now();
      const out = current[0] as number;
      const next = [...current.slice(1), (out + 4) % 8];
      routable.delete(`t${out}`);
      const done = plane.cp.waitFor('node-a', adaptersAre('c1', want(next)), 30_000);
      send('c1', next);
      const s = (await done).msg.value as ShardStatus;
      const incoming = `t${next[3]}`;
      expect(adapterOf(s, incoming)?.proven).toBe(true);
      cycleMs.push(performance.now() - tc);
      loadMs.push(adapterOf(s, incoming)?.loadMs ?? 0);
      routable.add(incoming);
      current = next;
    }
    const ms = performance.now() - t0;
    stop = true;
    await Promise.all(workers);
    const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? 0;
    console.log(`set to proven: median ${Math.round(median(cycleMs))} ms a cycle (SetAdapters sent to every adapter LOADED and proven, the outgoing one drained and unloaded), the engine's own load call median ${median(loadMs)} ms`);
    console.log(`${CYCLES} cycles in ${Math.round(ms)} ms (${Math.round(ms / CYCLES)} ms a cycle: unload drained, load, proof); ${tally.requests} requests (${tally.n2} with n=2), ${tally.wrong.length} wrong, ${tally.failed.length} failed`);
    expect(tally.requests).toBeGreaterThan(CYCLES);
    expect(tally.wrong).toEqual([]);
    expect(tally.failed).toEqual([]);
    expect(new Set(expected.values()).size).toBe(8);
  });

  it('the SGLang deadlock after an unload that follows n > 1 traffic (SGLang #36894) is reported within 5 s', { timeout: 90_000 }, async () => {
    const port = await start('sglang', 'g1', 1, 2);
    const loaded = plane.cp.waitFor('node-a', adaptersAre('g1', want([0])), 60_000);
    send('g1', [0]);
    await loaded;
    // n > 1 on the adapter: SGLang releases its counter once more than it acquired it.
    expect((await ask(port, 'm:t0', 2)).status).toBe(200);
    const stalled = plane.cp.waitFor('node-a', (m: AgentMessage) => m.msg.case === 'shard' && m.msg.value.shardId === 'g1' && adapterOf(m.msg.value, 't0')?.state === FAILED && /stalled/.test(adapterOf(m.msg.value, 't0')?.reason ?? ''), 30_000);
    send('g1', []);
    // Traffic that now waits for ever: what the watch sees.
    await new Promise((r) => setTimeout(r, 200));
    const t0 = performance.now();
    const waiting = ask(port, 'm', 1).catch(() => undefined);
    const s = ((await stalled.catch((err) => {
      console.log(agent.logs().filter((l) => l.shard === 'g1' && l.msg !== 'health probe verdict').slice(-25).map((l) => JSON.stringify(l)).join('\n'));
      console.log(JSON.stringify(plane.cp.messages('node-a').filter((m) => m.msg.case === 'shard' && m.msg.value.shardId === 'g1').slice(-3).map((m) => m.msg.value), (_, v) => (typeof v === 'bigint' ? String(v) : v)));
      throw err;
    })).msg.value as ShardStatus);
    const ms = performance.now() - t0;
    console.log(`post-unload stall reported ${Math.round(ms)} ms after a request began waiting: ${adapterOf(s, 't0')?.reason}`);
    expect(adapterOf(s, 't0')?.reason).toMatch(/^the engine stalled: .*a one-token completion had no answer in 3 s and no token was generated since adapter t0's unload was asked \(SGLang #36894's deadlock\); restart the shard$/);
    expect(s.error).toContain("since adapter t0's unload was asked");
    // The 5 s is what the watch is built for (a 3 s one-token ask; 2.8 s measured at load 20) and what
    // the log above reports; asserted here as a safety net that a watch which never fires still fails.
    expect(ms).toBeLessThan(15_000);
    void waiting;
  });
});
