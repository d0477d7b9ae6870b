import type { StartShard } from '../../../gen/llmgw/v1/agent_pb.js';
import { failure } from '../../../lib/errors.js';
import type { EngineConfig } from '../../config/agent-config.js';
import type { EngineSleepApi } from '../../../lib/engine-sleep-api.js';
import { ConfiguredEngine } from '../configured-engine.js';
import { VLLM_SLEEP_API } from './vllm-sleep.js';
import { vllmStartWarnings } from './vllm-start-warnings.js';
import type { LaunchPlan } from '../launch-plan.js';
import type { EngineMetrics } from '../engine-metrics.js';
import { parallelism, servedModelName, servesHttp } from '../shard-launch.js';
import { shutdownTimeoutS } from '../shutdown-timeout.js';
import type { ValidateShardOptions } from '../validate-shard.js';
import type { OwnedArgs } from '../owned-args.js';
import { type CodeLoadingArgs, codeLoadingArgsIn } from '../code-loading-args.js';
import { VLLM_CODE_LOADING_ARGS } from './vllm-args.js';

export const DEFAULT_VLLM_COMMAND: readonly string[] = ['vllm', 'serve'];

/** supervisor.stop_grace's own default, for an engine built without the configured one. */
const DEFAULT_STOP_GRACE_MS = 30_000;

/** The option strings vLLM's parser takes for the data-parallel size (V:vllm/engine/arg_utils.py:1083). */
const DP_SIZE_FLAGS = ['--data-parallel-size', '--data_parallel_size', '-dp'];

export interface VllmEngineOptions {
  /** supervisor.stop_grace: the drain vLLM is given (--shutdown-timeout) ends a margin before it. Default 30 s. */
  stopGraceMs?: number;
  /** This node's management address: every rank's VLLM_HOST_IP. */
  mgmtAddr?: string;
}

/**
 * The data-parallel size a profile asks for, through its args
 * (`--data-parallel-size N`, `-dp N` or `--data-parallel-size=N`): 1 when it
 * does not. The last one wins, as in argparse. Throws for a value that is not
 * a positive integer, so validation refuses the shard before launch.
 */
export function dataParallelSize(args: readonly string[]): number {
  let text: string | undefined;
  for (let i = 0; i < args.length; i++) {
    const a = args[i] as string;
    const eq = a.indexOf('=');
    const name = eq === -1 ? a : a.slice(0, eq);
    if (!DP_SIZE_FLAGS.includes(name)) continue;
    // A flag at the very end has no value: argparse would exit 2 at start-up.
    text = eq === -1 ? (args[i + 1] ?? '') : a.slice(eq + 1);
  }
  if (text === undefined) return 1;
  const n = Number(text);
  if (!/^\d+$/.test(text) || n < 1) throw failure(`profile args: --data-parallel-size ${JSON.stringify(text)} is not a positive integer`);
  return n;
}

/**
 * vLLM's OpenAI server. Multi-node the way vLLM does it without Ray: every
 * node runs `vllm serve` with --nnodes/--node-rank/--master-addr/--master-port
 * (TP/PP across nodes); rank 0 serves the API, the others run --headless and
 * open no HTTP port. A profile that asks for data parallelism in its args
 * spreads the DP ranks over the nodes instead (--data-parallel-size-local,
 * --data-parallel-start-rank, --data-parallel-address/-rpc-port: vLLM's
 * docs/serving/data_parallel_deployment.md), each node's GPUs holding
 * tp × pp × local DP ranks.
 */
/**
 * vLLM's series (V:vllm/v1/metrics/loggers.py at 2f41c894). A drain counts
 * the requests in the batch (:493-501) and those waiting for it (:503-511):
 * the running gauge alone ended drains with requests queued. Progress is any
 * token generated (per engine step, :1202-1204), any prefill completed
 * (prompt tokens are counted when a prefill ends, V:vllm/v1/metrics/stats.py:386-391)
 * and any request finished, which is all a pooling (embedding, rerank)
 * request ever shows: generation tokens alone called a busy embedding
 * model stalled.
 */
export const VLLM_METRICS: EngineMetrics = {
  runningGauges: ['vllm:num_requests_running'],
  inFlightGauges: ['vllm:num_requests_running', 'vllm:num_requests_waiting'],
  progressCounters: ['vllm:generation_tokens_total', 'vllm:prompt_tokens_total', 'vllm:request_success_total'],
};

export const VLLM_OWNED_ARGS: OwnedArgs = {
  flags: [
    '--host', '--port', '--uds', '--model', '--served-model-name',
    '--tensor-parallel-size', '-tp', '--pipeline-parallel-size', '-pp', '--shutdown-timeout',
    '--nnodes', '-n', '--node-rank', '-r', '--master-addr', '--master-port', '--headless',
    '--data-parallel-size-local', '-dpl', '--data-parallel-start-rank', '-dpr', '--data-parallel-rank', '-dpn',
    '--data-parallel-address', '-dpa', '--data-parallel-rpc-port', '-dpp',
  ],
  // The profile's own: it spreads DP ranks over the nodes (dataParallelSize).
  mayPass: ['--data-parallel-size', '-dp'],
  flexible: true,
};

/**
 * vLLM's other ways to run data parallelism, and the API-server count, which
 * the agent decides and a profile may set only where the operator lists the
 * option in engines.vllm.allowed_args (review engine-fidelity-2 §3 N2, N12;
 * spellings from test/fixtures/engines/vllm-serve-flags.txt):
 * - `--api-server-count`/`-asc` (V:vllm/entrypoints/openai/cli_args.py:386):
 *   more than one API server does not drain on SIGTERM (serve.py:277-286,
 *   391-407; V:vllm/v1/engine/core_client.py:567-586, 685-696), so every stop
 *   of such a shard cuts its streams; the agent runs one under DP.
 * - `--data-parallel-multi-port-external-lb`/`-dpm` (V:vllm/entrypoints/cli/serve.py:141-142):
 *   a supervisor opens `--port + i` per local rank and
 *   `--data-parallel-supervisor-port` (9256, cli_args.py:250), none of them
 *   validated or reserved, and its servers leave the process group
 *   (V:vllm/entrypoints/openai/dp_supervisor.py:251-257, 268-276), out of
 *   reach of the stop's group SIGKILL.
 * - `--data-parallel-hybrid-lb`/`-dph`, `--data-parallel-external-lb`/`-dpe`
 *   (V:vllm/engine/arg_utils.py:1127, 1132): other API-server layouts; `-dph`
 *   with the agent's `--headless` on ranks ≥ 1 is refused by vLLM
 *   (serve.py:186-187).
 */
export const VLLM_DP_LAUNCH_ARGS: CodeLoadingArgs = {
  refused: [
    ['--api-server-count', '-asc'],
    ['--data-parallel-multi-port-external-lb', '-dpm'],
    ['--data-parallel-supervisor-port'],
    ['--data-parallel-hybrid-lb', '-dph'],
    ['--data-parallel-external-lb', '-dpe'],
  ],
  modelPaths: [],
  // -dp (--data-parallel-size) begins -dpm, -dph and -dpe, and is the profile's own.
  mayPass: ['-dp'],
  flexible: true,
};

export class VllmEngine extends ConfiguredEngine {
  readonly name = 'vllm' as const;
  readonly metrics: EngineMetrics = VLLM_METRICS;
  override readonly sleepApi: EngineSleepApi = VLLM_SLEEP_API;
  readonly #shutdownTimeoutS: number;

  constructor(config: Partial<EngineConfig> | undefined, mgmtInterface: string, opts: VllmEngineOptions = {}) {
    super(config, mgmtInterface, opts.mgmtAddr);
    this.#shutdownTimeoutS = shutdownTimeoutS(opts.stopGraceMs ?? DEFAULT_STOP_GRACE_MS);
  }

  protected defaultCommand(): readonly string[] {
    return DEFAULT_VLLM_COMMAND;
  }

  startWarnings(plan: LaunchPlan): string[] {
    return vllmStartWarnings(plan);
  }

  /** What serverArgs() emits, with the parser's aliases (V:vllm/engine/arg_utils.py:845-1113, entrypoints/openai/cli_args.py:246-261, 379). */
  protected ownedArgs(): OwnedArgs {
    return VLLM_OWNED_ARGS;
  }

  protected override codeLoadingArgs(): CodeLoadingArgs {
    return VLLM_CODE_LOADING_ARGS;
  }

  /** `--api-key`, else VLLM_API_KEY (V:vllm/entrypoints/serve/middleware/register.py:33). */
  protected override apiKeyEnv(): string {
    return 'VLLM_API_KEY';
  }

  /**
   * VLLM_HOST_IP: a multi-node leader binds the queue its followers read
   * scheduler output from on get_ip(), which is VLLM_HOST_IP or else the
   * source address of a route to 8.8.8.8 (V:vllm/v1/executor/multiproc_executor.py:148-169,
   * V:vllm/utils/network_utils.py:34-73): on a node whose default route is
   * another network than the management one, followers were told an address
   * they cannot reach and start-up hung. Set on every rank, as NCCL's
   * interface is, so each announces the address the others dial it on.
   */
  protected override agentEnv(spec: StartShard): Record<string, string> {
    const env: Record<string, string> = this.mgmtAddr ? { VLLM_HOST_IP: this.mgmtAddr } : {};
    // /sleep, /wake_up and /is_sleeping are mounted only in dev mode
    // (V:vllm/entrypoints/launchers/api_server/routers.py:34-37), and only a
    // profile that asks for sleep gets it: dev mode opens other endpoints too.
    if (spec.profile?.sleepMode) env.VLLM_SERVER_DEV_MODE = '1';
    return env;
  }

  protected override engineValidation(spec: StartShard): Partial<ValidateShardOptions> {
    // Sleep mode turns on vLLM's dev endpoints (/sleep, /wake_up,
    // /collective_rpc, ...), which its API key does not guard
    // (V:vllm/entrypoints/serve/middleware/authenticate.py:11, 59 guards /v1 only):
    // the operator, not the control plane, opens them (security review 3, S6).
    if (spec.profile?.sleepMode && this.config.allowSleepMode !== true) {
      throw failure(
        `shard ${spec.shardId}: profile ${spec.profile.name || '(unnamed)'} sets sleep_mode, which opens vLLM's dev endpoints (/sleep, /collective_rpc) without a key; set engines.vllm.allow_sleep_mode: true once the engine ports are firewalled to the router and the agent`,
      );
    }
    const launchMode = codeLoadingArgsIn(spec.profile?.args ?? [], VLLM_DP_LAUNCH_ARGS, this.config.allowedArgs ?? [])[0];
    if (launchMode) {
      const given = launchMode.given === launchMode.flag ? launchMode.flag : `${launchMode.given} (${launchMode.flag})`;
      throw failure(
        `shard ${spec.shardId}: profile args set ${given}, which changes how vLLM runs its API servers and data-parallel ranks (ports, processes, and whether a stop drains); remove it, or list ${launchMode.flag} in engines.vllm.allowed_args to allow it`,
      );
    }
    const dp = dataParallelSize(spec.profile?.args ?? []);
    const { nnodes } = parallelism(spec);
    if (nnodes > 1 && dp > 1 && dp % nnodes !== 0) {
      throw failure(`shard ${spec.shardId}: --data-parallel-size ${dp} does not divide over ${nnodes} nodes; use a multiple of ${nnodes}`);
    }
    return { dataParallelSize: dp };
  }

  protected serverArgs(spec: StartShard): string[] {
    const { tp, pp, nnodes } = parallelism(spec);
    const args = [spec.profile?.model ?? ''];
    if (servesHttp(spec)) args.push('--host', '0.0.0.0', '--port', String(spec.httpPort));
    args.push('--served-model-name', servedModelName(spec), '--tensor-parallel-size', String(tp), '--pipeline-parallel-size', String(pp));
    // Without it vLLM aborts in-flight requests on SIGTERM (its default is 0).
    // DP headless ranks wait as long for their workers (serve.py:248-256);
    // TP/PP headless ranks exit at once (serve.py:195-223).
    if (this.#shutdownTimeoutS > 0) args.push('--shutdown-timeout', String(this.#shutdownTimeoutS));
    // V:vllm/engine/arg_utils.py:919-921: sleep needs the cumem allocator from the start.
    if (spec.profile?.sleepMode) args.push('--enable-sleep-mode');
    const dp = dataParallelSize(spec.profile?.args ?? []);
    // Under DP vLLM runs one API server per DP rank by default (V:vllm/entrypoints/cli/serve.py:107-124),
    // and those cut every stream on SIGTERM (VLLM_DP_LAUNCH_ARGS); one API server drains for
    // --shutdown-timeout, its client owning the engines (V:vllm/v1/engine/core_client.py:609-613).
    // The cost is front-end throughput. Never on a headless rank, where vLLM refuses it (serve.py:63-70).
    if (dp > 1 && servesHttp(spec)) args.push('--api-server-count', '1');
    if (nnodes > 1) {
      if (dp > 1) {
        // The profile's own --data-parallel-size stays in its args; each node
        // runs its share of the DP ranks, rank 0's coordinator at the leader.
        const local = dp / nnodes;
        args.push('--data-parallel-size-local', String(local));
        if (spec.rank !== 0) args.push('--data-parallel-start-rank', String(spec.rank * local));
        args.push('--data-parallel-address', spec.leaderAddr, '--data-parallel-rpc-port', String(spec.leaderPort));
      } else {
        args.push('--nnodes', String(nnodes), '--node-rank', String(spec.rank), '--master-addr', spec.leaderAddr, '--master-port', String(spec.leaderPort));
      }
      if (spec.rank !== 0) args.push('--headless');
    }
    return args;
  }
}
