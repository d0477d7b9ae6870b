import { lstatSync, readFileSync, readlinkSync } from 'node:fs';
import { join } from 'node:path';
import { create } from '@bufbuild/protobuf';
import { describe, expect, it } from 'vitest';
import { ModelPullState, ShardState, type ShardStatus, type StartShard, StopShardSchema } from '../../src/gen/llmgw/v1/agent_pb.js';
import { readManifest } from '../../src/models/model-manifest.js';
import { StoreLayout } from '../../src/models/store-layout.js';
import { tempAgentDirs } from '../helpers/agent-process.js';
import { doubleStart } from '../helpers/double-shards.js';
import { freePort } from '../helpers/engine-processes.js';
import { runCli } from '../helpers/run-cli.js';
import { shardIs } from '../helpers/sim-shards.js';
import { bytes } from './fake-hub.js';
import { jsonFile, llamaFiles, prefetch, startStoreAgent, useHub } from '../helpers/store-agent.js';

/*
 * Issue 51 on the real agent with the store and the vLLM double, which
 * fetches online as vLLM does through huggingface_hub (fake-weights.ts
 * fetchMissing: only what its loader reads, never a file whose pointer is
 * already in its hub cache):
 * - an online start with part of the model in the store fetches exactly the
 *   files the store lacks: the rest are linked into the engine's own hub
 *   cache from the store's blobs (feed-engine-hub.ts);
 * - one rule for a complete store: tokenizer_config.json is optional to
 *   transformers (loader-files.ts), so a repo without one is complete and
 *   starts offline, while a pull that left out the one its repo lists is
 *   partial.
 */

const llama = llamaFiles({
  shardBytes: [150_000, 100_000],
  seeds: [41, 42],
  extra: [
    { path: 'pytorch_model.bin', content: bytes(250_000, 43), lfs: true },
    { path: 'original/consolidated.00.pth', content: bytes(250_000, 44), lfs: true },
  ],
  tokenizerConfig: false,
});
const tokenizerConfig = jsonFile('tokenizer_config.json', '{}');
const hub = useHub({
  'acme/fed': [...llama, tokenizerConfig],
  // The same layout without tokenizer_config.json, which transformers does without.
  'acme/notc': llama,
  'acme/tc': [...llama, tokenizerConfig],
});

const ALL_PATHS = [...llama.map((f) => f.path), 'tokenizer_config.json'];

describe('an online start fed from the store, and one rule for a complete store (issue 51)', () => {
  it('fetches exactly the files the store lacks; a repo without tokenizer_config.json is complete and starts offline, one that lists it is not without it', { timeout: 240_000 }, async () => {
    const { plane, dirs, cacheDir } = await startStoreAgent(hub, tempAgentDirs('llmgw-online-fed-'));
    const layout = new StoreLayout(cacheDir);
    const pull = async (repo: string, include: string[]) => {
      expect(await prefetch(plane, repo, include)).toMatchObject({ state: ModelPullState.DONE });
    };
    const cached = async (repo: string) => {
      const inv = JSON.parse((await runCli(['ctl', 'status', '--socket', dirs.socket, '--json'])).stdout).inventory as { cachedModels?: { repo: string; complete?: boolean }[] };
      return inv.cachedModels?.find((c) => c.repo === repo);
    };
    /** Starts the double on `repo`, waits for READY, stops it; with the GETs of each file's bytes the start made, and what it ran with. */
    const run = async (id: string, repo: string) => {
      const fetchedBefore = new Map(ALL_PATHS.map((p) => [p, hub.downloads(p).length]));
      const asked = hub.requests.length;
      const s: StartShard = doubleStart('vllm', id, await freePort(), { model: repo, args: ['--sim-read-weights'] });
      const ended = plane.cp.waitFor('node-a', shardIs(id, ShardState.READY, ShardState.FAILED), 60_000);
      plane.cp.send('node-a', { case: 'start', value: s });
      const st = (await ended).msg.value as ShardStatus;
      const environ = Object.fromEntries(
        readFileSync(`/proc/${st.pid}/environ`, 'utf8')
          .split('\0')
          .filter((kv) => kv.includes('='))
          .map((kv) => [kv.slice(0, kv.indexOf('=')), kv.slice(kv.indexOf('=') + 1)]),
      ) as Record<string, string>;
      const note = (JSON.parse((await runCli(['ctl', 'status', '--socket', dirs.socket, '--json'])).stdout).shards as { shardId: string; note?: string }[]).find((x) => x.shardId === id)?.note ?? '';
      const stopped = plane.cp.waitFor('node-a', shardIs(id, ShardState.STOPPED), 30_000);
      plane.cp.send('node-a', { case: 'stop', value: create(StopShardSchema, { shardId: id }) });
      await stopped;
      const fetched = ALL_PATHS.filter((p) => hub.downloads(p).length > (fetchedBefore.get(p) ?? 0));
      return { status: st, environ, note, fetched, requests: hub.requests.length - asked };
    };

    // Part of the model in the store: shard 2 left out. Online, and only shard 2 fetched; never original/ nor the .bin twin.
    await pull('acme/fed', ['*.json', 'model-00001-of-00002.safetensors', 'tokenizer.json']);
    expect((await cached('acme/fed'))?.complete ?? false).toBe(false);
    const first = await run('f-1', 'acme/fed');
    expect([first.status.state, first.status.error]).toEqual([ShardState.READY, '']);
    expect(first.environ).not.toHaveProperty('HF_HUB_OFFLINE');
    expect(first.fetched).toEqual(['model-00002-of-00002.safetensors']);
    expect(first.note).toMatch(/^started online \(HF_HUB_OFFLINE unset\): .*; 5 files of acme\/fed linked from the store into its hub cache, the rest fetched$/);
    // What it was fed is a link to the store's own blob, which the engine read in place.
    const manifest = await readManifest(layout, 'acme/fed');
    const commit = manifest?.refs.main as string;
    const etag = manifest?.snapshots[commit]?.files.find((f) => f.path === 'model-00001-of-00002.safetensors')?.etag as string;
    const pointer = join(first.environ.HF_HUB_CACHE as string, 'models--acme--fed', 'snapshots', commit, 'model-00001-of-00002.safetensors');
    expect(first.environ.HF_HUB_CACHE).not.toBe(layout.hubDir);
    expect(lstatSync(pointer).isSymbolicLink()).toBe(true);
    expect(readlinkSync(pointer)).toBe(layout.blobPath('acme/fed', etag));
    // The look-alike: the next start finds shard 2 in its own cache, and fetches nothing at all.
    const second = await run('f-2', 'acme/fed');
    expect([second.status.state, second.fetched]).toEqual([ShardState.READY, []]);

    // No tokenizer_config.json in the repo: complete without it, offline, 0 hub requests, READY on the double.
    await pull('acme/notc', ['*.safetensors', '*.json', 'tokenizer*']);
    expect((await cached('acme/notc'))?.complete).toBe(true);
    const notc = await run('t-1', 'acme/notc');
    expect([notc.status.state, notc.status.error, notc.environ.HF_HUB_OFFLINE, notc.requests]).toEqual([ShardState.READY, '', '1', 0]);

    // Its look-alike: a repo that lists tokenizer_config.json, pulled without it, is partial, starts online and fetches exactly that file.
    await pull('acme/tc', ['*.safetensors', 'config.json', 'model.safetensors.index.json', 'tokenizer.json']);
    expect((await cached('acme/tc'))?.complete ?? false).toBe(false);
    const withTc = await run('t-2', 'acme/tc');
    expect([withTc.status.state, withTc.status.error]).toEqual([ShardState.READY, '']);
    expect(withTc.note).toMatch(/left out .*tokenizer_config\.json/);
    expect(withTc.fetched).toEqual(['tokenizer_config.json']);
  });
});
