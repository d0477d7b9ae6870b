/**
 * `--only 14d-spread-sleep` and `--only 14d-spread-compile` (issue 51): the
 * rule of `14d-spread` (bench/warmth-spread-figure.ts) for the other rungs the
 * agent publishes. Each wake or start is set beside the P50 and P90 Inventory
 * carried for its rung just before it; the first SCORED_FROM only fill the
 * window. The time compared is the agent's own sample (read from its warmth
 * file), the one the P90 is of.
 *
 * - sleeping-l1, then sleeping-l2: one vLLM double with sleep mode, put to
 *   sleep at that level before each wake (its GPU memory seen released, as in
 *   14d), then WakeShard → READY with its known answer. Level 2 reloads the
 *   weights (reload_weights) after the wake.
 * - page-cache+compile, then store+compile: a profile whose double compiles
 *   (--sim-compile-time), its first start writing the compiled graph the
 *   agent then sees used; the page cache filled (or dropped) before each.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { create } from '@bufbuild/protobuf';
import type { ControlPlane } from '../src/control/control-plane.js';
import { ShardState, type ShardStatus, SleepShardSchema, type TimeToReady, WakeShardSchema } from '../src/gen/llmgw/v1/agent_pb.js';
import { warmFiles } from '../src/models/page-cache.js';
import { percentile } from '../src/agent/models/rung-spread.js';
import { readGpuUsage } from '../src/sim/fake-gpu-usage.js';
import { doubleStart } from '../test/helpers/double-shards.js';
import { dropFromPageCache } from '../test/helpers/drop-page-cache.js';
import { until } from '../test/helpers/engine-processes.js';
import { agentWithModel } from './model-agent.js';
import { controlPlane, freePort, newRoot, sleep } from './bench-support.js';
import type { BenchRow } from './fleet-figure.js';
import { REPO, startHub, startToReady, stopShard } from './warm-start-model.js';
import { nextSample, pct, publishedRungs, row, SCORED_FROM, STARTS, score, spreadShown, warmthSamples } from './warmth-spread-figure.js';

type Spread = { p50Ms: number; p90Ms: number };
/** Per rung the agent said a start or wake came from: its times and what was published before each. */
type Series = Map<string, { times: number[]; seen: (Spread | undefined)[] }>;

const SLEEP_MIB = 4000;
const FIXED_LOAD = '300ms';
const COMPILE = '1500ms';

interface Bench {
  cp: ControlPlane;
  /** The bench's hub, up for the whole figure as in 14d-spread (every start is from the store). */
  stopHub: () => Promise<void>;
  usageDir: string;
  files: { path: string; bytes: number }[];
  /** The agent's samples per rung for `profile` of the model, as its warmth file holds them. */
  samples: (profile: string) => Record<string, number[]>;
  /** What the last Inventory said of `profile`'s rungs. */
  published: (profile: string) => TimeToReady[];
}

async function setUp(tag: string): Promise<Bench> {
  const { cp, url } = await controlPlane();
  const dirs = newRoot(tag);
  const cacheDir = join(dirs.root, 'models');
  const usageDir = join(dirs.root, 'gpu-usage');
  const hub = await startHub();
  const blobs = await agentWithModel(cp, url, dirs, { cacheDir, hubUrl: hub.url, env: { LLMGW_FAKE_GPU_USAGE_DIR: usageDir } });
  const ledgerFile = join(dirs.stateDir, 'warmth.json');
  return {
    cp,
    stopHub: () => hub.stop(),
    usageDir,
    files: blobs.map((path) => ({ path, bytes: 0 })),
    samples: (profile) => warmthSamples(ledgerFile, profile),
    published: (profile) => publishedRungs(cp, profile),
  };
}

/** `n` times: `before`, then (once Inventory carries every sample so far) `act`, and the sample the agent took of it beside what was published before it. */
async function measure(b: Bench, profile: string, n: number, before: () => Promise<unknown>, act: (i: number) => Promise<unknown>, into: Series = new Map()): Promise<Series> {
  for (let i = 0; i < n; i++) {
    await before();
    const had = b.samples(profile);
    // The Inventory after the last sample: what a control plane holds as the next one is asked.
    await until(() => Object.entries(had).every(([k, s]) => b.published(profile).some((t) => t.from === k && t.samples === s.length)), 'Inventory to carry the last sample', 30_000);
    const shown = b.published(profile);
    await act(i);
    const { from, ms } = await nextSample(() => b.samples(profile), had);
    const s = into.get(from) ?? { times: [], seen: [] };
    s.times.push(ms);
    s.seen.push(spreadShown(shown, from));
    into.set(from, s);
  }
  return into;
}

/** A row per rung of `series` with at least `min` samples, and the per-start note. */
function report(rows: BenchRow[], notes: string[], series: Series, min: number, what: string): void {
  const load = readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');
  for (const [from, { times, seen }] of series) {
    if (times.length < min) {
      notes.push(`14d-spread ${from}: ${times.length} sample(s) only (${times.join(', ')} ms), not scored`);
      continue;
    }
    const s = score(times, (i) => seen[i]);
    const nearest = score(times, (i) => ({ p50Ms: 0, p90Ms: percentile(times.slice(Math.max(0, i - 20), i), 90) }));
    rows.push(row(`14d rung spread, ${from} rung: ${times.length} ${what}, each beside the P50/P90 Inventory carried before it (load ${load})`, s, `the same against a nearest-rank P90 of the last 20: ${pct(nearest)}`));
    notes.push(`14d-spread ${from} per ${what.split(' ')[0].replace(/s$/, '')} (ms, the agent's sample): ${times.join(', ')}; published P90 before each from the ${SCORED_FROM + 1}th: ${seen.slice(SCORED_FROM).map((p) => p?.p90Ms ?? '-').join(', ')}; 1-min/5-min/15-min load at the end ${load}`);
  }
}

/** `series` of `STARTS` (20 with --quick) on a fresh agent and hub, the hub stopped after. */
async function onFreshAgent(tag: string, quick: boolean, series: (b: Bench, n: number) => Promise<void>): Promise<void> {
  const b = await setUp(tag);
  try {
    await series(b, quick ? 20 : STARTS);
  } finally {
    await b.stopHub();
  }
}

/** sleeping-l1, then sleeping-l2: one shard with sleep mode, put to sleep at the level before each wake. */
export function warmthSpreadSleepFigure(rows: BenchRow[], notes: string[], quick: boolean): Promise<void> {
  return onFreshAgent('f14dss', quick, (b, n) => sleepSeries(rows, notes, b, n));
}

async function sleepSeries(rows: BenchRow[], notes: string[], b: Bench, n: number): Promise<void> {
  const { cp } = b;
  const start = doubleStart('vllm', 'sp-sleep', await freePort(), { model: REPO, args: ['--sim-read-weights', '--sim-load-time', FIXED_LOAD, '--sim-gpu-memory', String(SLEEP_MIB), '--sim-gpu-usage-dir', b.usageDir] });
  if (start.profile) start.profile.sleepMode = true;
  const profile = start.profile?.name ?? '';
  await startToReady(cp, start);
  const gpu = start.gpuIndices[0] as number;
  const statusOf = (state: ShardState) =>
    cp.waitFor('node-a', (m) => m.msg.case === 'shard' && m.msg.value.shardId === 'sp-sleep' && (m.msg.value.state === state || m.msg.value.error !== ''), 120_000).then((m) => m.msg.value as ShardStatus);
  const asleep = (level: number) => async () => {
    const slept = statusOf(ShardState.SLEEPING);
    cp.send('node-a', { case: 'sleep', value: create(SleepShardSchema, { shardId: 'sp-sleep', level }) });
    const s = await slept;
    if (s.state !== ShardState.SLEEPING) throw new Error(`the level-${level} sleep failed: ${s.error}`);
    await until(() => (readGpuUsage(b.usageDir).get(gpu) ?? 0) < SLEEP_MIB, 'the double to release its GPU memory', 60_000);
  };
  // A WakeShard before the agent saw the sleep done is refused as busy (14c): sent again until one is taken.
  const wake = async () => {
    for (let tries = 0; ; tries++) {
      const awake = statusOf(ShardState.READY);
      cp.send('node-a', { case: 'wake', value: create(WakeShardSchema, { shardId: 'sp-sleep' }) });
      const w = await awake;
      if (w.state === ShardState.READY) return;
      if (!/already being put to sleep or woken/.test(w.error) || tries >= 100) throw new Error(`the wake failed: ${w.error}`);
      await sleep(100);
    }
  };
  const series = await measure(b, profile, n, asleep(1), wake);
  await measure(b, profile, n, asleep(2), wake, series);
  await stopShard(cp, 'sp-sleep');
  series.delete('page-cache');
  series.delete('store');
  report(rows, notes, series, SCORED_FROM + 1, `wakes of one vLLM double with sleep mode (reading 128 MiB, ${SLEEP_MIB} MiB on its GPU), SleepShard at the level then WakeShard → READY through the real agent`);
  notes.push(
    `14d-spread-sleep: before each wake a SleepShard at the rung's level, SLEEPING and the double's GPU memory seen below ${SLEEP_MIB} MiB; the WakeShard sent again every 100 ms while the agent refuses it as busy (its sleep not yet seen done), the agent's sample timed from the one taken. The double's /wake_up takes its --sim-wake-time default (100 ms); a level-2 wake then has the agent call reload_weights, which the double serves in another 100 ms (no --sim-disk-rate: a timer, not a read of the 128 MiB), so the sleeping-l2 spread here is the agent's wake path, not a disk's. Scored as 14d-spread: each wake against the P50/P90 in the Inventory before it, the first ${SCORED_FROM} only fill the window`,
  );
}

/** page-cache+compile, then store+compile: a profile whose compiled graph its first start wrote. */
export function warmthSpreadCompileFigure(rows: BenchRow[], notes: string[], quick: boolean): Promise<void> {
  return onFreshAgent('f14dsc', quick, (b, n) => compileSeries(rows, notes, b, n));
}

async function compileSeries(rows: BenchRow[], notes: string[], b: Bench, n: number): Promise<void> {
  const args = ['--sim-read-weights', '--sim-load-time', FIXED_LOAD, '--sim-compile-time', COMPILE];
  const profile = 'vllm-double-compile';
  let k = 0;
  const startOnce = async () => {
    const id = `sc${k++}`;
    const start = doubleStart('vllm', id, await freePort(), { model: REPO, args });
    if (start.profile) start.profile.name = profile;
    await startToReady(b.cp, start);
    await stopShard(b.cp, id);
  };
  const warm = () => warmFiles(b.files, Number.POSITIVE_INFINITY);
  const drop = () => dropFromPageCache(b.files.map((f) => f.path));
  // The first start compiles (from page-cache); the rest find its graph.
  const series = await measure(b, profile, n + 1, warm, startOnce);
  await measure(b, profile, n, drop, startOnce, series);
  report(rows, notes, series, SCORED_FROM + 1, `starts of one vLLM double profile that compiles (reading 128 MiB, load ${FIXED_LOAD}, --sim-compile-time ${COMPILE}) through the real agent`);
  notes.push(
    `14d-spread-compile: the profile's first start compiles (a "page-cache" sample, not scored) and writes the graph the agent then sees a READY start use (compile-claims.ts); every later start finds it. The page cache filled (files read whole) before each "page-cache+compile" start and dropped before each "store+compile" one. Scored as 14d-spread`,
  );
}
