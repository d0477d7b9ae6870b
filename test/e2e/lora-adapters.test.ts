import { join } from 'node:path';
import { create } from '@bufbuild/protobuf';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type AgentMessage, AdapterState, type Register, ModelPullState, SetAdaptersSchema, ShardState, type ShardStatus, type StartShard } from '../../src/gen/llmgw/v1/agent_pb.js';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { type AgentDirs, type AgentProcess, agentDirs, endAgentFixture, startAgentProcess } from '../helpers/agent-process.js';
import { doubleStart } from '../helpers/double-shards.js';
import { freePort } from '../helpers/engine-processes.js';
import { runCli } from '../helpers/run-cli.js';
import { isRegister, shardIs } from '../helpers/sim-shards.js';
import type { StartedControlPlane } from '../helpers/start-control-plane.js';
import { BASE, adapterOf, adaptersAre, ask, listed, lora, loraHub } from './lora-adapters-helpers.js';
import { prefetch, startStoreAgent } from '../helpers/store-agent.js';

/*
 * Issue 53 on the real agent with the vLLM double: adapters set by the
 * control plane (StartShard, SetAdapters) and by `ctl adapters`, pulled
 * into the node's store, loaded, proven by their own answers, unloaded, and
 * kept across an agent restart; bad sets refused in one line with the
 * engine untouched.
 */

const { LOADED, FAILED } = AdapterState;
const hub = loraHub();
let plane: StartedControlPlane;
let dirs: AgentDirs;
let agent: AgentProcess;
let yaml: string;
let v1Port = 0;

const set = (shardId: string, adapters: ReturnType<typeof lora>[]) => plane.cp.send('node-a', { case: 'setAdapters', value: create(SetAdaptersSchema, { shardId, adapters }) });
const status = async (p: Promise<AgentMessage>) => (await p).msg.value as ShardStatus;

async function startShard(id: string, gpu: number, adapters: ReturnType<typeof lora>[], args: string[] = [], maxAdapters = 4): Promise<{ port: number; ready: ShardStatus }> {
  const s: StartShard = doubleStart('vllm', id, await freePort(), { model: BASE, args, gpus: [gpu] });
  s.adapters = adapters;
  s.maxAdapters = maxAdapters;
  const ready = plane.cp.waitFor('node-a', shardIs(id, ShardState.READY, ShardState.FAILED), 60_000);
  plane.cp.send('node-a', { case: 'start', value: s });
  const r = await status(ready);
  expect([r.state, r.error], r.lastOutput.join('\n')).toEqual([ShardState.READY, '']);
  return { port: s.httpPort, ready: r };
}

beforeAll(async () => {
  await hub.start();
  ({ plane, dirs, agent, yaml } = await startStoreAgent(hub, agentDirs(mkdtempSync(join(tmpdir(), 'llmgw-lora-e2e-')))));
  expect((await prefetch(plane, BASE)).state).toBe(ModelPullState.DONE);
}, 90_000);

afterAll(async () => {
  await endAgentFixture({ agent, cp: plane, dirs });
  await hub.stop();
});

describe('LoRA adapters on the real agent (issue 53)', () => {
  it('pulls, loads and proves the StartShard\'s adapters, changes them by SetAdapters and ctl adapters, and unloads what is no longer desired', { timeout: 120_000 }, async () => {
    const loaded = plane.cp.waitFor('node-a', adaptersAre('v1', { a0: LOADED, a1: LOADED }), 60_000);
    const { port } = await startShard('v1', 0, [lora('a0', 'acme/lora-0'), lora('a1', 'acme/lora-1')]);
    v1Port = port;
    const s = await status(loaded);
    expect(adapterOf(s, 'a0')).toMatchObject({ repo: 'acme/lora-0', rank: 8, proven: true, reason: expect.stringMatching(/^proven: answers .* recorded as its answer/) });
    expect(adapterOf(s, 'a0')?.digest).toMatch(/^sha256:[0-9a-f]{64}$/);
    expect(adapterOf(s, 'a0')?.loadMs).toBeGreaterThan(0);
    expect(await listed(port)).toEqual(['a0', 'a1']);
    const [b, a0, a1] = [await ask(port, 'm'), await ask(port, 'a0'), await ask(port, 'a1')];
    expect([b.status, a0.status, a1.status]).toEqual([200, 200, 200]);
    expect(new Set([b.texts[0], a0.texts[0], a1.texts[0]]).size).toBe(3);

    const json = JSON.parse((await runCli(['ctl', 'adapters', 'v1', '--json', '--socket', dirs.socket])).stdout);
    expect(json).toMatchObject({ shardId: 'v1', maxAdapters: 4, maxAdapterRank: 16, desired: [{ name: 'a0' }, { name: 'a1' }] });
    expect(json.adapters.map((a: { name: string; state: string }) => `${a.name} ${a.state}`)).toEqual(['a0 ADAPTER_STATE_LOADED', 'a1 ADAPTER_STATE_LOADED']);
    expect((await runCli(['ctl', 'adapters', 'v1', '--socket', dirs.socket])).stdout).toMatch(/^a0 +acme\/lora-0@main +LOADED +8 /m);

    // ctl as the control plane would: unload one, load another (this one's bytes are recorded here, for the wrong-adapter test).
    const unloaded = await runCli(['ctl', 'adapters', 'v1', '--unload', 'a0', '--socket', dirs.socket]);
    expect(unloaded.stdout).not.toMatch(/^a0 /m);
    expect((await ask(port, 'a0')).status).toBe(404);
    const loadedByCtl = await runCli(['ctl', 'adapters', 'v1', '--load', 'a4=acme/lora-4', '--json', '--socket', dirs.socket]);
    expect(JSON.parse(loadedByCtl.stdout).adapters.map((a: { name: string; state: string }) => `${a.name} ${a.state}`)).toEqual(['a1 ADAPTER_STATE_LOADED', 'a4 ADAPTER_STATE_LOADED']);
    expect(agent.logs().some((l) => l.act === 'adapters --load' && l.shard === 'v1' && l.detail === 'a4=acme/lora-4@main' && typeof l.uid === 'number')).toBe(true);

    // A SetAdapters replacing the set: a1 unloaded, a2 loaded.
    const swapped = plane.cp.waitFor('node-a', adaptersAre('v1', { a2: LOADED, a4: LOADED }), 60_000);
    set('v1', [lora('a2', 'acme/lora-2'), lora('a4', 'acme/lora-4')]);
    await swapped;
    expect(await listed(port)).toEqual(['a2', 'a4']);
  });

  it('refuses a bad set in one line and leaves the engine as it was; fails an adapter of another base or rank without asking the engine', { timeout: 240_000 }, async () => {
    const port = (await startShard('v2', 1, [lora('b0', 'acme/lora-5')])).port;
    const before = await listed(port);
    for (const [adapters, why] of [
      [[lora('../x', 'acme/lora-0')], 'set_adapters refused: adapters[0].name "../x" is not an adapter name'],
      [[lora('b0', 'acme/lora-0'), lora('b0', 'acme/lora-1')], 'set_adapters refused: adapters[1].name b0 is listed twice'],
      [[lora('m', 'acme/lora-0')], "set_adapters refused: adapters[0].name m is the shard's own model name"],
      [[lora('b1', '../../etc/passwd')], 'set_adapters refused: adapters[0].repo "../../etc/passwd" is not a hub model id'],
      [[0, 1, 2, 3, 4].map((i) => lora(`c${i}`, `acme/lora-${i}`)), 'set_adapters refused: adapters lists 5; the engine holds 4 at once'],
    ] as const) {
      const refused = plane.cp.waitFor('node-a', (m) => m.msg.case === 'shard' && m.msg.value.shardId === 'v2' && m.msg.value.error !== '', 60_000);
      set('v2', [...adapters]);
      const s = await status(refused);
      expect(s.error.startsWith(why), s.error).toBe(true);
      expect(s.state).toBe(ShardState.READY);
      expect(s.adapters.map((a) => a.name)).toEqual(['b0']);
    }
    expect(await listed(port)).toEqual(before);
    const judged = plane.cp.waitFor('node-a', adaptersAre('v2', { b0: LOADED, other: FAILED, big: FAILED }), 60_000);
    set('v2', [lora('b0', 'acme/lora-5'), lora('other', 'acme/lora-other-base'), lora('big', 'acme/lora-r64')]);
    const s = await status(judged);
    expect(adapterOf(s, 'other')?.reason).toBe('adapter other is for base model "acme/other", not this shard\'s "acme/llama"; load it on a shard of its base');
    expect(adapterOf(s, 'big')?.reason).toContain("rank 64, above the shard's max_adapter_rank 16");
    expect(await listed(port)).toEqual(['b0']);
    // A start asking more than the engines take is refused before anything is launched.
    const bad = doubleStart('vllm', 'v3', await freePort(), { model: BASE, gpus: [3] });
    bad.maxAdapters = 65;
    const refused = plane.cp.waitFor('node-a', shardIs('v3', ShardState.FAILED), 60_000);
    plane.cp.send('node-a', { case: 'start', value: bad });
    expect((await status(refused)).error).toBe('shard v3: max_adapters 65 is above 64; ask for fewer adapters at once');
  });

  it('fails an adapter the engine answers with another\'s weights (vLLM #47724), naming both answers, never LOADED', { timeout: 180_000 }, async () => {
    // acme/lora-4's own answer was recorded on v1; this engine serves another loaded adapter under its name.
    const first = plane.cp.waitFor('node-a', adaptersAre('w1', { w0: LOADED }), 60_000);
    await startShard('w1', 2, [lora('w0', 'acme/lora-6')], ['--sim-lora-wrong-adapter']);
    await first;
    const judged = plane.cp.waitFor('node-a', adaptersAre('w1', { w0: LOADED, w4: FAILED }), 30_000);
    set('w1', [lora('w0', 'acme/lora-6'), lora('w4', 'acme/lora-4')]);
    const s = await status(judged);
    expect(adapterOf(s, 'w4')?.reason).toMatch(/^w4 answers ".*", where these bytes answered ".*" at their first load on this base \(base answers ".*"\): the engine serves other weights under its name$/);
  });

  it('an agent restarted under its engine finds the kept set loaded and proves it without loading it again; an adapter the engine lost is loaded back', { timeout: 120_000 }, async () => {
    await agent.stop();
    const registered = plane.cp.waitFor('node-a', isRegister, 30_000);
    const proven = plane.cp.waitFor('node-a', adaptersAre('v1', { a2: LOADED, a4: LOADED }), 60_000);
    proven.catch(() => {});
    const t0 = performance.now();
    agent = startAgentProcess({ server: plane.url, dirs, extraYaml: yaml });
    // The adopted engine is judged before the first Register, which may carry its adapters proven already (RunningShard.adapters).
    const running = ((await registered).msg.value as Register).runningShards.find((r) => r.shardId === 'v1');
    const inRegister = running && adaptersAre('v1', { a2: LOADED, a4: LOADED })({ messageId: 0n, msg: { case: 'shard', value: running as unknown as ShardStatus } } as AgentMessage);
    const s = inRegister ? (running as unknown as ShardStatus) : await status(proven);
    console.log(`adapters of the adopted shard proven ${Math.round(performance.now() - t0)} ms after the agent's start (in Register: ${inRegister})`);
    expect(s.adapters.map((a) => [a.name, a.loadMs])).toEqual([['a2', 0], ['a4', 0]]);
    expect(adapterOf(s, 'a4')?.reason).toMatch(/^proven: gives its recorded answer/);
    // The engine loses one (as a restart behind the agent's back does): loaded back without the control plane.
    const port = v1Port;
    const back = plane.cp.waitFor('node-a', (m) => adaptersAre('v1', { a2: LOADED, a4: LOADED })(m) && (adapterOf(m.msg.value as ShardStatus, 'a2')?.loadMs ?? 0) > 0, 30_000);
    const t1 = performance.now();
    const r = await fetch(`http://127.0.0.1:${port}/v1/unload_lora_adapter`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ lora_name: 'a2' }) });
    expect(r.status).toBe(200);
    await back;
    console.log(`an adapter the engine lost was loaded back and proven in ${Math.round(performance.now() - t1)} ms`);
    expect(await listed(port)).toEqual(['a2', 'a4']);
  });
});
