/**
 * The vLLM double's command line (fake-vllm.ts): the flags of `vllm serve`
 * it takes, their defaults, the options they make, and what they decide of
 * the processes a node runs (API servers, workers) and of its address.
 * Knobs vLLM does not have start with --sim- (sim-knobs.ts).
 */
import { networkInterfaces } from 'node:os';
import { type ArgSpec, ArgparseError, parseArgv } from './engine-argv.js';
import type { VllmLoraOptions } from './fake-vllm-lora.js';
import { LOAD_FORMATS } from './fake-vllm-sleep-faults.js';
import { SIM_KNOB_SPECS, type SimKnobs, simKnobs, versionBefore } from './sim-knobs.js';

/** The commit the citations are at lies between v0.27.1 and v0.28.0. */
export const DEFAULT_VLLM_VERSION = '0.27.1';

/** --shutdown-timeout was added by vLLM PR #36666, first released in v0.18.0 (review §0 #11). */
const SHUTDOWN_TIMEOUT_SINCE = '0.18';

/** V:vllm/entrypoints/openai/cli_args.py:246-248. */
const DEFAULT_PORT = 8000;

export interface FakeVllmOptions {
  model: string;
  /** --revision: the branch, tag or commit of the model's weights; main when not given. */
  revision: string;
  /** --served-model-name; the first is reported and labels the metrics (V:vllm/engine/arg_utils.py:903-905). */
  servedNames: string[];
  /** undefined: every interface (V:vllm/entrypoints/launchers/launcher.py:268). */
  host?: string;
  port: number;
  tp: number;
  pp: number;
  shutdownTimeoutS: number;
  apiKeys: string[];
  nnodes: number;
  /** --master-addr/--master-port: rank 0's rendezvous, where the gang's other nodes join (V:vllm/engine/arg_utils.py:1025-1028). */
  masterAddr: string;
  masterPort?: number;
  nodeRank: number;
  headless: boolean;
  dp: number;
  dpLocal?: number;
  dpStartRank?: number;
  /** --data-parallel-address / --data-parallel-rpc-port: rank 0's start-up handshake (sim-dp-handshake.ts). */
  dpAddress?: string;
  dpRpcPort?: number;
  /**
   * API server processes: --api-server-count, else the default of the DP
   * load-balancing mode (V:vllm/entrypoints/cli/serve.py:101-124); 0 headless.
   */
  apiServers: number;
  /** A ValueError `vllm serve` raises before starting anything (serve.py:63-100); it exits 1. */
  startError?: string;
  runner: 'generate' | 'pooling';
  loadTracking: boolean;
  logStats: boolean;
  version: string;
  knobs: SimKnobs;
  /** --enable-sleep-mode. */
  sleepMode: boolean;
  /** --scheduling-policy (V:vllm/config/scheduler.py:22, 99; V:vllm/engine/arg_utils.py:1545): how the waiting queue is ordered. */
  schedulingPolicy: 'fcfs' | 'priority';
  /** --load-format (V:vllm/engine/arg_utils.py; LoadFormats, V:vllm/model_executor/model_loader/__init__.py:33-48); default auto. */
  loadFormat: string;
  /** --max-model-len as given: hashed into the compile cache's key (fake-compile-cache.ts). */
  maxModelLen?: string;
  /** --speculative-config given: a draft model proposes tokens (fake-vllm-sleep-faults.ts FakeSpecDecode). */
  speculative: boolean;
  /** --tokenizer and --tokenizer-revision (None: main) (V:vllm/engine/arg_utils.py:848, 823-825): read with --sim-read-weights. */
  tokenizer?: { repo: string; revision: string };
  /** The draft of --speculative-config's "model" at its "revision" (None: main) (V:vllm/config/speculative.py:94, 132, 903-917): its weights read with --sim-read-weights. */
  draft?: { repo: string; revision: string };
  /** --enable-lora and its limits (fake-vllm-lora.ts). */
  lora: VllmLoraOptions;
}

function specs(version: string): ArgSpec[] {
  const s: ArgSpec[] = [
    // V:vllm/utils/argparse_utils.py:253-285: --model is still accepted.
    { names: ['--model'], kind: 'string' },
    // EngineArgs.revision (V:vllm/engine/arg_utils.py): which snapshot --sim-read-weights reads.
    { names: ['--revision'], kind: 'string' },
    // V:vllm/engine/arg_utils.py:867 (ModelConfig.max_model_len), a hashed field of the compile cache's key.
    { names: ['--max-model-len'], kind: 'string' },
    { names: ['--host'], kind: 'string' },
    { names: ['--port'], kind: 'int' },
    { names: ['--served-model-name'], kind: 'strings' },
    // V:vllm/engine/arg_utils.py:1020-1024, 1058-1060.
    { names: ['--tensor-parallel-size', '-tp'], kind: 'int' },
    { names: ['--pipeline-parallel-size', '-pp'], kind: 'int' },
    { names: ['--api-key'], kind: 'strings' },
    // V:vllm/engine/arg_utils.py:1025-1028.
    { names: ['--nnodes', '-n'], kind: 'int' },
    { names: ['--node-rank', '-r'], kind: 'int' },
    { names: ['--master-addr'], kind: 'string' },
    { names: ['--master-port'], kind: 'int' },
    // V:vllm/entrypoints/openai/cli_args.py:379-385.
    { names: ['--headless'], kind: 'flag' },
    // V:vllm/engine/arg_utils.py:1083-1114.
    { names: ['--data-parallel-size', '-dp'], kind: 'int' },
    { names: ['--data-parallel-size-local', '-dpl'], kind: 'int' },
    { names: ['--data-parallel-start-rank', '-dpr'], kind: 'int' },
    { names: ['--data-parallel-address', '-dpa'], kind: 'string' },
    { names: ['--data-parallel-rpc-port', '-dpp'], kind: 'int' },
    { names: ['--data-parallel-rank', '-dpn'], kind: 'int' },
    { names: ['--data-parallel-hybrid-lb', '-dph'], kind: 'flag' },
    { names: ['--data-parallel-external-lb', '-dpe'], kind: 'flag' },
    // V:vllm/entrypoints/openai/cli_args.py:386-393: default None, decided in serve.py:107-124.
    { names: ['--api-server-count', '-asc'], kind: 'int' },
    { names: ['--runner'], kind: 'string', choices: ['auto', 'generate', 'pooling', 'draft'] },
    // V:vllm/entrypoints/openai/cli_args.py:136.
    { names: ['--enable-server-load-tracking'], kind: 'flag' },
    // V:vllm/engine/arg_utils.py:1673-1677.
    { names: ['--disable-log-stats'], kind: 'flag' },
    // V:vllm/engine/arg_utils.py:919-921.
    { names: ['--enable-sleep-mode'], kind: 'flag' },
    { names: ['--scheduling-policy'], kind: 'string', choices: ['fcfs', 'priority'] },
    { names: ['--load-format'], kind: 'string', choices: LOAD_FORMATS },
    // A JSON object; its "model" is the draft, read as a model of its own with --sim-read-weights.
    { names: ['--speculative-config', '-sc'], kind: 'string' },
    { names: ['--tokenizer'], kind: 'string' },
    { names: ['--tokenizer-revision'], kind: 'string' },
    // V:vllm/engine/arg_utils.py:609-614; --max-lora-rank's choices are MaxLoRARanks (V:vllm/config/lora.py:27).
    { names: ['--enable-lora'], kind: 'flag' },
    { names: ['--max-loras'], kind: 'int' },
    { names: ['--max-lora-rank'], kind: 'int', choices: ['1', '8', '16', '32', '64', '128', '256', '320', '512'] },
    { names: ['--max-cpu-loras'], kind: 'int' },
    { names: ['--sim-lora-wrong-adapter'], kind: 'flag' },
    { names: ['--sim-lora-load-crash-busy'], kind: 'flag' },
    { names: ['--sim-lora-not-applied'], kind: 'flag' },
    { names: ['--sim-lora-stale-id'], kind: 'flag' },
    // V:vllm/entrypoints/openai/cli_args.py:32-75, 205-206: NAME=PATH (or JSON, which the double does not read).
    { names: ['--lora-modules'], kind: 'strings' },
    ...SIM_KNOB_SPECS,
  ];
  // V:vllm/engine/arg_utils.py:1694-1699 (type=int, default 0); absent before
  // PR #36666, so an older vLLM calls it unrecognized and exits 2.
  if (!versionBefore(version, SHUTDOWN_TIMEOUT_SINCE)) s.push({ names: ['--shutdown-timeout'], kind: 'int' });
  return s;
}

/** The draft model a --speculative-config JSON names ("model", at "revision"); none for a method without one (ngram) or a value that is not JSON. */
function draftOf(config: string | undefined): { draft?: { repo: string; revision: string } } {
  if (config === undefined) return {};
  try {
    const c = JSON.parse(config) as { model?: unknown; revision?: unknown };
    return typeof c.model === 'string' && c.model !== '' ? { draft: { repo: c.model, revision: typeof c.revision === 'string' ? c.revision : 'main' } } : {};
  } catch {
    return {};
  }
}

/** vLLM's options from `serve …` argv (without the `serve`); throws ArgparseError as vLLM's parser would refuse it. */
export function parseFakeVllmArgv(argv: readonly string[], env: NodeJS.ProcessEnv = process.env): FakeVllmOptions {
  // The version decides which flags exist, so it is read before the rest.
  const versionAt = argv.findIndex((a) => a === '--sim-version' || a.startsWith('--sim-version='));
  const versionArg = versionAt === -1 ? undefined : argv[versionAt]?.includes('=') ? argv[versionAt]?.split('=')[1] : argv[versionAt + 1];
  const version = versionArg ?? DEFAULT_VLLM_VERSION;
  // V:vllm/entrypoints/openai/cli_args.py:373-378: one positional, model_tag.
  const p = parseArgv(argv, specs(version), { maxPositionals: 1, underscoresAsDashes: true });
  const knobs = simKnobs(p);
  const model = p.positionals[0] ?? (p.values.get('--model') as string | undefined);
  if (!model) throw new ArgparseError('the double needs a model: give it as `vllm serve <model>`');
  const int = (name: string, dflt: number) => (p.values.get(name) as number | undefined) ?? dflt;
  const names = p.values.get('--served-model-name') as string[] | undefined;
  // V:vllm/entrypoints/serve/middleware/register.py:33: --api-key, else VLLM_API_KEY.
  const keys = (p.values.get('--api-key') as string[] | undefined) ?? (env.VLLM_API_KEY ? [env.VLLM_API_KEY] : []);
  const runner = p.values.get('--runner');
  const api = apiServers({
    headless: p.values.get('--headless') === true,
    given: p.values.get('--api-server-count') as number | undefined,
    dp: int('--data-parallel-size', 1),
    dpLocal: p.values.get('--data-parallel-size-local') as number | undefined,
    externalLb: p.values.get('--data-parallel-external-lb') === true || p.values.get('--data-parallel-rank') !== undefined,
    hybridLb: p.values.get('--data-parallel-hybrid-lb') === true || p.values.get('--data-parallel-start-rank') !== undefined,
  });
  const maxLoras = int('--max-loras', 1);
  const maxCpuLoras = p.values.get('--max-cpu-loras') as number | undefined;
  const lora: VllmLoraOptions = {
    enabled: p.values.get('--enable-lora') === true,
    maxLoras,
    maxRank: int('--max-lora-rank', 16),
    maxCpuLoras: maxCpuLoras ?? maxLoras,
    wrongAdapter: p.values.get('--sim-lora-wrong-adapter') === true,
    loadCrashBusy: p.values.get('--sim-lora-load-crash-busy') === true,
    notApplied: p.values.get('--sim-lora-not-applied') === true,
    staleId: p.values.get('--sim-lora-stale-id') === true,
    modules: ((p.values.get('--lora-modules') as string[] | undefined) ?? []).map((m) => ({ name: m.slice(0, Math.max(0, m.indexOf('='))) || m, path: m.slice(m.indexOf('=') + 1) })),
  };
  // LoRAConfig's validators (V:vllm/config/lora.py:37, 116-124), raised before anything starts.
  const loraError =
    lora.enabled && maxLoras < 1
      ? `ValueError: max_loras: Input should be greater than or equal to 1 [input_value=${maxLoras}]`
      : lora.enabled && maxCpuLoras !== undefined && maxCpuLoras < maxLoras
        ? `ValueError: max_cpu_loras (${maxCpuLoras}) must be >= max_loras (${maxLoras}).`
        : undefined;
  return {
    model,
    revision: (p.values.get('--revision') as string | undefined) ?? 'main',
    servedNames: names ?? [model],
    host: p.values.get('--host') as string | undefined,
    port: int('--port', DEFAULT_PORT),
    tp: int('--tensor-parallel-size', 1),
    pp: int('--pipeline-parallel-size', 1),
    shutdownTimeoutS: int('--shutdown-timeout', 0),
    apiKeys: keys.filter(Boolean),
    nnodes: int('--nnodes', 1),
    nodeRank: int('--node-rank', 0),
    masterAddr: (p.values.get('--master-addr') as string | undefined) ?? '127.0.0.1',
    masterPort: p.values.get('--master-port') as number | undefined,
    headless: p.values.get('--headless') === true,
    dp: int('--data-parallel-size', 1),
    dpLocal: p.values.get('--data-parallel-size-local') as number | undefined,
    dpStartRank: p.values.get('--data-parallel-start-rank') as number | undefined,
    dpAddress: p.values.get('--data-parallel-address') as string | undefined,
    dpRpcPort: p.values.get('--data-parallel-rpc-port') as number | undefined,
    ...api,
    runner: runner === 'pooling' ? 'pooling' : 'generate',
    loadTracking: p.values.get('--enable-server-load-tracking') === true,
    logStats: p.values.get('--disable-log-stats') !== true,
    version,
    knobs,
    sleepMode: p.values.get('--enable-sleep-mode') === true,
    schedulingPolicy: p.values.get('--scheduling-policy') === 'priority' ? 'priority' : 'fcfs',
    loadFormat: (p.values.get('--load-format') as string | undefined) ?? 'auto',
    ...(p.values.has('--max-model-len') ? { maxModelLen: String(p.values.get('--max-model-len')) } : {}),
    speculative: p.values.has('--speculative-config'),
    ...(p.values.has('--tokenizer') ? { tokenizer: { repo: String(p.values.get('--tokenizer')), revision: (p.values.get('--tokenizer-revision') as string | undefined) ?? 'main' } } : {}),
    ...draftOf(p.values.get('--speculative-config') as string | undefined),
    lora,
    ...(loraError && !api.startError ? { startError: loraError } : {}),
  };
}

/**
 * How many API server processes `vllm serve` runs (V:vllm/entrypoints/cli/serve.py:63-124):
 * none headless (a count given there is a ValueError); else the one given;
 * else 1 for an external load balancer, the local DP size for the hybrid
 * one, and the whole DP size for vLLM's own (internal) balancing, which is
 * what a plain `--data-parallel-size N` gets.
 */
export function apiServers(a: { headless: boolean; given?: number; dp: number; dpLocal?: number; externalLb: boolean; hybridLb: boolean }): { apiServers: number; startError?: string } {
  if (a.headless) {
    if (a.given !== undefined && a.given > 0) {
      return { apiServers: 0, startError: `ValueError: --api-server-count=${a.given} cannot be used with --headless (no API servers are started in headless mode).` };
    }
    return { apiServers: 0 };
  }
  if (a.externalLb && a.hybridLb) {
    return { apiServers: 1, startError: 'ValueError: Cannot use more than one data parallel load balancing mode.' };
  }
  if (a.given !== undefined) return { apiServers: a.given };
  if (a.externalLb) return { apiServers: 1 };
  if (a.hybridLb) return { apiServers: a.dpLocal ?? 1 };
  return { apiServers: a.dp };
}

/**
 * Worker processes on this node. Workers are separate processes whenever
 * the world size across DP is above 1 (V:vllm/config/parallel.py:912-957);
 * TP/PP across nodes splits tp × pp over them, DP puts tp × pp × local DP
 * ranks on each.
 */
export function localWorkers(o: Pick<FakeVllmOptions, 'tp' | 'pp' | 'dp' | 'dpLocal' | 'nnodes'>): number {
  if (o.tp * o.pp * o.dp <= 1) return 0;
  if (o.dp > 1) return o.tp * o.pp * (o.dpLocal ?? o.dp);
  return Math.max(1, Math.ceil((o.tp * o.pp) / o.nnodes));
}

/**
 * The address the multi-node leader binds its broadcast queue on:
 * VLLM_HOST_IP, else the default-route source address
 * (V:vllm/utils/network_utils.py:34-73). The double takes the first
 * non-internal IPv4 address as its stand-in for the default route.
 */
export function hostIp(env: NodeJS.ProcessEnv): string {
  if (env.VLLM_HOST_IP) return env.VLLM_HOST_IP;
  for (const addrs of Object.values(networkInterfaces())) {
    for (const a of addrs ?? []) if (a.family === 'IPv4' && !a.internal) return a.address;
  }
  return '127.0.0.1';
}
