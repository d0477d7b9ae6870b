import { fileURLToPath } from 'node:url';
import type { StartShard } from '../../gen/llmgw/v1/agent_pb.js';
import type { EngineConfig } from '../config/agent-config.js';
import type { Engine, LaunchPlan, ValidationContext } from './engine.js';
import { servedModelName, servesHttp, shardEnv } from './shard-launch.js';
import { validateShard } from './validate-shard.js';

/** This package's bin/run.js: from dist/agent/engines/ (or src/ under tests) up three levels. */
export const LLMGW_BIN = fileURLToPath(new URL('../../../bin/run.js', import.meta.url));

/**
 * `llmgw sim engine`, this binary's simulated vLLM. It is validated like a
 * real engine (GPU indices against the, usually fake, inventory; TP × PP;
 * ports) so tests of the agent exercise the same refusals. Workers of a
 * multi-node shard run the same command with --worker and serve no HTTP.
 */
export class SimEngine implements Engine {
  readonly name = 'sim' as const;
  /** The sim exports vLLM's gauge names. */
  readonly inFlightMetric = 'vllm:num_requests_running';
  readonly #config: EngineConfig;
  readonly #mgmtInterface: string;

  constructor(config: EngineConfig | undefined, mgmtInterface: string) {
    this.#config = { command: [], env: {}, extraArgs: [], ...config };
    this.#mgmtInterface = mgmtInterface;
  }

  validate(spec: StartShard, ctx: ValidationContext): Promise<void> {
    return validateShard(spec, ctx, { executable: process.execPath, executableHint: 'the node binary running llmgw has gone' });
  }

  servesHttp(spec: StartShard): boolean {
    return servesHttp(spec);
  }

  command(spec: StartShard): LaunchPlan {
    const argv = [process.execPath, LLMGW_BIN, 'sim', 'engine', '--host', '127.0.0.1', '--port', String(spec.httpPort), '--model', servedModelName(spec)];
    if (!servesHttp(spec)) argv.push('--worker');
    argv.push(...(spec.profile?.args ?? []), ...this.#config.extraArgs);
    return { argv, env: shardEnv(spec, this.#mgmtInterface, this.#config.env) };
  }
}
