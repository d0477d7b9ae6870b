import { setTimeout as sleep } from 'node:timers/promises';
import { ShardState, type StartShard } from '../../../gen/llmgw/v1/agent_pb.js';
import { formatDuration } from '../../../lib/duration.js';
import { errorMessage, failure } from '../../../lib/errors.js';
import type { EngineSleepApi, SleepCall } from '../../../lib/engine-sleep-api.js';
import { bearer, type HttpResult, httpGet, PROBE_BODY_MAX_BYTES } from '../probes/http-probe.js';
import type { HostRoomPaths } from './host-room.js';
import type { HostRamLedger } from './host-ram-ledger.js';
import { stateName } from '../../../lib/shard-states.js';

/*
 * Sleep and wake of one shard (issue 30), the judgements and the engine
 * calls; the runner makes the transitions. Memory is judged from the GPU
 * readings the agent already takes (GpuMemorySampler): the engine saying
 * 200 is not proof its memory was freed.
 */

/** What the runner needs beside its engine to sleep it: the node's GPU readings and its host RAM. */
export interface SleepProbes {
  /** MiB used per GPU index, as the sampler last read it. */
  gpuMemoryMib: () => number[];
  /** /proc/meminfo, or a test's stand-in. */
  meminfoPath?: string;
  /** How long the engine's call and the memory's change may take; default 2 min. */
  timeoutMs?: number;
  /**
   * How long the wake of a shard asleep at `level` may take, and how that
   * was reached (wake-deadline.ts: a vLLM level-2 wake reads the model from
   * disk); without it, timeoutMs.
   */
  wakeTimeout?: (spec: StartShard, level: 1 | 2, awakeMib: number) => { ms: number; why: string };
  /**
   * Why the shard's GPUs cannot be woken onto now: memory held by a process
   * no shard owns (wake-gpu-check.ts), naming its pid; undefined when they
   * can, or when it cannot be known. Without it, not looked at.
   */
  gpusTaken?: (gpus: readonly number[]) => Promise<string | undefined>;
  /** Where host room is read (host-room.ts); tests give stand-ins. */
  hostRoomPaths?: HostRoomPaths;
  /** Host RAM promised to sleeps under way, node-wide (host-ram-ledger.ts); without it each sleep is judged alone. */
  hostRam?: HostRamLedger;
  /**
   * A reading of every GPU taken now (GpuMemorySampler.readNow: NVML at once,
   * else one nvidia-smi, shared by concurrent asks); rejects when none could
   * be taken. With it a sleep or wake is seen as soon as the engine has
   * done it, not at the sampler's next tick (issue 36 item 8). Without it, or
   * when it fails, the waits fall back to gpuMemoryMib every `pollMs`.
   */
  readNow?: () => Promise<number[]>;
  /**
   * How often the readings are looked at again without readNow; default 250 ms
   * (the sampler reads every second at most). With readNow, the longest gap
   * between fresh reads (see nextReadDelayMs).
   */
  pollMs?: number;
  /**
   * How long a sleep waits for a first reading of the shard's GPUs, which the
   * sampler takes only after Register and then once an interval; default
   * 2 s, the agent gives two of its sampler's intervals.
   */
  firstReadingMs?: number;
  /**
   * When the readings were last taken (ms): a sleep then waits for one taken
   * after it was asked, since a shard that just became READY may not have
   * shown its memory yet and a stale figure makes the sleep's check
   * meaningless. Without it the latest reading is taken as it is.
   */
  readAtMs?: () => number;
}

export const DEFAULT_SLEEP_TIMEOUT_MS = 120_000;
export const DEFAULT_FIRST_READING_MS = 2_000;
/** Looked at again without readNow: the sampler reads every second at most. */
export const DEFAULT_POLL_MS = 250;
/**
 * The first gap between fresh reads while memory has not changed yet: half
 * the 100 ms within which a sleep or wake is to be reported (issue 36 item 8).
 */
export const READ_NOW_INTERVAL_MS = 50;
/** The gap after each read is at least this many times the read's own duration. */
const READ_NOW_SPACING = 2;
/** Each miss lengthens the gap by this factor, up to `pollMs`. */
const READ_NOW_BACKOFF = 1.5;

/**
 * SIGTERM to SIGKILL for a sleeping engine: it has nothing worth draining,
 * and its drain would not end. vLLM leaves requests queued while paused
 * unscheduled, so its drain waits out --shutdown-timeout and then aborts
 * them (V:vllm/v1/engine/core.py:1487-1508, 1906-1937); SGLang's drain
 * counts the requests its pause holds (rid_to_state,
 * S:python/sglang/srt/managers/tokenizer_manager.py:796, 804-805, 3119-3146)
 * and never ends before the SIGKILL. Their clients see the connection
 * close, which a router retries elsewhere.
 */
export const ASLEEP_STOP_GRACE_MS = 1000;

/**
 * Where an adopted engine recorded asleep is asked whether it serves: a
 * path that runs no model. SGLang's /health generates, and a paused SGLang
 * holds it, answers 503 after 20 s and marks itself unhealthy, so that its
 * next SIGTERM skips the drain (S:python/sglang/srt/entrypoints/http_server.py:713-725;
 * tokenizer_manager.py:3123-3130). /metrics is open on both engines
 * (V:vllm/entrypoints/serve/middleware/authenticate.py:11, 59;
 * S:python/sglang/srt/utils/auth.py:100); /v1/models is asked beside it.
 */
export const ASLEEP_PROBE_PATH = '/metrics';

/** The shard's GPUs hold at most this share of what they held awake, or the sleep did not free them. */
export const ASLEEP_SHARE = 0.5;
/** Awake again once its GPUs hold this share of what they held before the sleep. */
export const AWAKE_SHARE = 0.8;

/**
 * Whether shard `shardId` may sleep at `level`, and by which API; throws a
 * one-line failure naming what is wrong. Nothing is touched before this.
 */
export function judgeSleep(shardId: string, state: ShardState, spec: StartShard, level: number, api: EngineSleepApi | undefined): EngineSleepApi {
  if (level !== 1 && level !== 2) throw failure(`sleep refused: level ${level} is not 1 (weights to host RAM) or 2 (weights dropped)`);
  const engine = spec.profile?.engine ?? '';
  if (!api) throw failure(`sleep refused: engine ${engine || '(none)'} of shard ${shardId} has no sleep mode`);
  if (!spec.profile?.sleepMode) throw failure(`sleep refused: profile ${spec.profile?.name ?? ''} of shard ${shardId} does not set sleep_mode`);
  if (state !== ShardState.READY) throw failure(`sleep refused: shard ${shardId} is ${stateName(state)}; only a READY shard can sleep`);
  return api;
}

/** The sum of MiB the shard's GPUs hold; undefined before the sampler has read them. */
export function shardGpuMib(readings: readonly number[], gpus: readonly number[]): number | undefined {
  let sum = 0;
  for (const g of gpus) {
    const v = readings[g];
    if (v === undefined) return undefined;
    sum += v;
  }
  return sum;
}

/**
 * The wait before the next fresh read, after `misses` reads that did not
 * show what is awaited, the last of which took `readMs`: READ_NOW_INTERVAL_MS
 * at first, so an engine that has done its part is seen within that; never
 * shorter than twice the read, so a slow nvidia-smi (NVML initialised for
 * every GPU on each start) is not started back to back, keeping it below a
 * third of the time; growing 1.5x a miss up to `maxMs`, for a change that
 * takes long (a level-1 sleep copying weights to host RAM) costs few reads.
 */
export function nextReadDelayMs(misses: number, readMs: number, maxMs: number): number {
  const base = Math.max(READ_NOW_INTERVAL_MS, READ_NOW_SPACING * readMs);
  return Math.min(Math.max(maxMs, READ_NOW_INTERVAL_MS), base * READ_NOW_BACKOFF ** misses);
}

/** A fresh reading through readNow, timed; undefined when there is no readNow or it failed. */
async function readFresh(probes: SleepProbes): Promise<{ readings: number[] | undefined; readMs: number }> {
  if (!probes.readNow) return { readings: undefined, readMs: 0 };
  const started = performance.now();
  const readings = await probes.readNow().catch(() => undefined);
  return { readings, readMs: performance.now() - started };
}

/**
 * What the shard's GPUs hold now: waits (up to `firstReadingMs`) for a
 * reading of them taken after `sinceMs` rather than refusing a sleep that
 * came just after Register or just after the shard became READY; throws a
 * one-line refusal when none comes. With readNow a reading is taken at once,
 * which is after the request by construction.
 */
export async function awaitFirstReading(probes: SleepProbes, gpus: readonly number[], signal: AbortSignal, sinceMs = Date.now()): Promise<number> {
  const waitMs = probes.firstReadingMs ?? DEFAULT_FIRST_READING_MS;
  const deadline = Date.now() + waitMs;
  const maxMs = probes.pollMs ?? DEFAULT_POLL_MS;
  for (let misses = 0; ; misses++) {
    const { readings, readMs } = await readFresh(probes);
    let mib = readings && shardGpuMib(readings, gpus);
    const fresh = probes.readAtMs === undefined || probes.readAtMs() > sinceMs;
    if (mib === undefined && fresh) mib = shardGpuMib(probes.gpuMemoryMib(), gpus);
    if (mib !== undefined) return mib;
    const left = deadline - Date.now();
    if (left <= 0) throw failure(`sleep refused: no ${fresh ? '' : 'new '}GPU memory reading for GPUs ${gpus.join(',')} in ${formatDuration(waitMs)}`);
    const gapMs = probes.readNow ? nextReadDelayMs(misses, readMs, maxMs) : maxMs;
    await sleep(Math.min(gapMs, left), undefined, { signal });
  }
}

export { memAvailableMib } from './host-room.js';

/**
 * Whether a sleep at `level` needs room in host RAM for a copy of the
 * weights, and what to do instead when there is none: vLLM's level 1 backs
 * them up to host RAM (V:vllm/v1/engine/core.py:867-878, "Please make sure
 * there's enough CPU memory") and frees the copy at the wake, so level 2 is
 * the way out; SGLang copies them at both levels and keeps the copy for the
 * engine's life (EngineSleepApi.hostCopyKept), so it needs room only at its
 * first sleep and level 2 is no way out. Undefined: no room needed.
 */
export function hostCopyAdvice(api: EngineSleepApi, level: 1 | 2, keptMib: number | undefined): string | undefined {
  if (!api.levels[level].hostCopy) return undefined;
  if (api.hostCopyKept) return keptMib === undefined ? 'free host memory, or stop the shard instead (SGLang keeps this copy at both levels)' : undefined;
  return 'use level 2';
}

/**
 * Makes one call of the engine's sleep API; throws a one-line failure when it
 * does not answer 2xx. Its answer is read through the probes' cap (64 KiB):
 * whoever answers on the engine's port chooses its size, and one answer of
 * 1.5 GB read whole took the agent to 3.2 GB (security review 3, S5).
 */
export async function callEngine(baseUrl: string, call: SleepCall, apiKey: string, signal: AbortSignal, timeoutMs = DEFAULT_SLEEP_TIMEOUT_MS): Promise<void> {
  let res: HttpResult;
  try {
    res = await httpGet(`${baseUrl}${call.path}`, {
      timeoutMs,
      signal,
      headers: bearer(apiKey),
      maxBytes: PROBE_BODY_MAX_BYTES,
      post: { json: call.body ?? '' },
    });
  } catch (err) {
    throw failure(`${call.method} ${call.path}: ${errorMessage(err)}`);
  }
  const text = res.body.replace(/\s+/g, ' ').slice(0, 200);
  if (res.status < 200 || res.status > 299) throw failure(`${call.method} ${call.path} answered ${res.status}${text ? `: ${text}` : ''}`);
}

/**
 * Waits until the shard's GPUs hold what `ok` wants; resolves with the last
 * reading, or throws after the timeout. With readNow it reads at once (the
 * engine's call has returned, so its memory has usually changed already)
 * and then every nextReadDelayMs; a failed fresh read falls back to the
 * sampler's latest reading.
 */
export async function awaitGpuMemory(
  probes: SleepProbes,
  gpus: readonly number[],
  ok: (mib: number) => boolean,
  what: string,
  signal: AbortSignal,
): Promise<number> {
  const deadline = Date.now() + (probes.timeoutMs ?? DEFAULT_SLEEP_TIMEOUT_MS);
  const maxMs = probes.pollMs ?? DEFAULT_POLL_MS;
  let last: number | undefined;
  for (let misses = 0; ; misses++) {
    const { readings, readMs } = await readFresh(probes);
    last = shardGpuMib(readings ?? probes.gpuMemoryMib(), gpus);
    if (last !== undefined && ok(last)) return last;
    if (Date.now() >= deadline) throw failure(`${what}: GPUs ${gpus.join(',')} still hold ${last ?? 'unknown'} MiB`);
    await sleep(probes.readNow ? nextReadDelayMs(misses, readMs, maxMs) : maxMs, undefined, { signal });
  }
}
