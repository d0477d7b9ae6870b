import type { StartShard } from '../../gen/llmgw/v1/agent_pb.js';
import type { EngineConfig } from '../config/agent-config.js';
import type { Engine, LaunchPlan, ValidationContext } from './engine.js';
import { hostPort, parallelism, servedModelName, servesHttp, shardEnv } from './shard-launch.js';
import { validateShard } from './validate-shard.js';

export const DEFAULT_SGLANG_COMMAND: readonly string[] = ['python3', '-m', 'sglang.launch_server'];

/**
 * SGLang's server. Multi-node: every node runs launch_server with --nnodes,
 * --node-rank and --dist-init-addr leader:port; only rank 0 serves HTTP.
 */
export class SglangEngine implements Engine {
  readonly name = 'sglang' as const;
  readonly inFlightMetric = 'sglang:num_running_reqs';
  readonly #config: EngineConfig;
  readonly #mgmtInterface: string;

  constructor(config: EngineConfig | undefined, mgmtInterface: string) {
    this.#config = { command: [], env: {}, extraArgs: [], ...config };
    this.#mgmtInterface = mgmtInterface;
  }

  #prefix(): string[] {
    return this.#config.command.length > 0 ? [...this.#config.command] : [...DEFAULT_SGLANG_COMMAND];
  }

  validate(spec: StartShard, ctx: ValidationContext): Promise<void> {
    return validateShard(spec, ctx, { executable: this.#prefix()[0] as string, executableHint: 'set engines.sglang.command' });
  }

  servesHttp(spec: StartShard): boolean {
    return servesHttp(spec);
  }

  command(spec: StartShard): LaunchPlan {
    const { tp, pp, nnodes } = parallelism(spec);
    const argv = [...this.#prefix(), '--model-path', spec.profile?.model ?? ''];
    if (servesHttp(spec)) argv.push('--host', '0.0.0.0', '--port', String(spec.httpPort));
    argv.push('--served-model-name', servedModelName(spec), '--tp-size', String(tp), '--pp-size', String(pp));
    if (nnodes > 1) {
      argv.push('--nnodes', String(nnodes), '--node-rank', String(spec.rank), '--dist-init-addr', hostPort(spec.leaderAddr, spec.leaderPort));
    }
    argv.push(...(spec.profile?.args ?? []), ...this.#config.extraArgs);
    return { argv, env: shardEnv(spec, this.#mgmtInterface, this.#config.env) };
  }
}
