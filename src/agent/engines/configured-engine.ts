import type { EngineMetrics } from './engine-metrics.js';
import type { StartShard } from '../../gen/llmgw/v1/agent_pb.js';
import type { EngineConfig, EngineName } from '../config/agent-config.js';
import type { Engine, LaunchPlan, ValidationContext } from './engine.js';
import { servesHttp, shardEnv } from './shard-launch.js';
import { validateShard } from './validate-shard.js';

/**
 * What every engine shares: the command from `engines.<name>.command` (or
 * the engine's default), its env and extra_args, validation before anything
 * is launched, and rank 0 being the one that serves HTTP. An engine says only
 * how its server's own arguments are spelled.
 *
 * argv is always [...command, ...server args, ...profile args, ...extra_args]:
 * an array handed to execve, so nothing in it is interpreted by a shell.
 */
export abstract class ConfiguredEngine implements Engine {
  abstract readonly name: EngineName;
  abstract readonly metrics: EngineMetrics;
  protected readonly config: EngineConfig;

  constructor(
    config: EngineConfig | undefined,
    private readonly mgmtInterface: string,
  ) {
    this.config = { command: [], env: {}, extraArgs: [], ...config };
  }

  /** The argv prefix that starts the engine when config does not say. */
  protected abstract defaultCommand(): readonly string[];

  /** The engine's own arguments for this shard: model, port, parallelism, multi-node. */
  protected abstract serverArgs(spec: StartShard): string[];

  protected prefix(): string[] {
    return this.config.command.length > 0 ? [...this.config.command] : [...this.defaultCommand()];
  }

  validate(spec: StartShard, ctx: ValidationContext): Promise<void> {
    return validateShard(spec, ctx, { executable: this.prefix()[0] as string, executableHint: `set engines.${this.name}.command` });
  }

  servesHttp(spec: StartShard): boolean {
    return servesHttp(spec);
  }

  command(spec: StartShard): LaunchPlan {
    const argv = [...this.prefix(), ...this.serverArgs(spec), ...(spec.profile?.args ?? []), ...this.config.extraArgs];
    return { argv, env: shardEnv(spec, this.mgmtInterface, this.config.env) };
  }
}
