/**
 * The SGLang double's command line (fake-sglang.ts): the flags of
 * S:python/sglang/srt/server_args.py it takes, their defaults, and the
 * options they make. Knobs SGLang does not have start with --sim- (sim-knobs.ts).
 */
import { ARGPARSE_EXIT, type ArgSpec, ArgparseError, parseArgv, printArgparseError } from './engine-argv.js';
import type { SglangLoraOptions } from './fake-sglang-lora.js';
import { SIM_KNOB_SPECS, type SimKnobs, simKnobs } from './sim-knobs.js';

export const DEFAULT_SGLANG_VERSION = '0.5.18';

/** S:python/sglang/srt/server_args.py:1277-1278. */
const DEFAULT_HOST = '127.0.0.1';
const DEFAULT_PORT = 30000;

/** --decode-log-interval's default, in decode steps (S:python/sglang/srt/server_args.py:1627-1631). */
const DEFAULT_DECODE_LOG_INTERVAL = 40;

export interface FakeSglangOptions {
  model: string;
  servedName: string;
  host: string;
  port: number;
  tp: number;
  pp: number;
  metrics: boolean;
  nnodes: number;
  nodeRank: number;
  apiKey?: string;
  /** --admin-api-key: the key of the ADMIN_OPTIONAL routes (S:python/sglang/srt/utils/auth.py:123-138). */
  adminApiKey?: string;
  embedding: boolean;
  priorityScheduling: boolean;
  skipWarmup: boolean;
  /** --enable-memory-saver (fake-sglang-memory-saver.ts). */
  memorySaver: boolean;
  /** --enable-weights-cpu-backup: a release keeps the weights in host RAM (fake-sglang-memory-saver.ts). */
  weightsCpuBackup: boolean;
  /** --decode-log-interval: decode steps between two refreshes of the scheduler's gauges. */
  decodeLogInterval: number;
  /** --revision: the hub revision of the weights; main when absent. */
  revision: string;
  /** --tokenizer-path, at --revision: its files fetched online and required offline with --sim-read-weights. */
  tokenizer?: { repo: string; revision: string };
  /** --speculative-draft-model-path at --speculative-draft-model-revision: its weights read with --sim-read-weights. */
  draft?: { repo: string; revision: string };
  /** --dist-init-addr host:port: rank 0's rendezvous, where the other nodes join; absent on one node. */
  distInitAddr?: string;
  /** --watchdog-timeout: seconds a forward step may hang before the scheduler crashes the server (default 300). */
  watchdogTimeoutS: number;
  /** --max-queued-requests (S:python/sglang/srt/server_args.py:782-786): more waiting are refused 503. */
  maxQueuedRequests?: number;
  /** LoRA (fake-sglang-lora.ts). */
  lora: SglangLoraOptions;
  /** An AssertionError ServerArgs raises before anything starts (check_lora_server_args); it exits 1. */
  startError?: string;
  knobs: SimKnobs;
}

const SPECS: readonly ArgSpec[] = [
  // S:python/sglang/srt/server_args.py:2761-2810 (the LoRA group).
  { names: ['--enable-lora'], kind: 'flag' },
  { names: ['--sim-lora-name-keyed-pool'], kind: 'flag' },
  { names: ['--max-lora-rank'], kind: 'int' },
  { names: ['--lora-target-modules'], kind: 'strings' },
  { names: ['--lora-paths'], kind: 'strings' },
  { names: ['--max-loaded-loras'], kind: 'int' },
  { names: ['--max-loras-per-batch'], kind: 'int' },
  { names: ['--lora-eviction-policy'], kind: 'string', choices: ['lru', 'fifo'] },
  // S:python/sglang/srt/server_args.py:492-499 (required), 1277-1278, 1369-1373.
  { names: ['--model-path', '--model'], kind: 'string' },
  // S:python/sglang/srt/server_args.py: --revision, the hub revision the weights are read at.
  { names: ['--revision'], kind: 'string' },
  // S:python/sglang/srt/server_args.py:500 (tokenizer_path, read at --revision: 4348-4352) and 2079, 2087
  // (the draft, at --speculative-draft-model-revision, else main: 4354-4357): read with --sim-read-weights.
  { names: ['--tokenizer-path'], kind: 'string' },
  { names: ['--speculative-draft-model-path', '--speculative-draft-model'], kind: 'string' },
  { names: ['--speculative-draft-model-revision'], kind: 'string' },
  { names: ['--speculative-algorithm'], kind: 'string' },
  { names: ['--host'], kind: 'string' },
  { names: ['--port'], kind: 'int' },
  { names: ['--served-model-name'], kind: 'string' },
  // S:python/sglang/srt/server_args.py:1010-1017, 1026.
  { names: ['--tp-size', '--tensor-parallel-size'], kind: 'int' },
  { names: ['--pp-size', '--pipeline-parallel-size'], kind: 'int' },
  // S:python/sglang/srt/server_args.py:1547-1549.
  { names: ['--enable-metrics'], kind: 'flag' },
  // S:python/sglang/srt/server_args.py:995-1009.
  { names: ['--nnodes'], kind: 'int' },
  { names: ['--node-rank'], kind: 'int' },
  { names: ['--dist-init-addr', '--nccl-init-addr'], kind: 'string' },
  { names: ['--api-key'], kind: 'string' },
  // S:python/sglang/srt/server_args.py (shared/fixtures/engines/sglang-server-flags.txt:72); utils/auth.py:123-138.
  { names: ['--admin-api-key'], kind: 'string' },
  { names: ['--is-embedding'], kind: 'flag' },
  { names: ['--enable-priority-scheduling'], kind: 'flag' },
  { names: ['--max-queued-requests'], kind: 'int' },
  // S:python/sglang/srt/server_args.py:1319.
  { names: ['--skip-server-warmup'], kind: 'flag' },
  // S:python/sglang/srt/server_args.py:3478-3482, 3483-3487.
  { names: ['--enable-memory-saver'], kind: 'flag' },
  { names: ['--enable-weights-cpu-backup'], kind: 'flag' },
  // S:python/sglang/srt/server_args.py:1627-1631 (default 40).
  { names: ['--decode-log-interval'], kind: 'int' },
  // S:python/sglang/srt/server_args.py:1246-1250 (default 300).
  { names: ['--watchdog-timeout'], kind: 'float' },
  ...SIM_KNOB_SPECS,
];

/** SGLang's options from its argv (without `serve`); throws ArgparseError as its parser would refuse it. */
export function parseFakeSglangArgv(argv: readonly string[]): FakeSglangOptions {
  const p = parseArgv(argv, SPECS, { maxPositionals: 0 });
  const knobs = simKnobs(p);
  const model = p.values.get('--model-path') as string | undefined;
  if (!model) throw new ArgparseError('the following arguments are required: --model-path/--model');
  const int = (name: string, dflt: number) => (p.values.get(name) as number | undefined) ?? dflt;
  const { lora, startError } = loraOptions(p.values);
  return {
    model,
    lora,
    ...(startError ? { startError } : {}),
    servedName: (p.values.get('--served-model-name') as string | undefined) ?? model,
    host: (p.values.get('--host') as string | undefined) ?? DEFAULT_HOST,
    port: int('--port', DEFAULT_PORT),
    tp: int('--tp-size', 1),
    pp: int('--pp-size', 1),
    metrics: p.values.get('--enable-metrics') === true,
    nnodes: int('--nnodes', 1),
    nodeRank: int('--node-rank', 0),
    apiKey: p.values.get('--api-key') as string | undefined,
    adminApiKey: p.values.get('--admin-api-key') as string | undefined,
    embedding: p.values.get('--is-embedding') === true,
    priorityScheduling: p.values.get('--enable-priority-scheduling') === true,
    skipWarmup: p.values.get('--skip-server-warmup') === true,
    memorySaver: p.values.get('--enable-memory-saver') === true,
    weightsCpuBackup: p.values.get('--enable-weights-cpu-backup') === true,
    decodeLogInterval: decodeLogInterval(p.values.get('--decode-log-interval')),
    distInitAddr: p.values.get('--dist-init-addr') as string | undefined,
    revision: (p.values.get('--revision') as string | undefined) ?? 'main',
    ...(p.values.has('--tokenizer-path') ? { tokenizer: { repo: String(p.values.get('--tokenizer-path')), revision: (p.values.get('--revision') as string | undefined) ?? 'main' } } : {}),
    ...(p.values.has('--speculative-draft-model-path') ? { draft: { repo: String(p.values.get('--speculative-draft-model-path')), revision: (p.values.get('--speculative-draft-model-revision') as string | undefined) ?? 'main' } } : {}),
    watchdogTimeoutS: (p.values.get('--watchdog-timeout') as number | undefined) ?? 300,
    maxQueuedRequests: p.values.get('--max-queued-requests') as number | undefined,
    knobs,
  };
}

/**
 * --enable-lora and its limits, checked as check_lora_server_args does
 * (S:python/sglang/srt/server_args.py:8908-9032): --lora-paths turns LoRA on
 * (:8911-8917); without them --max-lora-rank and --lora-target-modules are
 * both needed (:9018-9021); --max-loaded-loras at least --max-loras-per-batch
 * and the paths given (:9023-9032).
 */
function loraOptions(v: Map<string, unknown>): { lora: SglangLoraOptions; startError?: string } {
  const given = (v.get('--lora-paths') as string[] | undefined) ?? [];
  const paths = given.map((g, i) => (g.includes('=') ? { name: g.slice(0, g.indexOf('=')), path: g.slice(g.indexOf('=') + 1) } : { name: g || `lora${i}`, path: g }));
  const enabled = v.get('--enable-lora') === true || paths.length > 0;
  const perBatch = (v.get('--max-loras-per-batch') as number | undefined) ?? 8;
  const maxLoaded = v.get('--max-loaded-loras') as number | undefined;
  const maxRank = v.get('--max-lora-rank') as number | undefined;
  const lora: SglangLoraOptions = { enabled, perBatch, paths, nameKeyedPool: v.get('--sim-lora-name-keyed-pool') === true, ...(maxLoaded !== undefined ? { maxLoaded } : {}), ...(maxRank !== undefined ? { maxRank } : {}) };
  let startError: string | undefined;
  if (perBatch <= 0) startError = 'AssertionError: max_loras_per_batch must be positive';
  else if (enabled && paths.length === 0 && !(maxRank && v.has('--lora-target-modules'))) {
    startError = 'AssertionError: When no initial --lora-paths is provided, you need to specify both --max-lora-rank and --lora-target-modules for LoRA initialization.';
  } else if (enabled && maxLoaded !== undefined && maxLoaded < perBatch) {
    startError = `AssertionError: max_loaded_loras should be greater than or equal to max_loras_per_batch. max_loaded_loras=${maxLoaded}, max_loras_per_batch=${perBatch}`;
  } else if (enabled && maxLoaded !== undefined && paths.length > maxLoaded) {
    startError = `AssertionError: The number of LoRA paths should not exceed max_loaded_loras. max_loaded_loras=${maxLoaded}, lora_paths=${paths.length}`;
  }
  return { lora, ...(startError ? { startError } : {}) };
}

/** The decode log interval given; SGLang divides by it, so 0 or less is refused here (the double's check, not argparse's). */
function decodeLogInterval(v: unknown): number {
  if (v === undefined) return DEFAULT_DECODE_LOG_INTERVAL;
  if (typeof v !== 'number' || v < 1) throw new ArgparseError(`argument --decode-log-interval: must be at least 1, got '${String(v)}'`);
  return v;
}

/**
 * The double's command line as SGLang's two entry points take it: `sglang
 * serve …` (S:python/pyproject.toml:201-203) or `python3 -m
 * sglang.launch_server …`. A flag argparse would refuse is printed as
 * argparse prints it, and the process exits with argparse's status.
 */
export function sglangCommandLine(given: readonly string[]): FakeSglangOptions {
  const viaCli = given[0] === 'serve';
  const argv = viaCli ? given.slice(1) : given;
  const prog = viaCli ? 'sglang serve' : 'launch_server.py';
  try {
    return parseFakeSglangArgv(argv);
  } catch (err) {
    if (!(err instanceof ArgparseError)) throw err;
    printArgparseError(`${prog} [-h] --model-path MODEL_PATH [--host HOST] [--port PORT] [options]`, prog, err.message);
    process.exit(ARGPARSE_EXIT);
  }
}
