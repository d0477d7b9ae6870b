/**
 * `--only 17` (issue 53): the time from a desired set of adapters to every
 * one of them proven LOADED on the stream, beside the engine's own load
 * calls. The real agent, the vLLM double, 8 adapters of one base from the
 * fake hub: the first set pulls them into the store (verified, as any pull),
 * the later ones load them from the store after an empty set unloaded them.
 * A set is timed from the SetAdapters sent to the first ShardStatus whose 8
 * adapters are LOADED and proven (the agent asked each by its name and
 * compared with its recorded answer, and the base's answer unchanged).
 */
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { create } from '@bufbuild/protobuf';
import { type AgentMessage, AdapterState, type ModelPull, ModelPullState, PrefetchModelSchema, SetAdaptersSchema, ShardState, type ShardStatus } from '../src/gen/llmgw/v1/agent_pb.js';
import { DOUBLE_ENGINES_YAML, doubleStart } from '../test/helpers/double-shards.js';
import { isRegister, shardIs } from '../test/helpers/sim-shards.js';
import { BASE, adaptersAre, lora, loraHub } from '../test/e2e/lora-adapters-helpers.js';
import { controlPlane, freePort, median, newRoot, spawnAgent } from './bench-support.js';
import { ms } from './command-timing.js';
import type { BenchRow } from './fleet-figure.js';

const ADAPTERS = 8;

export async function adapterSetFigure(rows: BenchRow[], notes: string[], quick: boolean): Promise<void> {
  const hub = loraHub(ADAPTERS);
  await hub.start();
  try {
    const { cp, url } = await controlPlane();
    const dirs = newRoot('f17');
    const cacheDir = join(dirs.root, 'models');
    mkdirSync(cacheDir, { recursive: true });
    spawnAgent(url, dirs, { extraYaml: `${DOUBLE_ENGINES_YAML}models:\n  cache_dir: ${cacheDir}\n  budget: 64MiB\n  hub:\n    endpoint: ${hub.url}\n` });
    await cp.waitFor('node-a', isRegister, 30_000);
    const pulled = cp.waitFor('node-a', (m) => m.msg.case === 'modelPull' && m.msg.value.repo === BASE && m.msg.value.state >= ModelPullState.DONE, 60_000);
    cp.send('node-a', { case: 'prefetch', value: create(PrefetchModelSchema, { repo: BASE }) });
    const pull = (await pulled).msg.value as ModelPull;
    if (pull.state !== ModelPullState.DONE) throw new Error(`the base model's pull failed: ${pull.error}`);

    const start = doubleStart('vllm', 'a1', await freePort(), { model: BASE, gpus: [0] });
    start.maxAdapters = ADAPTERS;
    const ready = cp.waitFor('node-a', shardIs('a1', ShardState.READY, ShardState.FAILED), 60_000);
    cp.send('node-a', { case: 'start', value: start });
    const r = (await ready).msg.value as ShardStatus;
    if (r.state !== ShardState.READY) throw new Error(`the vLLM double did not start: ${r.error}`);

    const names = Array.from({ length: ADAPTERS }, (_, i) => i);
    const all = Object.fromEntries(names.map((i) => [`t${i}`, AdapterState.LOADED]));
    const send = (set: number[]) => cp.send('node-a', { case: 'setAdapters', value: create(SetAdaptersSchema, { shardId: 'a1', adapters: set.map((i) => lora(`t${i}`, `acme/lora-${i}`)) }) });
    /** One set of all 8 from nothing: SetAdapters → all proven LOADED, and the engine's own load calls (AdapterStatus.load_ms). */
    const round = async (): Promise<{ tookMs: number; loadMs: number[] }> => {
      const done = cp.waitFor('node-a', adaptersAre('a1', all), 120_000);
      const t0 = performance.now();
      send(names);
      const s = (await done).msg.value as ShardStatus;
      const tookMs = performance.now() - t0;
      const emptied = cp.waitFor('node-a', (m: AgentMessage) => m.msg.case === 'shard' && m.msg.value.shardId === 'a1' && m.msg.value.adapters.length === 0, 60_000);
      send([]);
      await emptied;
      return { tookMs, loadMs: s.adapters.map((a) => a.loadMs) };
    };
    const first = await round();
    const later: { tookMs: number; loadMs: number[] }[] = [];
    for (let i = 0; i < (quick ? 3 : 7); i++) later.push(await round());
    const loads = later.flatMap((x) => x.loadMs);
    const sumLoads = median(later.map((x) => x.loadMs.reduce((a, b) => a + b, 0)));
    rows.push({
      figure: `17 a desired set of ${ADAPTERS} LoRA adapters → every one proven LOADED on the stream (vLLM double, adapters in the store), ${later.length} rounds`,
      measured: `median ${ms(median(later.map((x) => x.tookMs)))}; the first set, pulling them from the hub: ${ms(first.tookMs)}`,
      reference: `the engine's own load call: median ${ms(median(loads))} each, ${ms(sumLoads)} for the ${ADAPTERS}`,
      target: 'recorded',
      met: undefined,
    });
    notes.push(
      `17 per round (ms, SetAdapters → all ${ADAPTERS} proven LOADED): ${later.map((x) => x.tookMs.toFixed(0)).join(', ')}; first (pulls included) ${first.tookMs.toFixed(0)}. The time beyond the engine's load calls is the agent's resolve from the store (each adapter's digest checked), its pins and ledger, and the proofs: each adapter asked by its name and the base once, answers compared with the recorded ones.`,
    );
  } finally {
    await hub.stop();
  }
}
