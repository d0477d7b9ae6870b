import { create } from '@bufbuild/protobuf';
import { type StartShard, StartShardSchema } from '../../src/gen/llmgw/v1/agent_pb.js';
import { FAKE_SGLANG, FAKE_VLLM } from './fake-engines.js';

/*
 * Shards of the engine doubles (bin/fake-vllm, bin/fake-sglang) as a
 * control plane would start them, and the agent configuration that runs
 * the doubles in place of the engines. Free of vitest, like sim-shards.ts.
 */

/** engines: block that makes the agent's vllm and sglang engines run the doubles, with the agent's own command lines. */
export const DOUBLE_ENGINES_YAML = ['engines:', '  vllm:', `    command: [${FAKE_VLLM}, serve]`, '    allow_sleep_mode: true', '  sglang:', `    command: [${FAKE_SGLANG}, serve]`, ''].join('\n');

export interface DoubleStartOptions {
  /** The GPUs; one per tensor-parallel rank. [0] by default. */
  gpus?: number[];
  /** The profile's args (knobs such as --sim-token-latency ride here). */
  args?: string[];
  env?: Record<string, string>;
  /** Multi-node: this rank of nnodes, whose leader listens on leaderPort. */
  nnodes?: number;
  rank?: number;
  leaderPort?: number;
  model?: string;
}

/** A StartShard of `engine` ('vllm' or 'sglang') serving model 'm' on `port`, tensor parallel over its GPUs. */
export function doubleStart(engine: 'vllm' | 'sglang', shardId: string, port: number, opts: DoubleStartOptions = {}): StartShard {
  const gpus = opts.gpus ?? [0];
  return create(StartShardSchema, {
    shardId,
    replicaId: `r-${shardId}`,
    rank: opts.rank ?? 0,
    nnodes: opts.nnodes ?? 1,
    gpuIndices: gpus,
    httpPort: port,
    leaderAddr: opts.nnodes ? '127.0.0.1' : '',
    leaderPort: opts.leaderPort ?? 0,
    profile: {
      name: `${engine}-double`,
      engine,
      model: opts.model ?? 'org/m',
      servedModelName: 'm',
      tensorParallelSize: gpus.length * (opts.nnodes ?? 1),
      args: opts.args ?? [],
      env: opts.env ?? {},
    },
  });
}

/** POSTs a streamed chat completion of `maxTokens` to the double on `port`. */
export function streamChat(port: number, maxTokens: number, headers: Record<string, string> = {}): Promise<Response> {
  return fetch(`http://127.0.0.1:${port}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }], max_tokens: maxTokens, stream: true }),
  });
}
