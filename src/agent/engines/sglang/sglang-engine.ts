import type { StartShard } from '../../../gen/llmgw/v1/agent_pb.js';
import type { EngineConfig } from '../../config/agent-config.js';
import type { EngineSleepApi } from '../../../lib/engine-sleep-api.js';
import { ConfiguredEngine } from '../configured-engine.js';
import { SGLANG_SLEEP_API } from './sglang-sleep.js';
import { engineAdminApiKey } from '../engine-api-key.js';
import type { LaunchPlan } from '../engine.js';
import type { EngineMetrics } from '../engine-metrics.js';
import type { OwnedArgs } from '../owned-args.js';
import type { CodeLoadingArgs } from '../code-loading-args.js';
import { SGLANG_CODE_LOADING_ARGS } from './sglang-args.js';
import { hostPort, parallelism, servedModelName, servesHttp } from '../shard-launch.js';

export const DEFAULT_SGLANG_COMMAND: readonly string[] = ['python3', '-m', 'sglang.launch_server'];

/**
 * Limit of one SGLang health probe. Its /health_generate submits a one-token
 * generation and sleeps 1 s before it first looks for output, answering 200
 * once any output arrived (S:python/sglang/srt/entrypoints/http_server.py:654-725
 * at v0.5.18): every healthy answer takes at least a second, so a limit
 * derived from a short health_interval (500 ms) failed every probe of a
 * healthy engine. SGLang gives up by itself after 20 s without output (503,
 * :192); 5 s is a healthy answer's time several times over, and still finds
 * a hung engine in three probes.
 */
export const SGLANG_PROBE_TIMEOUT_MS = 5000;

/**
 * SGLang's series (S:python/sglang/srt/observability/metrics_collector.py at
 * v0.5.18). In flight for a drain: the running batch, the waiting queue and
 * the grammar queue (:268-285; metrics_reporter.py:1188-1209). These gauges
 * are published at each prefill batch and only every --decode-log-interval
 * decode steps (default 40) while the batch decodes (metrics_reporter.py:666-679,
 * 750-764), so a short request alone may never show in them: a count of 0
 * is "nothing seen", not "idle" (review engine-fidelity-2 §1 #5).
 *
 * Progress is `realtime_tokens_total` over every mode, which grows on every
 * decode step and every prefill (:884-891; metrics_reporter.py:628-636,
 * 726-733), and requests finishing. Not `generation_tokens_total`: it grows
 * once per finished request by its whole count (:1740-1757, from
 * tokenizer_manager.py:2908), so one long generation left it flat and a
 * healthy replica was called stalled.
 *
 * The first progress counter is the one whose rate is reported as
 * generation tokens per second: `mode="decode"` alone. The other modes are
 * prompt tokens computed (prefill_compute) and prompt tokens served from the
 * prefix cache (prefill_cache, metrics_reporter.py:632-636): counted in, the
 * same load read several times vLLM's generation rate, and rose with cache
 * hits (N7). Counted twice in progress, decode changes nothing there: any
 * change of the sum is progress.
 */
export const SGLANG_METRICS: EngineMetrics = {
  runningGauges: ['sglang:num_running_reqs'],
  inFlightGauges: ['sglang:num_running_reqs', 'sglang:num_queue_reqs', 'sglang:num_grammar_queue_reqs'],
  progressCounters: ['sglang:realtime_tokens_total{mode="decode"}', 'sglang:realtime_tokens_total', 'sglang:num_requests_total'],
};

export interface SglangEngineOptions {
  /** This node's management address ('' when unknown). */
  mgmtAddr?: string;
}

/**
 * SGLang's server. Multi-node: every node runs launch_server with --nnodes,
 * --node-rank and --dist-init-addr leader:port; rank 0 serves the API.
 * A rank ≥ 1 serves /health too, on its own --host:--port (default
 * 127.0.0.1:30000), once its schedulers are ready
 * (S:python/sglang/srt/entrypoints/engine.py:1150-1169, utils/common.py:3273-3330):
 * it is given the shard's http_port on 127.0.0.1, so two worker ranks on a
 * node no longer fight over 30000, and that /health is its readiness.
 *
 * Stopping: SGLang has no shutdown-timeout flag. A SIGTERM to its main
 * process alone drains with no time limit (tokenizer_manager.py:3114-3158),
 * so the supervisor's SIGKILL after stop_grace is the only bound; its
 * schedulers have no SIGTERM handler and must never get one from the agent
 * (the stop signals the main process first). Its SIGTERM handler is
 * installed by the first generate request, which the built-in warmup
 * sends: llmgw never emits --skip-server-warmup, or a SIGTERM to an engine
 * that has served nothing yet would skip the drain.
 */
export class SglangEngine extends ConfiguredEngine {
  readonly name = 'sglang' as const;
  readonly metrics: EngineMetrics = SGLANG_METRICS;
  override readonly sleepApi: EngineSleepApi = SGLANG_SLEEP_API;

  constructor(config: Partial<EngineConfig> | undefined, mgmtInterface: string, opts: SglangEngineOptions = {}) {
    super(config, mgmtInterface, opts.mgmtAddr);
  }

  protected defaultCommand(): readonly string[] {
    return DEFAULT_SGLANG_COMMAND;
  }

  /** What serverArgs() emits, with the parser's aliases (S:python/sglang/srt/server_args.py, fixtures/engines/sglang-server-flags.txt). */
  protected ownedArgs(): OwnedArgs {
    return {
      flags: [
        '--host',
        '--port',
        '--model-path',
        '--model',
        '--served-model-name',
        '--tp-size',
        '--tensor-parallel-size',
        '--pp-size',
        '--pipeline-parallel-size',
        '--nnodes',
        '--node-rank',
        '--dist-init-addr',
        // Whether a sleep keeps the weights is the agent's to know: its host-RAM check and its wake depend on it.
        '--enable-weights-cpu-backup',
      ],
    };
  }

  protected override codeLoadingArgs(): CodeLoadingArgs {
    return SGLANG_CODE_LOADING_ARGS;
  }

  /** The generating check whatever SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION says (environ.py:319 makes /health one by default). */
  protected override apiHealthPath(): string {
    return '/health_generate';
  }

  protected override probeTimeoutMs(): number {
    return SGLANG_PROBE_TIMEOUT_MS;
  }

  /** --admin-api-key from the profile args or extra_args: the key of SGLang's pause and memory routes (EngineWatch.adminApiKey). */
  protected override adminApiKey(plan: LaunchPlan): string {
    return engineAdminApiKey(plan.argv);
  }

  protected override workerHealthPort(spec: StartShard): number {
    return spec.httpPort;
  }

  override workerListens(spec: StartShard): boolean {
    return !servesHttp(spec);
  }

  /**
   * SGLANG_HOST_IP: the writer of the cross-node broadcast queue of a TP
   * group binds its ZMQ socket on get_local_ip_auto(), which is
   * SGLANG_HOST_IP, then HOST_IP, then the source address of a route to
   * 8.8.8.8 (S:python/sglang/srt/utils/network.py:334-373;
   * distributed/device_communicators/shm_broadcast.py:194-197, 235-246):
   * on a node whose default route is another network, readers on the other
   * nodes were given an address they cannot reach. Set on every rank; it
   * must be this node's own address, since the writer binds it.
   */
  protected override agentEnv(_spec: StartShard): Record<string, string> {
    return this.mgmtAddr ? { SGLANG_HOST_IP: this.mgmtAddr } : {};
  }

  protected serverArgs(spec: StartShard): string[] {
    const { tp, pp, nnodes } = parallelism(spec);
    const args = ['--model-path', spec.profile?.model ?? ''];
    if (servesHttp(spec)) args.push('--host', '0.0.0.0', '--port', String(spec.httpPort));
    else if (spec.httpPort > 0) args.push('--host', '127.0.0.1', '--port', String(spec.httpPort));
    args.push('--served-model-name', servedModelName(spec), '--tp-size', String(tp), '--pp-size', String(pp));
    // Off by default in SGLang; without it /metrics is not even mounted, and
    // drain and stall detection have nothing to read.
    args.push('--enable-metrics');
    // S:python/sglang/srt/server_args.py:3478-3482: without it a release of GPU memory is a no-op.
    // --enable-weights-cpu-backup (:3483-3487, default False): without it a release of the
    // weights drops them (torch_memory_saver pauses without a copy, and its resume maps fresh
    // memory: csrc/core.cpp at 1a565eb; load_model_utils.py:281-300), and the woken engine
    // answers health checks and garbage alike (review engine-fidelity-2 N1). With it every
    // release copies the weights to pinned host memory, kept for the engine's life (core.cpp
    // resume), whatever the sleep level: the backup is chosen per region when the weights
    // are loaded, not per release. That is what the level-1 host-RAM check now guards.
    if (spec.profile?.sleepMode) args.push('--enable-memory-saver', '--enable-weights-cpu-backup');
    if (nnodes > 1) {
      args.push('--nnodes', String(nnodes), '--node-rank', String(spec.rank), '--dist-init-addr', hostPort(spec.leaderAddr, spec.leaderPort));
    }
    return args;
  }
}
