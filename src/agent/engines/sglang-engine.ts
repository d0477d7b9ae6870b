import type { StartShard } from '../../gen/llmgw/v1/agent_pb.js';
import { ConfiguredEngine } from './configured-engine.js';
import { hostPort, parallelism, servedModelName, servesHttp } from './shard-launch.js';

export const DEFAULT_SGLANG_COMMAND: readonly string[] = ['python3', '-m', 'sglang.launch_server'];

/**
 * SGLang's server. Multi-node: every node runs launch_server with --nnodes,
 * --node-rank and --dist-init-addr leader:port; only rank 0 serves HTTP.
 */
export class SglangEngine extends ConfiguredEngine {
  readonly name = 'sglang' as const;
  readonly inFlightMetric = 'sglang:num_running_reqs';

  protected defaultCommand(): readonly string[] {
    return DEFAULT_SGLANG_COMMAND;
  }

  protected serverArgs(spec: StartShard): string[] {
    const { tp, pp, nnodes } = parallelism(spec);
    const args = ['--model-path', spec.profile?.model ?? ''];
    if (servesHttp(spec)) args.push('--host', '0.0.0.0', '--port', String(spec.httpPort));
    args.push('--served-model-name', servedModelName(spec), '--tp-size', String(tp), '--pp-size', String(pp));
    if (nnodes > 1) {
      args.push('--nnodes', String(nnodes), '--node-rank', String(spec.rank), '--dist-init-addr', hostPort(spec.leaderAddr, spec.leaderPort));
    }
    return args;
  }
}
