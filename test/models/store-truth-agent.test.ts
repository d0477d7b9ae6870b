import { readFileSync, rmSync, symlinkSync, unlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { create } from '@bufbuild/protobuf';
import { describe, expect, it } from 'vitest';
import { type Inventory, ModelPullState, ShardState, type ShardStatus, type StartShard, StopShardSchema } from '../../src/gen/llmgw/v1/agent_pb.js';
import { StoreLayout } from '../../src/models/store-layout.js';
import { readManifest } from '../../src/models/model-manifest.js';
import { readWeights } from '../../src/sim/fake-weights.js';
import { weightsTokenOffset } from '../../src/sim/openai-responses.js';
import { tempAgentDirs } from '../helpers/agent-process.js';
import { DOUBLE_ENGINES_YAML, doubleStart } from '../helpers/double-shards.js';
import { freePort, until } from '../helpers/engine-processes.js';
import { runCli } from '../helpers/run-cli.js';
import { shardIs } from '../helpers/sim-shards.js';
import type { StartedControlPlane } from '../helpers/start-control-plane.js';
import { bytes } from './fake-hub.js';
import { llamaFiles, prefetch, startStoreAgent, useHub } from '../helpers/store-agent.js';

/*
 * Issue 51 on the real agent, with the store and the engine doubles, which
 * read what their loaders read and compile as the engines do
 * (fake-weights.ts, fake-compile-cache.ts): every rung earned.
 */

const hub = useHub({
  'acme/llama': llamaFiles({
    shardBytes: [150_000, 100_000],
    seeds: [21, 22],
    extra: [
      { path: 'pytorch_model.bin', content: bytes(250_000, 23), lfs: true },
      { path: 'original/consolidated.00.pth', content: bytes(250_000, 24), lfs: true },
    ],
  }),
});

let plane: StartedControlPlane;
let socket: string;
let cacheDir: string;
let agentLogs: () => Record<string, unknown>[];

async function pulled(include: string[]): Promise<void> {
  expect(await prefetch(plane, 'acme/llama', include)).toMatchObject({ state: ModelPullState.DONE });
}

interface WarmthJson {
  model: string;
  profile: string;
  rung: string;
  learned?: { from: string; samples?: number }[];
}

async function status(): Promise<{ inventory: Inventory & { warmth?: WarmthJson[]; cachedModels?: { repo: string; revision: string; complete?: boolean; contentDigest?: string }[] } }> {
  const r = await runCli(['ctl', 'status', '--socket', socket, '--json']);
  return JSON.parse(r.stdout);
}

async function rungOf(profile: string): Promise<WarmthJson | undefined> {
  return (await status()).inventory.warmth?.find((w) => w.model === 'acme/llama' && w.profile === profile);
}

/** Starts `s` through the agent, waits for READY (or FAILED), stops it, and says how it went. */
async function runOnce(s: StartShard): Promise<{ status: ShardStatus; environ: Record<string, string>; hubRequests: number }> {
  s.httpPort = await freePort();
  const asked = hub.requests.length;
  const ended = plane.cp.waitFor('node-a', shardIs(s.shardId, ShardState.READY, ShardState.FAILED), 30_000);
  plane.cp.send('node-a', { case: 'start', value: s });
  const st = (await ended).msg.value as ShardStatus;
  const environ: Record<string, string> = {};
  if (st.state === ShardState.READY) {
    for (const kv of readFileSync(`/proc/${st.pid}/environ`, 'utf8').split('\0')) {
      const i = kv.indexOf('=');
      if (i > 0) environ[kv.slice(0, i)] = kv.slice(i + 1);
    }
  }
  const hubRequests = hub.requests.length - asked;
  const stopped = plane.cp.waitFor('node-a', shardIs(s.shardId, ShardState.STOPPED), 20_000);
  plane.cp.send('node-a', { case: 'stop', value: create(StopShardSchema, { shardId: s.shardId }) });
  await stopped;
  return { status: st, environ, hubRequests };
}

function start(engine: 'vllm' | 'sglang', id: string, profile: string, args: string[], env: Record<string, string> = {}): StartShard {
  const s = doubleStart(engine, id, 0, { model: 'acme/llama', args, env });
  (s.profile as NonNullable<StartShard['profile']>).name = profile;
  return s;
}

/** A control plane and a real agent with a store and the doubles; inside a test (the helpers clean up when it ends). */
async function setup(): Promise<void> {
  // A profile may turn vLLM's compile cache off once the operator allows the variable by name (env-allowlist.ts).
  const engines = DOUBLE_ENGINES_YAML.replace('    allow_sleep_mode: true\n', '    allow_sleep_mode: true\n    allowed_env: [VLLM_DISABLE_COMPILE_CACHE]\n');
  const started = await startStoreAgent(hub, tempAgentDirs('llmgw-store-truth-'), { engines });
  ({ plane, cacheDir } = started);
  socket = started.dirs.socket;
  agentLogs = () => started.agent.logs();
}

describe('every rung earned (issue 51)', () => {
  it('vLLM: a *.json-only pull is partial; one without original/ and the .bin twin starts offline; +compile only for the profile seen using it', { timeout: 240_000 }, async () => {
    await setup();
    // A *.json-only pull: offered no higher than partial, and its start runs online.
    await pulled(['*.json']);
    const listed = (await status()).inventory.cachedModels?.find((c) => c.repo === 'acme/llama');
    expect(listed).toMatchObject({ revision: 'main' });
    expect(listed?.complete ?? false).toBe(false);
    const run = await runOnce(start('vllm', 'j1', 'json-only', ['--sim-read-weights']));
    expect(run.status.state).toBe(ShardState.READY);
    expect(run.environ).not.toHaveProperty('HF_HUB_OFFLINE');
    const w = await rungOf('json-only');
    expect(w?.rung).toBe('partial');
    expect(w?.learned?.map((l) => l.from)).toContain('hub');

    // Left out original/ and the .bin twin only: complete, with a content digest, and offline with 0 hub requests.
    await pulled(['*.safetensors', '*.json', 'tokenizer*']);
    const whole = (await status()).inventory.cachedModels?.find((c) => c.repo === 'acme/llama');
    expect(whole?.complete).toBe(true);
    expect(whole?.contentDigest).toMatch(/^sha256:[0-9a-f]{64}$/);
    const offline = await runOnce(start('vllm', 'o1', 'offline', ['--sim-read-weights']));
    expect([offline.status.state, offline.status.error]).toEqual([ShardState.READY, '']);
    expect(offline.environ).toMatchObject({ HF_HUB_OFFLINE: '1', HF_HUB_CACHE: join(cacheDir, 'hub') });
    expect(offline.hubRequests).toBe(0);
    expect((await rungOf('offline'))?.rung).toMatch(/^(page-cache|store)$/);

    // +compile for the profile whose READY start used the cache, not for another profile nor a cache-off one.
    const compiled = ['--sim-read-weights', '--sim-compile-time', '300ms'];
    const c1 = await runOnce(start('vllm', 'c1', 'compiled', compiled));
    expect(c1.status.state).toBe(ShardState.READY);
    await until(async () => /\+compile$/.test((await rungOf('compiled'))?.rung ?? ''), "the compiled profile's rung to say +compile", 20_000);
    // The next start of the same profile is labelled from the compile cache, and hits it.
    await runOnce(start('vllm', 'c2', 'compiled', compiled));
    expect((await rungOf('compiled'))?.learned?.some((l) => /\+compile$/.test(l.from))).toBe(true);

    // Another --max-model-len: vLLM hashes it into another folder, so this profile is not credited from the first one's.
    await runOnce(start('vllm', 'm1', 'longer', [...compiled, '--max-model-len', '8192']));
    const longer = await rungOf('longer');
    expect(longer?.learned?.map((l) => l.from).filter((f) => f.endsWith('+compile'))).toEqual([]);

    // Caching off: metadata written at every compile, never a cache to reuse.
    const off = { VLLM_DISABLE_COMPILE_CACHE: '1' };
    expect((await runOnce(start('vllm', 'f1', 'cache-off', compiled, off))).status.state).toBe(ShardState.READY);
    expect((await runOnce(start('vllm', 'f2', 'cache-off', compiled, off))).status.state).toBe(ShardState.READY);
    const cacheOff = await rungOf('cache-off');
    expect(cacheOff?.rung).not.toMatch(/\+compile/);
    expect(cacheOff?.learned?.map((l) => l.from).filter((f) => f.endsWith('+compile'))).toEqual([]);
    expect(agentLogs().some((l) => l.msg === 'compile cache seen in use' && l.profile === 'compiled')).toBe(true);
  });

  it("SGLang: its compile cache under sglang/torch_compile_cache earns +compile, Triton's leftovers do not", { timeout: 120_000 }, async () => {
    await setup();
    await pulled(['*.safetensors', '*.json', 'tokenizer*']);
    const s1 = await runOnce(start('sglang', 's1', 'sglang-compiled', ['--sim-read-weights', '--sim-compile-time', '300ms', '--skip-server-warmup']));
    expect([s1.status.state, s1.status.error]).toEqual([ShardState.READY, '']);
    await until(async () => /\+compile$/.test((await rungOf('sglang-compiled'))?.rung ?? ''), "the SGLang profile's rung to say +compile", 20_000);
    const leaf = new StoreLayout(cacheDir).engineCacheDir(process.getuid?.() ?? 0, 'sglang', 'acme/llama');
    // Its cache gone, Triton's kernels left: no +compile once the engines' caches are surveyed again.
    rmSync(join(leaf, 'sglang', 'torch_compile_cache'), { recursive: true, force: true });
    expect(readFileSync(join(leaf, 'triton', 'sim-kernel', 'kernel.json'), 'utf8')).toBe('{}\n');
    await pulled(['*.safetensors', '*.json', 'tokenizer*']);
    await until(async () => !/\+compile/.test((await rungOf('sglang-compiled'))?.rung ?? '+compile'), "the SGLang profile's rung to drop +compile", 40_000);
  });

  it('a blob changed in place refuses the next start naming it; the right bytes again are verified and start; each shard carries the content digest', { timeout: 120_000 }, async () => {
    await setup();
    await pulled(['*.safetensors', '*.json', 'tokenizer*']);
    const digest = (await status()).inventory.cachedModels?.find((c) => c.repo === 'acme/llama')?.contentDigest;
    const r1 = await runOnce(start('vllm', 'b1', 'blobs', ['--sim-read-weights']));
    expect([r1.status.state, r1.status.modelDigest]).toEqual([ShardState.READY, digest]);
    const layout = new StoreLayout(cacheDir);
    const manifest = await readManifest(layout, 'acme/llama');
    const snap = manifest?.snapshots[manifest.refs.main as string];
    const f = snap?.files.find((x) => x.path === 'model-00001-of-00002.safetensors');
    if (!f) throw new Error('no shard 1 in the manifest');
    const blob = layout.blobPath('acme/llama', f.etag);
    const good = readFileSync(blob);
    // Another checkpoint's bytes, same size, same name: the start is refused, naming the file.
    writeFileSync(blob, bytes(good.length, 99));
    const r2 = await runOnce(start('vllm', 'b2', 'blobs', ['--sim-read-weights']));
    expect(r2.status.state).toBe(ShardState.FAILED);
    expect(r2.status.error).toContain('model-00001-of-00002.safetensors of acme/llama@main');
    expect(r2.status.error).toContain('changed in place since it was verified');
    // Its own bytes back (a new mtime): hashed again, found right, started.
    writeFileSync(blob, good);
    const r3 = await runOnce(start('vllm', 'b3', 'blobs', ['--sim-read-weights']));
    expect([r3.status.state, r3.status.error, r3.status.modelDigest]).toEqual([ShardState.READY, '', digest]);
    expect(agentLogs().some((l) => l.msg === 'store blobs changed since their pull were verified again before the start')).toBe(true);

    // Another checkpoint of the same layout under the same name, the store's blobs untouched (a snapshot link
    // swapped): the content digest is the same, the answer is not, and the start is FAILED with both answers.
    const env = { HF_HUB_CACHE: join(cacheDir, 'hub'), HF_HUB_OFFLINE: '1' };
    const before = weightsTokenOffset((await readWeights('acme/llama', 'main', env)).digest);
    const link = layout.pointerPath('acme/llama', manifest?.refs.main as string, 'model-00001-of-00002.safetensors');
    const other = join(cacheDir, 'other-checkpoint.safetensors');
    unlinkSync(link);
    symlinkSync(other, link);
    // Bytes whose answer is not among the recorded one's near ties (the double's top 5 are its next words).
    for (let seed = 100; ; seed++) {
      writeFileSync(other, bytes(good.length, seed));
      const now = weightsTokenOffset((await readWeights('acme/llama', 'main', env)).digest);
      if ((before - now + 11) % 11 > 4) break;
    }
    const r4 = await runOnce(start('vllm', 'b4', 'blobs', ['--sim-read-weights']));
    expect([r4.status.state, r4.status.modelDigest]).toEqual([ShardState.FAILED, digest]);
    expect(r4.status.error).toMatch(/known answer differs for the model's content sha256:[0-9a-f]{64} \(profile blobs, engine .+\): it answers ".+" to ".+", where it answered ".+" before/);
    const checked = agentLogs().filter((l) => l.msg === 'known answer checked at start' || l.msg === "known answer recorded for the model's content");
    expect(checked.length).toBeGreaterThanOrEqual(3);
  });
});
