import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { create } from '@bufbuild/protobuf';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type AgentMessage, AdapterState, type ModelPull, ModelPullState, PrefetchModelSchema, SetAdaptersSchema, ShardState, type ShardStatus } from '../../src/gen/llmgw/v1/agent_pb.js';
import { type AgentDirs, type AgentProcess, agentDirs, endAgentFixture, startAgentProcess } from '../helpers/agent-process.js';
import { adapterConfigText, fakeAdapterRepo } from '../helpers/fake-adapter-repo.js';
import { DOUBLE_ENGINES_YAML, doubleStart } from '../helpers/double-shards.js';
import { freePort } from '../helpers/engine-processes.js';
import { AdapterDirs } from '../helpers/lora-adapters.js';
import { isRegister, shardIs } from '../helpers/sim-shards.js';
import { type StartedControlPlane, startControlPlane } from '../helpers/start-control-plane.js';
import { BASE, adapterOf, adaptersAre, ask, listed, lora, loraHub } from './lora-adapters-helpers.js';

/*
 * Issue 53's proof on the real agent with the doubles: the adapter's own
 * recorded answer is the reference. An adapter that agrees with its base
 * (zero weights) is LOADED, never FAILED, at its first load and after a
 * real engine restart; one the engine loads in name only (vLLM #9688), one
 * served another adapter's weights through a stale runtime id (vLLM
 * #12199) and one whose reused name keeps the old buffer (SGLang #8263) are
 * FAILED with both answers. And the set is back, proven, after the engine
 * process is killed and the shard relaunched.
 */

const { LOADED, FAILED } = AdapterState;
const hub = loraHub(4);
hub.repos.set('acme/lora-zero', fakeAdapterRepo('acme/lora-zero', { base: BASE, rank: 8, weights: Buffer.alloc(4_000) }));
hub.repos.set('acme/lora-dora', fakeAdapterRepo('acme/lora-dora', { config: adapterConfigText(BASE, 8, { use_dora: true }), weights: Buffer.alloc(4_000, 3) }));
const folders = new AdapterDirs();
let plane: StartedControlPlane;
let dirs: AgentDirs;
let agent: AgentProcess;

const FIRST = [lora('z', 'acme/lora-zero'), lora('a0', 'acme/lora-0'), lora('a1', 'acme/lora-1')];
const status = async (p: Promise<AgentMessage>) => (await p).msg.value as ShardStatus;
const readyWith = (id: string, want: Record<string, AdapterState>) => (m: AgentMessage) => m.msg.case === 'shard' && m.msg.value.state === ShardState.READY && adaptersAre(id, want)(m);

async function start(engine: 'vllm' | 'sglang', id: string, port: number, gpu: number, adapters: ReturnType<typeof lora>[], args: string[] = []): Promise<{ ready: ShardStatus; readyAt: number }> {
  const s = doubleStart(engine, id, port, { model: BASE, gpus: [gpu], args });
  s.adapters = adapters;
  s.maxAdapters = 4;
  const ready = plane.cp.waitFor('node-a', shardIs(id, ShardState.READY, ShardState.FAILED), 60_000);
  plane.cp.send('node-a', { case: 'start', value: s });
  const r = await status(ready);
  const readyAt = performance.now();
  expect([r.state, r.error], r.lastOutput.join('\n')).toEqual([ShardState.READY, '']);
  return { ready: r, readyAt };
}

/** Kills the shard's engine process (SIGKILL) and waits for the agent to report it ended. */
async function killEngine(id: string, pid: number): Promise<void> {
  const ended = plane.cp.waitFor('node-a', shardIs(id, ShardState.FAILED, ShardState.EXITED), 30_000);
  process.kill(pid, 'SIGKILL');
  await ended;
}

beforeAll(async () => {
  await hub.start();
  plane = await startControlPlane();
  dirs = agentDirs(mkdtempSync(join(tmpdir(), 'llmgw-lora-proof-')));
  // --lora-modules opens files on the node: the operator lets it (engines.vllm.allowed_args), for the #12199 test.
  const engines = DOUBLE_ENGINES_YAML.replace('  vllm:\n', '  vllm:\n    allowed_args: [--lora-modules]\n');
  expect(engines).not.toBe(DOUBLE_ENGINES_YAML);
  const yaml = `models:\n  cache_dir: ${join(dirs.root, 'models')}\n  budget: 64MiB\n  hub:\n    endpoint: ${hub.url}\n${engines}`;
  const registered = plane.cp.waitFor('node-a', isRegister, 30_000);
  agent = startAgentProcess({ server: plane.url, dirs, extraYaml: yaml });
  await registered;
  const pulled = plane.cp.waitFor('node-a', (m) => m.msg.case === 'modelPull' && m.msg.value.repo === BASE && m.msg.value.state >= ModelPullState.DONE, 30_000);
  plane.cp.send('node-a', { case: 'prefetch', value: create(PrefetchModelSchema, { repo: BASE }) });
  expect(((await pulled).msg.value as ModelPull).state).toBe(ModelPullState.DONE);
}, 90_000);

afterAll(async () => {
  await endAgentFixture({ agent, cp: plane, dirs });
  await hub.stop();
  folders.cleanup();
});

describe('each adapter proven by its own recorded answer (issue 53)', () => {
  it('an adapter that agrees with its base is LOADED at its first load and after a real engine restart; the set is proven again after the restart; the same engine loading in name only (vLLM #9688) fails the others with both answers', { timeout: 180_000 }, async () => {
    const port = await freePort();
    const proven = plane.cp.waitFor('node-a', readyWith('p1', { z: LOADED, a0: LOADED, a1: LOADED }), 60_000);
    proven.catch(() => {});
    const { ready } = await start('vllm', 'p1', port, 0, FIRST);
    const s = await status(proven);
    expect(adapterOf(s, 'z')?.reason).toMatch(/^proven: answers ".*", as its base does \(an adapter may agree with its base on a prompt; the engine refuses a name it never loaded\); recorded as its answer$/);
    expect((await ask(port, 'z')).texts).toEqual((await ask(port, 'm')).texts);
    expect(adapterOf(s, 'a0')?.reason).toMatch(/^proven: answers .* recorded as its answer$/);

    // The engine process dies; the control plane relaunches the shard (its restart path: a StartShard under the same id).
    await killEngine('p1', ready.pid);
    const killedAt = performance.now();
    const back = plane.cp.waitFor('node-a', readyWith('p1', { z: LOADED, a0: LOADED, a1: LOADED }), 60_000);
    back.catch(() => {});
    const again = await start('vllm', 'p1', port, 0, FIRST);
    const b = await status(back);
    const provenAt = performance.now();
    console.log(`engine restart: the set of 3 proven ${Math.round(provenAt - again.readyAt)} ms after the relaunched engine's READY (${Math.round(provenAt - killedAt)} ms after the kill, the engine's own start included)`);
    expect(b.adapters.every((a) => a.loadMs > 0)).toBe(true);
    expect(adapterOf(b, 'z')?.reason).toBe(`proven: gives its recorded answer ${JSON.stringify(adapterOf(s, 'z')?.reason.match(/^proven: answers "(.*?)"/)?.[1])} (base: the same, as at its first load)`);
    expect(await listed(port)).toEqual(['a0', 'a1', 'z']);

    // Relaunched on an engine that loads adapters in name only: a0 and a1 FAILED naming both answers; z, which agrees with its base, still LOADED.
    await killEngine('p1', again.ready.pid);
    const judged = plane.cp.waitFor('node-a', readyWith('p1', { z: LOADED, a0: FAILED, a1: FAILED }), 60_000);
    judged.catch(() => {});
    await start('vllm', 'p1', port, 0, FIRST, ['--sim-lora-not-applied']);
    const j = await status(judged);
    expect(adapterOf(j, 'a0')?.reason).toMatch(/^a0 answers "[^"]*", as the base model does, where these bytes answered "[^"]*~[^"]*" at their first load on this base: the engine is not applying it; unload and load it again$/);
    expect(adapterOf(j, 'z')?.proven).toBe(true);
  });

  it('a runtime load served another adapter\'s weights through a stale id (vLLM #12199) is FAILED with both answers', { timeout: 90_000 }, async () => {
    // acme/lora-1's answer was recorded on p1. Here --lora-modules' s0 holds id 1; the agent unloads s0 (not desired), the worker keeps it, and a1 gets id 1 again.
    const s0 = folders.make('s0', 8, BASE);
    const judged = plane.cp.waitFor('node-a', readyWith('p2', { a1: FAILED }), 60_000);
    judged.catch(() => {});
    const { ready } = await start('vllm', 'p2', await freePort(), 1, [lora('a1', 'acme/lora-1')], ['--lora-modules', `s0=${s0}`, '--sim-lora-stale-id']);
    expect(ready.error).toBe('');
    const j = await status(judged);
    expect(adapterOf(j, 'a1')?.reason).toMatch(/^a1 answers "[^"]*", where these bytes answered "[^"]*" at their first load on this base \(base answers "[^"]*"\): the engine serves other weights under its name$/);
  });

  it('a name reused for new weights that keeps the old buffer (SGLang #8263) is FAILED with both answers; distinct names on the same engine are each proven (look-alike); a DoRA adapter FAILED before the engine is asked', { timeout: 90_000 }, async () => {
    const id = 'p3';
    const both = plane.cp.waitFor('node-a', readyWith(id, { t: LOADED, u: LOADED }), 60_000);
    both.catch(() => {});
    const port = await freePort();
    await start('sglang', id, port, 2, [lora('t', 'acme/lora-2'), lora('u', 'acme/lora-3')], ['--sim-lora-name-keyed-pool']);
    await status(both);
    const judged = plane.cp.waitFor('node-a', adaptersAre(id, { u: FAILED }), 60_000);
    plane.cp.send('node-a', { case: 'setAdapters', value: create(SetAdaptersSchema, { shardId: id, adapters: [lora('u', 'acme/lora-2')] }) });
    const j = await status(judged);
    expect(adapterOf(j, 'u')?.repo).toBe('acme/lora-2');
    // A DoRA adapter, which SGLang refuses (lora_manager.py:279-283): FAILED in one line, the engine never asked.
    const dora = plane.cp.waitFor('node-a', adaptersAre(id, { d: FAILED }), 60_000);
    plane.cp.send('node-a', { case: 'setAdapters', value: create(SetAdaptersSchema, { shardId: id, adapters: [lora('d', 'acme/lora-dora')] }) });
    expect(adapterOf(await status(dora), 'd')?.reason).toBe("adapter d (acme/lora-dora) cannot be loaded by sglang: LoRA serving currently doesn't support DoRA adapters (use_dora); use an adapter without it (merge or convert it to plain LoRA)");
    // (Asked, the reason would be the engine's: "the engine refused the load: …".)
    expect(await listed(port)).toEqual([]);
    expect(adapterOf(j, 'u')?.reason).toMatch(/^u answers "[^"]*", where these bytes answered "[^"]*" at their first load on this base \(base answers "[^"]*"\): the engine serves other weights under its name$/);
  });
});
