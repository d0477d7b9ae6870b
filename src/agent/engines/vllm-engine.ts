import type { StartShard } from '../../gen/llmgw/v1/agent_pb.js';
import type { EngineConfig } from '../config/agent-config.js';
import type { Engine, LaunchPlan, ValidationContext } from './engine.js';
import { parallelism, servedModelName, servesHttp, shardEnv } from './shard-launch.js';
import { validateShard } from './validate-shard.js';

export const DEFAULT_VLLM_COMMAND: readonly string[] = ['vllm', 'serve'];

/**
 * vLLM's OpenAI server. Multi-node the way vLLM does it without Ray: every
 * node runs `vllm serve` with --nnodes/--node-rank/--master-addr/--master-port;
 * rank 0 serves the API, the others run --headless and open no HTTP port.
 */
export class VllmEngine implements Engine {
  readonly name = 'vllm' as const;
  readonly inFlightMetric = 'vllm:num_requests_running';
  readonly #config: EngineConfig;
  readonly #mgmtInterface: string;

  constructor(config: EngineConfig | undefined, mgmtInterface: string) {
    this.#config = { command: [], env: {}, extraArgs: [], ...config };
    this.#mgmtInterface = mgmtInterface;
  }

  #prefix(): string[] {
    return this.#config.command.length > 0 ? [...this.#config.command] : [...DEFAULT_VLLM_COMMAND];
  }

  validate(spec: StartShard, ctx: ValidationContext): Promise<void> {
    return validateShard(spec, ctx, { executable: this.#prefix()[0] as string, executableHint: 'set engines.vllm.command' });
  }

  servesHttp(spec: StartShard): boolean {
    return servesHttp(spec);
  }

  command(spec: StartShard): LaunchPlan {
    const { tp, pp, nnodes } = parallelism(spec);
    const argv = [...this.#prefix(), spec.profile?.model ?? ''];
    if (servesHttp(spec)) argv.push('--host', '0.0.0.0', '--port', String(spec.httpPort));
    argv.push('--served-model-name', servedModelName(spec), '--tensor-parallel-size', String(tp), '--pipeline-parallel-size', String(pp));
    if (nnodes > 1) {
      argv.push('--nnodes', String(nnodes), '--node-rank', String(spec.rank), '--master-addr', spec.leaderAddr, '--master-port', String(spec.leaderPort));
      if (spec.rank !== 0) argv.push('--headless');
    }
    argv.push(...(spec.profile?.args ?? []), ...this.#config.extraArgs);
    return { argv, env: shardEnv(spec, this.#mgmtInterface, this.#config.env) };
  }
}
