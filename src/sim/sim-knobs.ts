/**
 * The knobs of the engine doubles (bin/fake-vllm, bin/fake-sglang) that no
 * real engine has. They ride in a profile's args next to the engine's own
 * flags, so every one starts with `--sim-`, a prefix neither engine uses.
 * Every duration is a string ("200ms", "5s") on the command line and
 * milliseconds here.
 */
import { parseDuration } from '../lib/duration.js';
import { type ArgSpec, ArgparseError, type ParsedArgv } from './engine-argv.js';

export interface SimKnobs {
  /** The port stays closed (connection refused) this long, as while loading weights. Default 0. */
  loadTimeMs: number;
  /** Time per generated token (and per prefill). Default 5 ms. */
  tokenLatencyMs: number;
  /** Tokens generated when a request does not say (it then finishes with "stop"). Default 16. */
  maxTokens: number;
  /** Requests in the batch at once; more wait in the queue (vLLM's max-num-seqs). Default: no limit. */
  maxRunning: number;
  /** From this long after start no token is produced; requests stay running. */
  stallAfterMs?: number;
  /** From this long after start nothing is answered, health included; the process stays. */
  hangAfterMs?: number;
  /** This long after start the engine fails (as a CUDA error would). */
  failAfterMs?: number;
  /** The engine version the double claims to be, e.g. "0.17" (changes which flags exist). */
  version?: string;
  /** Time an embedding request takes (its whole prefill). Default 5 ms. */
  embedLatencyMs: number;
  /** SGLang only: how often the SIGTERM drain loop looks for requests left. Default 5 s. */
  drainPollMs: number;
  /** MiB the engine holds on each of its GPUs while awake (its weights and KV cache); 0: none shown. */
  gpuMemoryMib: number;
  /** Where it records that memory for bin/fake-nvidia-smi (fake-gpu-usage.ts); unset: nowhere. */
  gpuUsageDir?: string;
  /** How long a wake from sleep takes (weights copied back). Default 100 ms. */
  wakeTimeMs: number;
  /**
   * --sim-disk-rate N (MiB/s): vLLM's reload_weights reads the weights at this
   * rate (fake-vllm-sleep-faults.ts reloadMs); undefined: it takes wakeTimeMs.
   */
  diskMibPerS?: number;
  /**
   * --sim-mem-available N (MiB): the host's MemAvailable as SGLang's pinned
   * CPU backup sees it (fake-sglang-memory-saver.ts); undefined: unlimited.
   */
  memAvailableMib?: number;
  /** --sim-gpu-total N (MiB): each GPU's memory, which a resume must fit beside other processes' (fake-sglang-memory-saver.ts); default 81559 (H100 80GB). */
  gpuTotalMib: number;
  /**
   * vLLM double only (--sim-read-weights): before serving, read every file of
   * the model's snapshot from the hub cache (HF_HUB_CACHE), failing the start
   * when it is not there; it never downloads (fake-weights.ts). SIGUSR2 reads
   * them again and answers by them (another checkpoint served). Default off.
   */
  readWeights: boolean;
  /**
   * torch.compile's time (both doubles: fake-compile-cache.ts) when the cache holds no
   * compiled graph of this model; the marker is written after it, so the next
   * start skips it (fake-weights.ts). Default 0: no compile step.
   */
  compileTimeMs: number;
  /**
   * vLLM double only, a fault to inject (--sim-wake-loses-weights): every
   * wake of the weights leaves memory that no longer holds them, whatever the
   * level and the reload, so the engine answers garbage while /health,
   * /v1/models and its GPU memory look right. Not a claim about vLLM: the
   * silent case the agent's known-answer check exists for (a restore that
   * fails without an error, as vLLM #29341 reports for level 2). Default off.
   */
  wakeLosesWeights: boolean;
  /**
   * After each wake (vLLM's /wake_up that resumes the scheduler, SGLang's
   * /continue_generation) the batch is busy this long with the work the
   * engine held while asleep, and a request queued then, the agent's known
   * answer included, waits for it: vLLM queues what arrives while paused and
   * runs it once resumed (V:vllm/v1/engine/core.py:828-857, 905-921), SGLang
   * holds it in its tokenizer until it continues
   * (S:python/sglang/srt/managers/tokenizer_manager.py:804-805, 2025-2029),
   * and behind max_num_seqs long generations a short request waits for a
   * slot. Stands for those held requests without sending them. Default 0.
   */
  wakeQueueDelayMs: number;
  /**
   * vLLM double only, TP/PP across nodes: rank 0 binds its TCPStore on
   * --master-port only this long after the start, and loads only then: the
   * store is bound once rank 0's workers have imported vLLM and run
   * init_process_group (V:vllm/distributed/parallel_state.py:1620-1626, 1685-1691),
   * typically tens of seconds. Default: at once.
   */
  storeBindAfterMs?: number;
  /**
   * --sim-hold-file PATH: a sleep or wake step named on a line of PATH waits
   * before it runs until the line is gone (sim-hold.ts); unset: none waits.
   */
  holdFile?: string;
  /**
   * vLLM double only, for tests: how often the API server's watchdog looks
   * for a dead engine, so how long after its death the process exits.
   * Default 5 s, vLLM's own (fake-vllm.ts failEngine); at least 1 ms. Tests that
   * wait for that exit and are not about its timing shorten it.
   */
  engineWatchdogMs: number;
}

export const SIM_KNOB_DEFAULTS = {
  loadTimeMs: 0,
  tokenLatencyMs: 5,
  maxTokens: 16,
  maxRunning: Number.POSITIVE_INFINITY,
  embedLatencyMs: 5,
  // S:python/sglang/srt/managers/tokenizer_manager.py:3114-3158 (the drain loop sleeps 5 s between looks).
  drainPollMs: 5000,
  wakeTimeMs: 100,
  compileTimeMs: 0,
  // V:vllm/entrypoints/launchers/launcher.py:180-202 (the watchdog loop sleeps 5 s between looks).
  engineWatchdogMs: 5000,
} as const;

const DURATION_KNOBS = [
  '--sim-load-time',
  '--sim-token-latency',
  '--sim-stall-after',
  '--sim-hang-after',
  '--sim-fail-after',
  '--sim-embed-latency',
  '--sim-drain-poll',
  '--sim-wake-time',
  '--sim-compile-time',
  '--sim-wake-queue-delay',
  '--sim-store-bind-after',
  '--sim-engine-watchdog',
] as const;

export const SIM_KNOB_SPECS: readonly ArgSpec[] = [
  ...DURATION_KNOBS.map((n) => ({ names: [n], kind: 'string' as const })),
  { names: ['--sim-max-tokens'], kind: 'int' },
  { names: ['--sim-max-running'], kind: 'int' },
  { names: ['--sim-version'], kind: 'string' },
  { names: ['--sim-gpu-memory'], kind: 'int' },
  { names: ['--sim-gpu-usage-dir'], kind: 'string' },
  { names: ['--sim-read-weights'], kind: 'flag' },
  { names: ['--sim-wake-loses-weights'], kind: 'flag' },
  { names: ['--sim-disk-rate'], kind: 'int' },
  { names: ['--sim-mem-available'], kind: 'int' },
  { names: ['--sim-gpu-total'], kind: 'int' },
  { names: ['--sim-hold-file'], kind: 'string' },
];

function duration(parsed: ParsedArgv, name: (typeof DURATION_KNOBS)[number]): number | undefined {
  const text = parsed.values.get(name);
  if (text === undefined) return undefined;
  const ms = parseDuration(String(text));
  if (ms === undefined) throw new ArgparseError(`argument ${name}: invalid duration value: '${String(text)}' (write it like 200ms or 5s)`);
  return ms;
}

function positiveInt(parsed: ParsedArgv, name: string): number | undefined {
  const v = parsed.values.get(name);
  if (v === undefined) return undefined;
  if (typeof v !== 'number' || v < 1) throw new ArgparseError(`argument ${name}: must be at least 1, got '${String(v)}'`);
  return v;
}

/** The knobs out of a parsed command line, defaults filled in; throws ArgparseError for a bad value. */
export function simKnobs(parsed: ParsedArgv): SimKnobs {
  const version = parsed.values.get('--sim-version');
  if (version !== undefined && !/^\d+\.\d+(\.\d+)?$/.test(String(version))) {
    throw new ArgparseError(`argument --sim-version: invalid version: '${String(version)}' (write it like 0.17)`);
  }
  const maxTokens = parsed.values.get('--sim-max-tokens');
  if (typeof maxTokens === 'number' && maxTokens < 0) throw new ArgparseError(`argument --sim-max-tokens: must be at least 0, got '${maxTokens}'`);
  return {
    loadTimeMs: duration(parsed, '--sim-load-time') ?? SIM_KNOB_DEFAULTS.loadTimeMs,
    tokenLatencyMs: duration(parsed, '--sim-token-latency') ?? SIM_KNOB_DEFAULTS.tokenLatencyMs,
    maxTokens: typeof maxTokens === 'number' ? maxTokens : SIM_KNOB_DEFAULTS.maxTokens,
    maxRunning: positiveInt(parsed, '--sim-max-running') ?? SIM_KNOB_DEFAULTS.maxRunning,
    stallAfterMs: duration(parsed, '--sim-stall-after'),
    hangAfterMs: duration(parsed, '--sim-hang-after'),
    failAfterMs: duration(parsed, '--sim-fail-after'),
    version: version === undefined ? undefined : String(version),
    embedLatencyMs: duration(parsed, '--sim-embed-latency') ?? SIM_KNOB_DEFAULTS.embedLatencyMs,
    drainPollMs: duration(parsed, '--sim-drain-poll') ?? SIM_KNOB_DEFAULTS.drainPollMs,
    gpuMemoryMib: positiveInt(parsed, '--sim-gpu-memory') ?? 0,
    gpuUsageDir: parsed.values.has('--sim-gpu-usage-dir') ? String(parsed.values.get('--sim-gpu-usage-dir')) : undefined,
    wakeTimeMs: duration(parsed, '--sim-wake-time') ?? SIM_KNOB_DEFAULTS.wakeTimeMs,
    readWeights: parsed.values.get('--sim-read-weights') === true,
    compileTimeMs: duration(parsed, '--sim-compile-time') ?? SIM_KNOB_DEFAULTS.compileTimeMs,
    wakeLosesWeights: parsed.values.get('--sim-wake-loses-weights') === true,
    wakeQueueDelayMs: duration(parsed, '--sim-wake-queue-delay') ?? 0,
    diskMibPerS: positiveInt(parsed, '--sim-disk-rate'),
    memAvailableMib: positiveInt(parsed, '--sim-mem-available'),
    gpuTotalMib: positiveInt(parsed, '--sim-gpu-total') ?? 81559,
    storeBindAfterMs: duration(parsed, '--sim-store-bind-after'),
    holdFile: parsed.values.has('--sim-hold-file') ? String(parsed.values.get('--sim-hold-file')) : undefined,
    engineWatchdogMs: duration(parsed, '--sim-engine-watchdog') ?? SIM_KNOB_DEFAULTS.engineWatchdogMs,
  };
}

/** "0.17" < "0.18": compares dotted versions numerically. */
export function versionBefore(version: string, than: string): boolean {
  const a = version.split('.').map(Number);
  const b = than.split('.').map(Number);
  for (let i = 0; i < Math.max(a.length, b.length); i++) {
    const d = (a[i] ?? 0) - (b[i] ?? 0);
    if (d !== 0) return d < 0;
  }
  return false;
}
