import { fileURLToPath } from 'node:url';
import type { StartShard } from '../../../gen/llmgw/v1/agent_pb.js';
import { ConfiguredEngine } from '../configured-engine.js';
import type { EngineMetrics } from '../engine-metrics.js';
import type { OwnedArgs } from '../owned-args.js';
import { servedModelName, servesHttp } from '../shard-launch.js';
import { VLLM_METRICS } from '../vllm/vllm-engine.js';

/** This package's bin/run.js: from dist/agent/engines/sim/ (or src/ under tests) up four levels. */
export const LLMGW_BIN = fileURLToPath(new URL('../../../../bin/run.js', import.meta.url));

/**
 * `llmgw sim engine`, this binary's simulated vLLM. It is validated like a
 * real engine (GPU indices against the, usually fake, inventory; TP × PP;
 * ports) so tests of the agent exercise the same refusals. Workers of a
 * multi-node shard run the same command with --worker and serve no HTTP.
 * It exports vLLM's metric names, generation-token counter included.
 */
export class SimEngine extends ConfiguredEngine {
  readonly name = 'sim' as const;
  /** The sim exports vLLM's gauge names. */
  readonly metrics: EngineMetrics = VLLM_METRICS;

  protected defaultCommand(): readonly string[] {
    return [process.execPath, LLMGW_BIN, 'sim', 'engine'];
  }

  protected ownedArgs(): OwnedArgs {
    return { flags: ['--host', '--port', '--model', '--worker', '--rendezvous'] };
  }

  /** The sim only names its model (--model); it reads nothing of it. */
  protected override loadsModel(): boolean {
    return false;
  }

  protected serverArgs(spec: StartShard): string[] {
    // All interfaces, as vLLM and SGLang are started: the control plane
    // publishes http://<mgmt_addr>:<port>, which a loopback bind would refuse.
    const args = ['--host', '0.0.0.0', '--port', String(spec.httpPort), '--model', servedModelName(spec)];
    if (!servesHttp(spec)) args.push('--worker');
    // Rank 0 holds the gang's rendezvous, the other ranks join it (sim-rendezvous.ts), as vLLM's --master-port and SGLang's --dist-init-addr.
    if (spec.nnodes > 1 && spec.leaderPort > 0 && spec.leaderAddr !== '') args.push('--rendezvous', `${spec.leaderAddr.includes(':') ? `[${spec.leaderAddr}]` : spec.leaderAddr}:${spec.leaderPort}`);
    return args;
  }
}
