import type { StartShard } from '../../gen/llmgw/v1/agent_pb.js';
import { ConfiguredEngine } from './configured-engine.js';
import type { EngineMetrics } from './engine-metrics.js';
import { hostPort, parallelism, servedModelName, servesHttp } from './shard-launch.js';

export const DEFAULT_SGLANG_COMMAND: readonly string[] = ['python3', '-m', 'sglang.launch_server'];

/**
 * SGLang's server. Multi-node: every node runs launch_server with --nnodes,
 * --node-rank and --dist-init-addr leader:port; only rank 0 serves HTTP.
 *
 * Stopping: SGLang has no shutdown-timeout flag. On SIGTERM it drains with no
 * time limit (ENGINES.md (c)), so the supervisor's SIGKILL after stop_grace is
 * the only bound, which is what stop already does. Its SIGTERM handler is
 * installed by the first generate request, which the built-in warmup sends:
 * llmgw never emits --skip-server-warmup, or a SIGTERM to an engine that has
 * served nothing yet would skip the drain.
 */
export class SglangEngine extends ConfiguredEngine {
  readonly name = 'sglang' as const;
  readonly metrics: EngineMetrics = { requestsRunning: 'sglang:num_running_reqs', generationTokens: 'sglang:generation_tokens_total' };

  protected defaultCommand(): readonly string[] {
    return DEFAULT_SGLANG_COMMAND;
  }

  protected serverArgs(spec: StartShard): string[] {
    const { tp, pp, nnodes } = parallelism(spec);
    const args = ['--model-path', spec.profile?.model ?? ''];
    if (servesHttp(spec)) args.push('--host', '0.0.0.0', '--port', String(spec.httpPort));
    args.push('--served-model-name', servedModelName(spec), '--tp-size', String(tp), '--pp-size', String(pp));
    // Off by default in SGLang; without it /metrics is not even mounted, and
    // drain and stall detection have nothing to read.
    args.push('--enable-metrics');
    if (nnodes > 1) {
      args.push('--nnodes', String(nnodes), '--node-rank', String(spec.rank), '--dist-init-addr', hostPort(spec.leaderAddr, spec.leaderPort));
    }
    return args;
  }
}
