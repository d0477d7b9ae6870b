import type { StartShard } from '../../gen/llmgw/v1/agent_pb.js';
import { ConfiguredEngine } from './configured-engine.js';
import { parallelism, servedModelName, servesHttp } from './shard-launch.js';

export const DEFAULT_VLLM_COMMAND: readonly string[] = ['vllm', 'serve'];

/**
 * vLLM's OpenAI server. Multi-node the way vLLM does it without Ray: every
 * node runs `vllm serve` with --nnodes/--node-rank/--master-addr/--master-port;
 * rank 0 serves the API, the others run --headless and open no HTTP port.
 */
export class VllmEngine extends ConfiguredEngine {
  readonly name = 'vllm' as const;
  readonly inFlightMetric = 'vllm:num_requests_running';

  protected defaultCommand(): readonly string[] {
    return DEFAULT_VLLM_COMMAND;
  }

  protected serverArgs(spec: StartShard): string[] {
    const { tp, pp, nnodes } = parallelism(spec);
    const args = [spec.profile?.model ?? ''];
    if (servesHttp(spec)) args.push('--host', '0.0.0.0', '--port', String(spec.httpPort));
    args.push('--served-model-name', servedModelName(spec), '--tensor-parallel-size', String(tp), '--pipeline-parallel-size', String(pp));
    if (nnodes > 1) {
      args.push('--nnodes', String(nnodes), '--node-rank', String(spec.rank), '--master-addr', spec.leaderAddr, '--master-port', String(spec.leaderPort));
      if (spec.rank !== 0) args.push('--headless');
    }
    return args;
  }
}
