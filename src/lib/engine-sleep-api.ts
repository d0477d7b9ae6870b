/** One HTTP call to an engine's sleep API. */
export interface SleepCall {
  method: 'POST';
  /** Path and query on the engine's API port. */
  path: string;
  /** JSON body, when the endpoint takes one. */
  body?: string;
}

/**
 * How an engine wakes from one level: `resume` takes its GPU memory back
 * (never made twice on an engine that dies of it: wakeOnlyAsleep);
 * `restore` then puts the weights back where the memory alone does not
 * (calls that are safe to make again).
 */
export interface WakeCalls {
  resume: SleepCall[];
  restore: SleepCall[];
}

/** One level of sleep: the call that sends the engine there, and how it comes back. */
export interface SleepLevel {
  sleep: SleepCall;
  /** The calls that wake it from this level. */
  wake: WakeCalls;
  /**
   * Whether a sleep at this level keeps a copy of the weights in host RAM:
   * then the host must have room for it (checkHostRam).
   */
  hostCopy: boolean;
}

/**
 * How an engine sleeps and wakes: the calls, and whether it must be idle
 * first. Data, not code: the engine's wing gives it (Engine.sleepApi), its
 * EngineWatch records it at launch and the state file keeps it, so an engine
 * adopted by a later agent is slept and woken by the API it was launched
 * with, whatever that agent's own engines now say.
 */
export interface EngineSleepApi {
  levels: Readonly<Record<1 | 2, SleepLevel>>;
  /**
   * The host copy stays pinned after the wake, for the engine's life: its
   * later sleeps need no new room. SGLang's torch_memory_saver pauses with
   * `cudaMallocHost(&metadata.cpu_backup, …)` and its resume keeps the buffer
   * ("currently keep it there to reduce re-alloc time", csrc/core.cpp at
   * 1a565eb). vLLM's CuMemAllocator drops its CPU backup once copied back
   * (V:vllm/device_allocator/cumem.py:341-356).
   */
  hostCopyKept: boolean;
  /**
   * The engine must hold no request when told to sleep. SGLang asserts the
   * server is idle on a release (`assert self.is_fully_idle()` in
   * release_memory_occupation, S:python/sglang/srt/managers/scheduler_components/weight_updater.py:203-205
   * at 71de97b), and a failed assertion in the scheduler takes the engine
   * down: the agent refuses the sleep instead.
   */
  mustBeIdle: boolean;
  /**
   * Called before the sleep and after the wake, when the engine takes
   * requests it cannot serve asleep: SGLang's scheduler runs whatever reaches
   * it on the released memory, and only /pause_generation holds new
   * requests (its health checks too) in the tokenizer until
   * /continue_generation (S:python/sglang/srt/managers/tokenizer_manager.py:804-805,
   * 2010-2029; http_server.py:1685-1708, at 71de97b).
   */
  hold?: { pause: SleepCall; resume: SleepCall };
  /**
   * A wake of an engine that is not asleep ends it: SGLang's resume removes
   * each tag from offload_tags with set.remove, a KeyError in the scheduler
   * (S:python/sglang/srt/managers/scheduler_components/weight_updater.py:253-255),
   * and the tree dies. A sleep that failed is then undone only when the
   * engine answered the release.
   */
  wakeOnlyAsleep: boolean;
  /**
   * Whether its health check runs the model (SGLang's /health generates a
   * token by default): it is not probed while asleep, where that would be held
   * (or, unheld, run on released memory).
   */
  healthNeedsModel: boolean;
  /**
   * A /metrics series that is 0 while the engine sleeps, read every health
   * tick so that a sleep the agent did not ask for is seen (security review
   * 3, S6: with sleep mode the engine's /sleep takes no key); undefined when
   * the engine exports none. vLLM: engine_sleep_state's `awake` series
   * (V:vllm/v1/metrics/loggers.py:535-559, 1261-1278).
   */
  awakeGauge?: string;
  /**
   * A GET on the engine's API port answering `{"is_sleeping": bool}` from
   * the engine itself, asked when a restarted agent adopts the engine: its
   * state file may say otherwise when the agent stopped while a sleep or
   * wake was still under way (adopted-sleep.ts). vLLM: `/is_sleeping`, its
   * scheduler paused or any executor tag asleep
   * (V:vllm/entrypoints/serve/dev/sleep/api_router.py:45-48; V:vllm/v1/engine/core.py:923-925).
   * Undefined: the engine says nothing of it, and the record is trusted.
   */
  asleepQuery?: string;
  /**
   * The /metrics series that are 1 while the engine sleeps at level 1 and at
   * level 2: the level of an engine found asleep that its record says is
   * awake. vLLM: engine_sleep_state's `weights_offloaded` and `discard_all`
   * (V:vllm/v1/metrics/loggers.py:1261-1278), set by the API server once the
   * sleep has returned (V:vllm/v1/engine/async_llm.py:971-983).
   */
  levelGauges?: Readonly<Record<1 | 2, string>>;
}

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

function parseCall(v: unknown): SleepCall | undefined {
  if (!isRecord(v) || v.method !== 'POST' || typeof v.path !== 'string' || !v.path.startsWith('/')) return undefined;
  if (v.body !== undefined && typeof v.body !== 'string') return undefined;
  return { method: 'POST', path: v.path, ...(v.body !== undefined ? { body: v.body as string } : {}) };
}

function parseCalls(v: unknown): SleepCall[] | undefined {
  if (!Array.isArray(v)) return undefined;
  const calls = v.map(parseCall);
  return calls.every((c) => c !== undefined) ? (calls as SleepCall[]) : undefined;
}

function parseLevel(v: unknown): SleepLevel | undefined {
  if (!isRecord(v) || !isRecord(v.wake) || typeof v.hostCopy !== 'boolean') return undefined;
  const sleep = parseCall(v.sleep);
  const resume = parseCalls(v.wake.resume);
  const restore = parseCalls(v.wake.restore);
  if (!sleep || !resume || !restore) return undefined;
  return { sleep, wake: { resume, restore }, hostCopy: v.hostCopy };
}

/** The sleep API in a state file's watch; undefined for anything that is not one, every call and flag checked. */
export function parseEngineSleepApi(raw: unknown): EngineSleepApi | undefined {
  if (!isRecord(raw) || !isRecord(raw.levels)) return undefined;
  const one = parseLevel(raw.levels[1]);
  const two = parseLevel(raw.levels[2]);
  if (!one || !two) return undefined;
  const flags = ['hostCopyKept', 'mustBeIdle', 'wakeOnlyAsleep', 'healthNeedsModel'] as const;
  if (!flags.every((f) => typeof raw[f] === 'boolean')) return undefined;
  if (raw.awakeGauge !== undefined && typeof raw.awakeGauge !== 'string') return undefined;
  if (raw.asleepQuery !== undefined && (typeof raw.asleepQuery !== 'string' || !raw.asleepQuery.startsWith('/'))) return undefined;
  let levelGauges: EngineSleepApi['levelGauges'];
  if (raw.levelGauges !== undefined) {
    const g = raw.levelGauges;
    if (!isRecord(g) || typeof g[1] !== 'string' || typeof g[2] !== 'string') return undefined;
    levelGauges = { 1: g[1], 2: g[2] };
  }
  let hold: EngineSleepApi['hold'];
  if (raw.hold !== undefined) {
    const pause = isRecord(raw.hold) ? parseCall(raw.hold.pause) : undefined;
    const resume = isRecord(raw.hold) ? parseCall(raw.hold.resume) : undefined;
    if (!pause || !resume) return undefined;
    hold = { pause, resume };
  }
  return {
    levels: { 1: one, 2: two },
    hostCopyKept: raw.hostCopyKept as boolean,
    mustBeIdle: raw.mustBeIdle as boolean,
    wakeOnlyAsleep: raw.wakeOnlyAsleep as boolean,
    healthNeedsModel: raw.healthNeedsModel as boolean,
    ...(hold ? { hold } : {}),
    ...(typeof raw.awakeGauge === 'string' ? { awakeGauge: raw.awakeGauge } : {}),
    ...(typeof raw.asleepQuery === 'string' ? { asleepQuery: raw.asleepQuery } : {}),
    ...(levelGauges ? { levelGauges } : {}),
  };
}
