import { existsSync, mkdirSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { create } from '@bufbuild/protobuf';
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import {
  type AgentMessage,
  type Inventory,
  type ModelPull,
  ModelPullState,
  PrefetchModelSchema,
  ShardState,
  type ShardStatus,
  StopShardSchema,
} from '../../src/gen/llmgw/v1/agent_pb.js';
import { startAgentProcess, tempAgentDirs } from '../helpers/agent-process.js';
import { freePort, until } from '../helpers/engine-processes.js';
import { describeModel } from '../../src/models/scan-store.js';
import { StoreLayout } from '../../src/models/store-layout.js';
import { isRegister, shardIs, simStart } from '../helpers/sim-shards.js';
import { runCli } from '../helpers/run-cli.js';
import { dropFromPageCache } from '../helpers/drop-page-cache.js';
import { DOUBLE_ENGINES_YAML, doubleStart } from '../helpers/double-shards.js';
import { startControlPlane } from '../helpers/start-control-plane.js';
import { FakeHub, bytes, fakeRepo } from './fake-hub.js';

/*
 * The model store through the real agent (issue 30): PrefetchModel and its
 * ModelPull progress, Inventory's cached models, a start that waits for its
 * model's pull and then runs offline, the pins of running shards. The hub is
 * FakeHub, which counts every request.
 */

const TINY = bytes(200_000, 11);
const OTHER = bytes(200_000, 12);
const hub = new FakeHub();
hub.repos.set('acme/tiny', fakeRepo('acme/tiny', [{ path: 'model.safetensors', content: TINY, lfs: true }, { path: 'config.json', content: Buffer.from('{"a":1}\n'), lfs: false }]));
hub.repos.set('acme/other', fakeRepo('acme/other', [{ path: 'model.safetensors', content: OTHER, lfs: true }]));
// A chat model as the hub has one: weights, config, and the tokenizer files vLLM reads at start.
hub.repos.set(
  'acme/chat',
  fakeRepo('acme/chat', [
    { path: 'model.safetensors', content: bytes(100_000, 13), lfs: true },
    { path: 'config.json', content: Buffer.from('{"c":1}\n'), lfs: false },
    { path: 'tokenizer_config.json', content: Buffer.from('{}\n'), lfs: false },
    { path: 'tokenizer.json', content: Buffer.from('{"t":1}\n'), lfs: false },
  ]),
);

beforeAll(() => hub.start());
afterAll(() => hub.stop());

const pullOf = (repo: string, ...states: ModelPullState[]) => (m: AgentMessage) =>
  m.msg.case === 'modelPull' && m.msg.value.repo === repo && (states.length === 0 || states.includes(m.msg.value.state));
const pullValue = (m: AgentMessage) => m.msg.value as ModelPull;
const completeIn = (repo: string) => (m: AgentMessage) => {
  const inv = m.msg.case === 'inventory' ? m.msg.value : m.msg.case === 'register' ? m.msg.value.inventory : undefined;
  return inv?.cachedModels.some((c) => c.repo === repo && c.revision === 'main' && c.complete) === true;
};

/** The environment a process runs with, as the kernel keeps it. */
function environOf(pid: number): Record<string, string> {
  const out: Record<string, string> = {};
  for (const kv of readFileSync(`/proc/${pid}/environ`, 'utf8').split('\0')) {
    const i = kv.indexOf('=');
    if (i > 0) out[kv.slice(0, i)] = kv.slice(i + 1);
  }
  return out;
}

/** A control plane and a real agent whose store is `cache` (a fresh one unless given), pulling from the fake hub. */
async function agentWithStore(budget = '64MiB', before?: (cacheDir: string) => void, moreYaml = '') {
  const plane = await startControlPlane();
  const dirs = tempAgentDirs('llmgw-warm-');
  const cacheDir = join(dirs.root, 'models');
  mkdirSync(cacheDir);
  before?.(cacheDir);
  const registered = plane.cp.waitFor('node-a', isRegister, 20_000);
  const agent = startAgentProcess({ server: plane.url, dirs, extraYaml: `models:\n  cache_dir: ${cacheDir}\n  budget: ${budget}\n  hub:\n    endpoint: ${hub.url}\n${moreYaml}` });
  const reg = await registered;
  if (process.env.WARM_DEBUG) onTestFinished(() => console.log(agent.logs().map((l) => JSON.stringify(l)).join('\n')));
  return { cp: plane.cp, dirs, cacheDir, reg, configPath: agent.configPath, socket: dirs.socket, agent };
}

function modelStart(shardId: string, port: number, gpu: number, model = 'acme/tiny') {
  const start = simStart(shardId, port, { gpu });
  (start.profile as NonNullable<typeof start.profile>).model = model;
  return start;
}

const pinPath = (cacheDir: string, repo: string, shard: string) => join(cacheDir, 'llmgw', 'pins', `models--${repo.replace('/', '--')}`, shard);

describe('warm starts through the agent', () => {
  it('pulls on PrefetchModel with progress on the stream, lists the model in Inventory, and starts it offline without asking the hub', async () => {
    // A pin a crashed agent left for a shard that no longer exists.
    const { cp, cacheDir } = await agentWithStore('64MiB', (dir) => {
      mkdirSync(join(dir, 'llmgw', 'pins', 'models--acme--tiny'), { recursive: true });
      writeFileSync(pinPath(dir, 'acme/tiny', 'ghost-shard'), '1\n');
    });
    expect(existsSync(pinPath(cacheDir, 'acme/tiny', 'ghost-shard'))).toBe(false);

    const done = cp.waitFor('node-a', pullOf('acme/tiny', ModelPullState.DONE, ModelPullState.FAILED), 20_000);
    const listed = cp.waitFor('node-a', completeIn('acme/tiny'), 20_000);
    cp.send('node-a', { case: 'prefetch', value: create(PrefetchModelSchema, { repo: 'acme/tiny', revision: 'main' }) });
    expect(pullValue(await done)).toMatchObject({ state: ModelPullState.DONE, error: '', bytesTotal: BigInt(TINY.length + 8) });
    const states = cp.messages('node-a').filter(pullOf('acme/tiny')).map((m) => pullValue(m).state);
    expect(states[0]).toBe(ModelPullState.STARTED);
    expect(states).toContain(ModelPullState.PROGRESS);
    const inv = (await listed).msg.value as Inventory;
    expect(inv.cachedModels.find((c) => c.repo === 'acme/tiny')).toMatchObject({ revision: 'main', complete: true, bytes: BigInt(TINY.length + 8) });
    expect(inv.modelCacheFreeBytes).toBe(BigInt(64 * 1024 * 1024 - TINY.length - 8));

    const asked = hub.requests.length;
    const port = await freePort();
    const ready = cp.waitFor('node-a', shardIs('w1', ShardState.READY), 30_000);
    cp.send('node-a', { case: 'start', value: modelStart('w1', port, 0) });
    const pid = ((await ready).msg.value as ShardStatus).pid;
    expect(environOf(pid)).toMatchObject({ HF_HUB_OFFLINE: '1', HF_HUB_CACHE: join(cacheDir, 'hub') });
    // Not HF_HOME: it would move huggingface_hub's token file (HF_TOKEN_PATH defaults to $HF_HOME/token; review 2, N6).
    expect(environOf(pid).HF_HOME).not.toBe(cacheDir);
    expect(hub.requests.length).toBe(asked);
    expect(existsSync(pinPath(cacheDir, 'acme/tiny', 'w1'))).toBe(true);

    const stopped = cp.waitFor('node-a', shardIs('w1', ShardState.STOPPED), 20_000);
    cp.send('node-a', { case: 'stop', value: create(StopShardSchema, { shardId: 'w1' }) });
    await stopped;
    await until(() => !existsSync(pinPath(cacheDir, 'acme/tiny', 'w1')), 'the pin of w1 removed after its stop');

    // An engine that dies: its shard stays listed FAILED, but reads no weights, so its pin goes without a stop.
    const failed = cp.waitFor('node-a', shardIs('w2', ShardState.FAILED), 20_000);
    const w2 = cp.waitFor('node-a', shardIs('w2', ShardState.READY), 30_000);
    cp.send('node-a', { case: 'start', value: modelStart('w2', await freePort(), 0) });
    const w2Pid = ((await w2).msg.value as ShardStatus).pid;
    expect(existsSync(pinPath(cacheDir, 'acme/tiny', 'w2'))).toBe(true);
    process.kill(w2Pid, 'SIGKILL');
    await failed;
    await until(() => !existsSync(pinPath(cacheDir, 'acme/tiny', 'w2')), 'the pin of w2 removed once its engine died');
  });

  it('times a start from the page cache apart from one from disk, by residency read as it starts, and models warm moves it up (issue 41)', { timeout: 120_000 }, async () => {
    const { cp, cacheDir, configPath } = await agentWithStore();
    const done = cp.waitFor('node-a', pullOf('acme/tiny', ModelPullState.DONE, ModelPullState.FAILED), 20_000);
    cp.send('node-a', { case: 'prefetch', value: create(PrefetchModelSchema, { repo: 'acme/tiny' }) });
    expect(pullValue(await done).state).toBe(ModelPullState.DONE);
    const blobs = join(cacheDir, 'hub', 'models--acme--tiny', 'blobs');
    const files = readdirSync(blobs).map((n) => join(blobs, n));
    const learnedFrom = (from: string) => (m: AgentMessage) => {
      const inv = m.msg.case === 'inventory' ? m.msg.value : undefined;
      return inv?.warmth.some((w) => w.model === 'acme/tiny' && w.learned.some((t) => t.from === from)) === true;
    };
    const startAndStop = async (id: string, from: string) => {
      const learned = cp.waitFor('node-a', learnedFrom(from), 30_000);
      const ready = cp.waitFor('node-a', shardIs(id, ShardState.READY, ShardState.FAILED), 30_000);
      cp.send('node-a', { case: 'start', value: modelStart(id, await freePort(), 0) });
      expect(((await ready).msg.value as ShardStatus).state).toBe(ShardState.READY);
      const w = (await learned).msg.value as Inventory;
      const stopped = cp.waitFor('node-a', shardIs(id, ShardState.STOPPED), 20_000);
      cp.send('node-a', { case: 'stop', value: create(StopShardSchema, { shardId: id }) });
      await stopped;
      return w.warmth.find((x) => x.model === 'acme/tiny');
    };
    // Cold: synced and dropped from the page cache (posix_fadvise DONTNEED through dd) before the start.
    await dropFromPageCache(files);
    const cold = await startAndStop('c1', 'store');
    expect(cold?.learned.map((t) => t.from)).toEqual(['store']);
    // Warmed by the operator's command, then started: from the page cache.
    const warmed = await runCli(['models', 'warm', 'acme/tiny', '--config', configPath, '--json']);
    expect(warmed.exitCode, warmed.stderr).toBe(0);
    expect(JSON.parse(warmed.stdout).residentAfter).toBe(JSON.parse(warmed.stdout).bytes);
    const hot = await startAndStop('h1', 'page-cache');
    expect(hot?.learned.map((t) => [t.from, t.samples])).toEqual([['page-cache', 1], ['store', 1]]);
  });

  it('reads a model into the page cache after its pull when PrefetchModel asks for it, saying WARMED with what is resident (issue 41)', { timeout: 120_000 }, async () => {
    const { cp, cacheDir } = await agentWithStore();
    const pulled = cp.waitFor('node-a', pullOf('acme/tiny', ModelPullState.DONE, ModelPullState.FAILED), 20_000);
    cp.send('node-a', { case: 'prefetch', value: create(PrefetchModelSchema, { repo: 'acme/tiny' }) });
    const bytes = pullValue(await pulled).bytesTotal;
    // Out of the cache, then asked again with page_cache: no download (complete), DONE, then WARMED, all resident.
    const blobs = join(cacheDir, 'hub', 'models--acme--tiny', 'blobs');
    const files = readdirSync(blobs).map((n) => join(blobs, n));
    await dropFromPageCache(files);
    const downloaded = hub.downloads('model.safetensors').length;
    const warmed = cp.waitFor('node-a', pullOf('acme/tiny', ModelPullState.WARMED), 30_000);
    cp.send('node-a', { case: 'prefetch', value: create(PrefetchModelSchema, { repo: 'acme/tiny', pageCache: true }) });
    const w = pullValue(await warmed);
    expect(w).toMatchObject({ state: ModelPullState.WARMED, error: '', bytesTotal: bytes, bytesDone: bytes });
    const states = cp.messages('node-a').filter(pullOf('acme/tiny')).map((m) => pullValue(m).state);
    expect(states.slice(-2)).toEqual([ModelPullState.DONE, ModelPullState.WARMED]);
    // Read from the store, not downloaded again.
    expect(hub.downloads('model.safetensors').length).toBe(downloaded);
  });

  it('makes two StartShards of a model mid-pull wait for the one download, then both start offline', async () => {
    const { cp, cacheDir, socket } = await agentWithStore();
    // 200 kB at 1 kB per 20 ms: about four seconds of pull for the starts to land in, and for ctl status to see them wait.
    hub.trickle.set('model.safetensors', 1_000);
    try {
      const before = hub.downloads('model.safetensors').length;
      const started = cp.waitFor('node-a', pullOf('acme/tiny', ModelPullState.PROGRESS), 20_000);
      cp.send('node-a', { case: 'prefetch', value: create(PrefetchModelSchema, { repo: 'acme/tiny' }) });
      await started;
      const [p1, p2] = [await freePort(), await freePort()];
      const ready = [cp.waitFor('node-a', shardIs('m1', ShardState.READY), 30_000), cp.waitFor('node-a', shardIs('m2', ShardState.READY), 30_000)];
      cp.send('node-a', { case: 'start', value: modelStart('m1', p1, 0) });
      cp.send('node-a', { case: 'start', value: modelStart('m2', p2, 1) });
      // Where an operator sees the pull in progress: the store read beside the agent, as `llmgw models list` reads it (the agent holds the model's lock).
      expect(await describeModel(new StoreLayout(cacheDir), 'acme/tiny')).toMatchObject({ pulling: true, complete: false });
      // And in ctl status: both starts, STARTING with no engine yet, and a note naming the pull they wait for.
      let waiting: { shardId: string; state: string; pid?: number; note?: string; inFlight?: number }[] = [];
      await until(async () => {
        const r = await runCli(['ctl', 'status', '--socket', socket, '--json']);
        waiting = (JSON.parse(r.stdout).shards ?? []).filter((s: { note?: string }) => s.note?.includes('waiting for the pull of acme/tiny'));
        return waiting.length === 2 || cp.messages('node-a').some(pullOf('acme/tiny', ModelPullState.DONE));
      }, 'ctl status to show the two starts waiting for the pull', 20_000);
      // No engine, so nothing read from one: in-flight unknown (-1), not 0.
      expect(waiting.map((s) => [s.shardId, s.state, s.pid ?? 0, s.inFlight])).toEqual([
        ['m1', 'SHARD_STATE_STARTING', 0, -1],
        ['m2', 'SHARD_STATE_STARTING', 0, -1],
      ]);
      const pids = (await Promise.all(ready)).map((m) => (m.msg.value as ShardStatus).pid);

      const seen = cp.messages('node-a');
      const doneAt = seen.findIndex(pullOf('acme/tiny', ModelPullState.DONE));
      const firstStarting = seen.findIndex((m) => shardIs('m1', ShardState.STARTING)(m) || shardIs('m2', ShardState.STARTING)(m));
      expect(doneAt).toBeGreaterThanOrEqual(0);
      expect(firstStarting).toBeGreaterThan(doneAt);
      // One download: the prefetch's; neither engine fetched beside it (nor could the sim, which is why its env is read).
      expect(hub.downloads('model.safetensors').length - before).toBe(1);
      for (const pid of pids) expect(environOf(pid).HF_HUB_OFFLINE).toBe('1');
      expect(existsSync(pinPath(cacheDir, 'acme/tiny', 'm1')) && existsSync(pinPath(cacheDir, 'acme/tiny', 'm2'))).toBe(true);
    } finally {
      hub.trickle.delete('model.safetensors');
    }
  });

  it('starts a model pulled with --include online, saying why in ctl status and the log, and offline once the whole repo is pulled', async () => {
    const { cp, socket, agent } = await agentWithStore('64MiB', undefined, DOUBLE_ENGINES_YAML);
    const noteOf = async (id: string): Promise<string> => {
      const r = await runCli(['ctl', 'status', '--socket', socket, '--json']);
      return (JSON.parse(r.stdout).shards ?? []).find((s: { shardId: string }) => s.shardId === id)?.note ?? '';
    };
    const pulled = async (include: string[]) => {
      const ends = () => cp.messages('node-a').filter(pullOf('acme/chat', ModelPullState.DONE, ModelPullState.FAILED));
      const before = ends().length;
      cp.send('node-a', { case: 'prefetch', value: create(PrefetchModelSchema, { repo: 'acme/chat', include }) });
      await until(() => ends().length > before, `the pull of acme/chat with --include ${include.join(' ')} to end`, 20_000);
      expect(pullValue(ends().at(-1) as AgentMessage)).toMatchObject({ state: ModelPullState.DONE, error: '' });
    };
    // docs/store.md's example narrowed to the weights: the store has no tokenizer files.
    await pulled(['*.safetensors']);
    // The vLLM double reads its snapshot from the store and, offline, needs the tokenizer files as vLLM does.
    const start = (id: string) => doubleStart('vllm', id, 0, { model: 'acme/chat', args: ['--sim-read-weights'] });
    const p1 = start('p1');
    p1.httpPort = await freePort();
    const ended = cp.waitFor('node-a', shardIs('p1', ShardState.READY, ShardState.FAILED), 30_000);
    cp.send('node-a', { case: 'start', value: p1 });
    const first = (await ended).msg.value as ShardStatus;
    expect(first.error).toBe('');
    expect(first.state).toBe(ShardState.READY);
    expect(environOf(first.pid)).not.toHaveProperty('HF_HUB_OFFLINE');
    expect(await noteOf('p1')).toBe(
      // The safetensors it holds linked into the engine's own hub cache: the engine fetches only the rest (issue 51).
      'started online (HF_HUB_OFFLINE unset): acme/chat@main was pulled with --include *.safetensors, which left out config.json, tokenizer_config.json, tokenizer.json; 1 file of acme/chat linked from the store into its hub cache, the rest fetched',
    );
    expect(agent.logs().find((l) => l.msg === "the engine starts online: not everything it reads at start is in the node's model store")).toMatchObject({ shard: 'p1', why: expect.stringContaining('--include *.safetensors') });
    const stopped = cp.waitFor('node-a', shardIs('p1', ShardState.STOPPED), 20_000);
    cp.send('node-a', { case: 'stop', value: create(StopShardSchema, { shardId: 'p1' }) });
    await stopped;

    // The whole repo: everything the engine reads is local, so offline, and no note.
    await pulled([]);
    const p2 = start('p2');
    p2.httpPort = await freePort();
    const ready = cp.waitFor('node-a', shardIs('p2', ShardState.READY, ShardState.FAILED), 30_000);
    cp.send('node-a', { case: 'start', value: p2 });
    const second = (await ready).msg.value as ShardStatus;
    expect([second.state, second.error]).toEqual([ShardState.READY, '']);
    expect(environOf(second.pid).HF_HUB_OFFLINE).toBe('1');
    expect(await noteOf('p2')).toBe('');
  });

  it('never evicts the model of a running shard, and evicts it once the shard is stopped', async () => {
    // Room for one of the two models only.
    const { cp, cacheDir } = await agentWithStore('300KiB');
    const tinyDone = cp.waitFor('node-a', pullOf('acme/tiny', ModelPullState.DONE), 20_000);
    cp.send('node-a', { case: 'prefetch', value: create(PrefetchModelSchema, { repo: 'acme/tiny' }) });
    await tinyDone;
    const port = await freePort();
    const ready = cp.waitFor('node-a', shardIs('e1', ShardState.READY), 30_000);
    cp.send('node-a', { case: 'start', value: modelStart('e1', port, 0) });
    await ready;

    const refused = cp.waitFor('node-a', pullOf('acme/other', ModelPullState.DONE, ModelPullState.FAILED), 20_000);
    cp.send('node-a', { case: 'prefetch', value: create(PrefetchModelSchema, { repo: 'acme/other' }) });
    const r = pullValue(await refused);
    expect(r.state).toBe(ModelPullState.FAILED);
    expect(r.error).toContain('in use: acme/tiny');
    expect(r.error).not.toContain('\n');
    expect(existsSync(join(cacheDir, 'hub', 'models--acme--tiny'))).toBe(true);

    const stopped = cp.waitFor('node-a', shardIs('e1', ShardState.STOPPED), 20_000);
    cp.send('node-a', { case: 'stop', value: create(StopShardSchema, { shardId: 'e1' }) });
    await stopped;
    await until(() => !existsSync(pinPath(cacheDir, 'acme/tiny', 'e1')), 'the pin of e1 removed after its stop');
    const done = cp.waitFor('node-a', pullOf('acme/other', ModelPullState.DONE, ModelPullState.FAILED), 20_000);
    cp.send('node-a', { case: 'prefetch', value: create(PrefetchModelSchema, { repo: 'acme/other' }) });
    expect(pullValue(await done)).toMatchObject({ state: ModelPullState.DONE, error: '' });
    expect(existsSync(join(cacheDir, 'hub', 'models--acme--tiny'))).toBe(false);
  });

  it('refuses a bad PrefetchModel with a one-line reason and downloads nothing', async () => {
    const { cp, agent } = await agentWithStore();
    const asked = hub.requests.length;
    const bad = [
      { repo: '../../etc', revision: 'main', include: [], says: 'is not a hub model id' },
      { repo: 'acme/tiny', revision: '../../x', include: [], says: 'is not a branch, tag or commit' },
      { repo: 'acme--x/y', revision: '', include: [], says: 'may not contain -- or ..' },
      { repo: 'acme/tiny', revision: 'main', include: [''], says: 'is not a file pattern' },
    ];
    for (const b of bad) {
      const failed = cp.waitFor('node-a', pullOf(b.repo, ModelPullState.FAILED), 10_000);
      cp.send('node-a', { case: 'prefetch', value: create(PrefetchModelSchema, { repo: b.repo, revision: b.revision, include: b.include }) });
      const f = pullValue(await failed);
      expect(f.error).toContain(b.says);
      expect(f.error).not.toContain('\n');
    }
    expect(hub.requests.length).toBe(asked);
    // A flood of refusals of a 100 KB repo id (security review 3, S10): each ModelPull quotes it short, and the log says it once.
    const huge = `x/${'y'.repeat(100_000)}`;
    for (let i = 0; i < 50; i++) {
      const refused = cp.waitFor('node-a', (m) => m.msg.case === 'modelPull' && m.msg.value.state === ModelPullState.FAILED && m.msg.value.error.includes('is not a hub model id'), 10_000);
      cp.send('node-a', { case: 'prefetch', value: create(PrefetchModelSchema, { repo: huge }) });
      expect(pullValue(await refused).error.length).toBeLessThan(300);
    }
    expect(agent.logs().filter((l) => l.msg === 'refused a PrefetchModel' && String(l.repo).startsWith('x/yyy')).length).toBeLessThanOrEqual(2);
    // A pattern of stars that a backtracking match took minutes over (security review 3, S3): the pull
    // fails at once naming the pattern, and the agent's heartbeats go on (its event loop was never held).
    const redos = `${'*'.repeat(24)}Q`;
    const failed = cp.waitFor('node-a', pullOf('acme/tiny', ModelPullState.FAILED), 10_000);
    cp.send('node-a', { case: 'prefetch', value: create(PrefetchModelSchema, { repo: 'acme/tiny', include: [redos] }) });
    expect(pullValue(await failed).error).toContain(`no file of acme/tiny@main matches --include ${redos}`);
    await cp.waitFor('node-a', (m) => m.msg.case === 'heartbeat', 10_000);
    // The agent is still there and answers.
    const again = cp.waitFor('node-a', pullOf('acme/tiny', ModelPullState.DONE), 20_000);
    cp.send('node-a', { case: 'prefetch', value: create(PrefetchModelSchema, { repo: 'acme/tiny' }) });
    await again;
  });
});
